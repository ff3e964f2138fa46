//! A reserve of disk space beside the stash (`-reserve`), spent by a trim on a full disk.
//!
//! SQLite cannot delete without room: the pages a delete changes go to the write-ahead
//! log first, and the file shrinks only once a checkpoint copies them back. On a full
//! disk a trim (the one thing a user wants then) would fail for want of the space it is
//! meant to free. So a writer keeps [`BYTES`] of zeroes in a file of its own, once the
//! stash's files hold [`FROM`] (a small stash has none) and only where the file system has
//! room to spare ([`SPARE`]); a trim that finds the disk full removes it and goes on in
//! its place, and once the trim has given space back, the reserve is made again.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::files::sibling;

/// Suffix of the reserve's file.
pub(crate) const RESERVE: &str = "-reserve";
/// Bytes the reserve holds: the pages a trim's deletes and its checkpoint write.
pub(crate) const BYTES: u64 = 32 << 20;
/// Free bytes the file system must have for a reserve to be made: never the space that
/// fills a disk.
pub(crate) const SPARE: u64 = 2 * BYTES;
/// Bytes of the stash's files from which it keeps a reserve.
pub(crate) const FROM: u64 = 2 * BYTES;

fn path_of(db: &Path) -> PathBuf {
    sibling(db, RESERVE)
}

/// Free bytes of the file system holding `db`, where it tells.
fn free_bytes(db: &Path) -> Option<u64> {
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    #[cfg(unix)]
    {
        let stat = rustix::fs::statvfs(dir).ok()?;
        Some(stat.f_bavail.saturating_mul(stat.f_frsize))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// Makes the reserve if the stash is large enough to keep one, it is not there, and the
/// file system has room to spare; whether there is one now.
pub(crate) fn ensure(db: &Path) -> bool {
    let path = path_of(db);
    if path.metadata().is_ok_and(|m| m.len() >= BYTES) {
        return true;
    }
    if crate::files::database_bytes(db).map_or(true, |bytes| bytes < FROM)
        || free_bytes(db).is_none_or(|free| free < SPARE)
    {
        return false;
    }
    let made = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&path)?;
        let zeroes = vec![0u8; 1 << 20];
        for _ in 0..BYTES / zeroes.len() as u64 {
            file.write_all(&zeroes)?;
        }
        file.sync_all()
    })();
    if let Err(e) = made {
        log::debug!("objstash: no reserve beside {}: {e}", db.display());
        let _ = std::fs::remove_file(&path);
        return false;
    }
    true
}

/// Whether the stash at `db` has a reserve to spend.
pub(crate) fn kept(db: &Path) -> bool {
    path_of(db).metadata().is_ok_and(|m| m.len() > 0)
}

/// Gives the reserve's space back to the file system; whether there was one.
pub(crate) fn release(db: &Path) -> bool {
    let released = std::fs::remove_file(path_of(db)).is_ok();
    if released {
        log::warn!(
            "objstash: the disk under {} is full: its reserve of {} MiB is spent on a trim",
            db.display(),
            BYTES >> 20
        );
    }
    released
}
