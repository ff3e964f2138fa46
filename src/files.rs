//! The files of a stash: the database and the siblings SQLite and objstash put beside it.
//!
//! Every name derived from the database's path is made here, so the set of files that
//! belong to a stash (what `stats` counts, what salvage moves aside) is written down once.

use std::path::{Path, PathBuf};

/// Suffixes of the files SQLite keeps beside the database while it runs: their bytes
/// count toward the stash's size, and a damaged database is kept aside with them.
pub(crate) const JOURNALS: [&str; 3] = ["-wal", "-shm", "-journal"];
/// Suffix of the lock file every live handle holds shared (see `lock.rs`).
pub(crate) const LOCK: &str = "-lock";
/// Suffix of the lock file held while a handle opens or closes (see `lock.rs`).
pub(crate) const GATE: &str = "-open";

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Bytes of the database and its journal files on disk.
pub(crate) fn database_bytes(path: &Path) -> std::io::Result<u64> {
    let mut bytes = 0;
    for suffix in ["", "-wal", "-journal"] {
        match std::fs::metadata(sibling(path, suffix)) {
            Ok(meta) => bytes += meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_extend_the_file_name() {
        assert_eq!(sibling(Path::new("a/b.db"), "-wal"), PathBuf::from("a/b.db-wal"));
        assert_eq!(sibling(Path::new("b"), LOCK), PathBuf::from("b-lock"));
    }
}
