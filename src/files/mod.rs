//! The files of a stash: the database and the siblings SQLite and objstash put beside it.
//!
//! Every name derived from the database's path is made here, so the set of files that
//! belong to a stash (what `stats` counts, what salvage moves aside) is written down once.

pub(crate) mod lock;
pub(crate) mod owners;
pub(crate) mod reserve;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// Suffixes of the files SQLite keeps beside the database while it runs: their bytes
/// count toward the stash's size, and a damaged database is kept aside with them.
pub(crate) const JOURNALS: [&str; 3] = ["-wal", "-shm", "-journal"];
/// Suffix of the lock file every live handle holds shared (see `lock.rs`).
pub(crate) const LOCK: &str = "-lock";
/// Suffix of the lock file held while a handle opens or closes (see `lock.rs`).
pub(crate) const GATE: &str = "-open";

/// Suffix of the directory of the files that tell whether an assembly's owner lives
/// (see `owners.rs`).
pub(crate) const OWNERS: &str = "-owners";

/// Suffix of the file of values of a stash that keeps its values beside the database
/// (`value_log.rs`).
pub(crate) const VALUES: &str = "-values";

/// Suffix of the file where closing handles park the uses they did not report to a remote
/// yet (`remote/usage.rs`).
pub(crate) const REMOTE_USES: &str = "-remote-uses";

/// Suffix of the new file a salvage builds before it replaces the database.
pub(crate) const RECOVERING: &str = ".recovering";

/// The files a stash at `path` keeps, or may make: the database, SQLite's journals, the
/// lock files, the file of values, a salvage's new file and the reserve of disk space. Writing over any of them (an
/// object written to a path a user gave, a file imported) damages or reads the stash
/// itself: the command line refuses such paths.
pub fn stash_files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_path_buf()];
    for suffix in
        JOURNALS.iter().chain(&[LOCK, GATE, VALUES, RECOVERING, reserve::RESERVE, REMOTE_USES])
    {
        files.push(sibling(path, suffix));
    }
    files
}

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Bytes of the database, its journal files and its file of values on disk (of the file of
/// values, its allocated blocks: freed values are holes).
pub(crate) fn database_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    for suffix in ["", "-wal", "-journal", VALUES] {
        match std::fs::metadata(sibling(path, suffix)) {
            Ok(meta) if suffix == VALUES => bytes += meta.blocks() * 512,
            Ok(meta) => bytes += meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(bytes)
}

/// Keeps the damaged file under a new name (a hard link, so the original path can be
/// replaced atomically), with any WAL files SQLite would otherwise apply to the new one.
pub(crate) fn keep_damaged(path: &Path) -> Result<PathBuf> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut n = 0;
    let copy = loop {
        let candidate = sibling(
            path,
            &format!(".damaged-{secs}{}", if n == 0 { String::new() } else { format!("-{n}") }),
        );
        if !candidate.exists() {
            break candidate;
        }
        n += 1;
    };
    if fs::hard_link(path, &copy).is_err() {
        fs::copy(path, &copy)
            .map_err(|e| Error::io(format!("keeping a copy of damaged {}", path.display()), e))?;
    }
    for suffix in JOURNALS {
        let side = sibling(path, suffix);
        if side.exists() {
            fs::rename(&side, sibling(&copy, suffix))
                .map_err(|e| Error::io(format!("moving {} aside", side.display()), e))?;
        }
    }
    Ok(copy)
}

/// Removes `path` if it is there.
pub(crate) fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing stale {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

/// Syncs the directory of `path`, so that a rename into it survives a stop of the machine.
pub(crate) fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Err(e) = fs::File::open(dir).and_then(|d| d.sync_all()) {
            log::warn!("objstash: could not sync directory {}: {e}", dir.display());
        }
    }
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
