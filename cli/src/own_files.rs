//! The stash's own files (`objstash::stash_files`): a path a command would write an object
//! to, or import, that is one of them would damage the stash or store the stash in itself.

use std::path::{Path, PathBuf};

/// `path` resolved as far as the file system allows: an existing file canonically, one
/// that does not exist yet by its directory's canonical path and its name.
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(real) = path.canonicalize() {
        return Some(real);
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(parent.canonicalize().ok()?.join(path.file_name()?))
}

/// The same file on disk (one inode, through a hard link too), where both exist.
#[cfg(unix)]
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_inode(_: &Path, _: &Path) -> bool {
    false
}

/// Whether `path` is (or would be) one of the files of the stash at `db`.
pub fn is_stash_file(db: &Path, path: &Path) -> bool {
    let target = resolved(path);
    objstash::stash_files(db)
        .iter()
        .any(|own| same_inode(own, path) || (target.is_some() && resolved(own) == target))
}
