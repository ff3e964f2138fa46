//! The lock file that gives one handle at a time the right to write a stash.
//!
//! SQLite's own locks protect single transactions; objstash also needs to know, when it
//! opens, whether the `open-fast` marker it finds belongs to a live writer or to a dead
//! one. An exclusive advisory lock on `<db>-lock`, held for the life of the handle and
//! released by the kernel when the process dies, answers that: whoever holds it is the
//! only writer, so a marker found while holding it was left by a crash.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::files::{LOCK, sibling};

/// The held lock of one stash. An open that fails calls [`Lock::abandon`], which removes
/// the lock file again if this open created it, so a path that turned out not to hold a
/// stash is left as it was found.
#[derive(Debug)]
pub(crate) struct Lock {
    file: File,
    path: PathBuf,
    created: bool,
}

impl Lock {
    /// Takes the write lock of the stash at `db`, or fails at once if another handle has it.
    pub(crate) fn acquire(db: &Path) -> Result<Lock> {
        let path = sibling(db, LOCK);
        let created = !path.exists();
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| {
                Error::io(
                    format!(
                        "cannot create the lock file {}: a stash needs a writable directory",
                        path.display()
                    ),
                    e,
                )
            })?;
        match file.try_lock() {
            Ok(()) => Ok(Lock { file, path, created }),
            Err(TryLockError::WouldBlock) => Err(Error::Locked { path: db.to_path_buf() }),
            Err(TryLockError::Error(e)) => Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }

    /// Releases the lock after a failed open, removing the file if this open made it.
    pub(crate) fn abandon(self) {
        if self.created
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            log::debug!("objstash: removing {}: {e}", self.path.display());
        }
        drop(self.file);
    }
}
