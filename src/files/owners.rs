//! Owners: who holds an assembly (`writer/models.rs`), in a way another process can test
//! for life. A handle that starts its first assembly makes a file of its own under
//! `<db>-owners/` and holds an exclusive lock on it for its life; the kernel releases the
//! lock when the process dies, however it dies. Another handle that can take the lock
//! knows the owner is gone, and gives its assemblies up (`Writer::give_up_orphans`).
//! A handle that never assembles makes no file.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::files::{OWNERS, sibling};

/// This handle as an owner: made at its first assembly, removed when it closes.
#[derive(Debug)]
pub(crate) struct Owner {
    dir: PathBuf,
    held: Mutex<Option<(String, File)>>,
}

impl Owner {
    pub(crate) fn new(db: &Path) -> Owner {
        Owner { dir: sibling(db, OWNERS), held: Mutex::new(None) }
    }

    /// This handle's owner name, its file made and locked the first time.
    pub(crate) fn name(&self) -> Result<String> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((name, _)) = &*held {
            return Ok(name.clone());
        }
        let io = |source| Error::Io {
            context: format!("making an owner file in {}", self.dir.display()),
            source,
        };
        fs::create_dir_all(&self.dir).map_err(io)?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("{}-{nanos:x}", std::process::id());
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(self.dir.join(&name))
            .map_err(io)?;
        file.lock().map_err(io)?;
        *held = Some((name.clone(), file));
        Ok(name)
    }

    /// This handle's owner name, if it has made one.
    pub(crate) fn made(&self) -> Option<String> {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(n, _)| n.clone())
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let held = self.held.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((name, file)) = held {
            // Removed while still locked, so that no other handle takes it for a dead one's.
            let _ = fs::remove_file(self.dir.join(name));
            drop(file);
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

/// Whether the owner `name` of the stash at `db` is gone: its file is missing, or its lock
/// can be taken (its process died). A gone owner's file is removed.
pub(crate) fn gone(db: &Path, name: &str) -> bool {
    let path = sibling(db, OWNERS).join(name);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = fs::remove_file(&path);
            true
        }
        Err(TryLockError::WouldBlock) | Err(TryLockError::Error(_)) => false,
    }
}
