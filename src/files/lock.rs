//! The lock files that tell a handle whether it is alone with a stash.
//!
//! Any number of handles, in any number of processes, may have a stash open; SQLite's own
//! locks order their transactions. What SQLite cannot say is whether an open is the first
//! after the last handle went away, which is when an unclean shutdown must be looked into
//! and when the file may be rebuilt (never while another process reads it), and whether a
//! close is the last, which is when the stash is marked cleanly closed. Two advisory locks,
//! released by the kernel when a process dies, answer that:
//! - `<db>-lock`: every live handle holds it shared for its whole life. Whoever can take it
//!   exclusively is alone.
//! - `<db>-open`: held exclusively for the few steps of an open or a close, so that no
//!   other handle opens or closes in between: an open that finds itself alone recovers the
//!   stash with nobody else in it, and a close that finds itself last marks it clean
//!   before anybody can open it again.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::files::{GATE, LOCK, sibling};

/// How often a lock held by another handle is tried again.
const RETRY: Duration = Duration::from_millis(2);

/// A handle's hold on a stash: its shared life lock, and during an open or a close the
/// gate. An open that fails calls [`Hold::abandon`], which removes the lock files again if
/// this open created them, so a path that turned out not to hold a stash is left as it was.
#[derive(Debug)]
pub(crate) struct Hold {
    life: File,
    gate: Option<File>,
    created: Vec<PathBuf>,
    /// Whether no other handle had the stash open when the gate was taken.
    alone: bool,
}

impl Hold {
    /// Takes the gate (waiting up to `wait` for another handle's open or close to end),
    /// then the life lock: exclusively if no other handle holds it, which makes this
    /// handle [`alone`](Hold::alone), else shared.
    pub(crate) fn acquire(db: &Path, wait: Duration) -> Result<Hold> {
        let mut created = Vec::new();
        let gate = open_lock_file(&sibling(db, GATE), &mut created)?;
        if !take_gate(&gate, Kind::Exclusive, wait).map_err(|e| lock_error(db, e))? {
            return Err(gate_busy(db, wait));
        }
        let life = open_lock_file(&sibling(db, LOCK), &mut created)?;
        let alone = match life.try_lock() {
            Ok(()) => true,
            Err(TryLockError::WouldBlock) => {
                // Handles that hold it shared are running, or one owns it (holding it
                // exclusively outside an open or a close, which need the gate we hold).
                match life.try_lock_shared() {
                    Ok(()) => false,
                    Err(TryLockError::WouldBlock) => {
                        return Err(Error::Owned { path: db.to_path_buf() });
                    }
                    Err(TryLockError::Error(e)) => return Err(lock_error(db, e)),
                }
            }
            Err(TryLockError::Error(e)) => return Err(lock_error(db, e)),
        };
        Ok(Hold { life, gate: Some(gate), created, alone })
    }

    /// The hold of a handle that only reads: the life lock shared, taken through files
    /// opened for reading, so that a stash in a directory this process cannot write still
    /// opens. `None` where the lock file does not exist and cannot be made: such a reader
    /// cannot keep a rebuild from replacing the file it reads (a rebuild needs a writable
    /// directory, which this one is not to this process).
    pub(crate) fn acquire_read_only(db: &Path, wait: Duration) -> Result<Option<Hold>> {
        let open = |path: &Path| OpenOptions::new().read(true).open(path);
        let (Ok(gate), Ok(life)) = (open(&sibling(db, GATE)), open(&sibling(db, LOCK))) else {
            return match Hold::acquire(db, wait) {
                Ok(mut hold) => {
                    hold.opened(false)?;
                    Ok(Some(hold))
                }
                Err(_) => Ok(None),
            };
        };
        if !take_gate(&gate, Kind::Shared, wait).map_err(|e| lock_error(db, e))? {
            return Err(gate_busy(db, wait));
        }
        let shared = life.try_lock_shared();
        let _ = gate.unlock();
        match shared {
            Ok(()) => Ok(Some(Hold { life, gate: None, created: Vec::new(), alone: false })),
            Err(TryLockError::WouldBlock) => Err(Error::Owned { path: db.to_path_buf() }),
            Err(TryLockError::Error(e)) => Err(lock_error(db, e)),
        }
    }

    /// Whether a handle ever opened the stash at `db` (its lock files are there).
    pub(crate) fn exists(db: &Path) -> bool {
        sibling(db, GATE).exists() || sibling(db, LOCK).exists()
    }

    /// Whether no other handle had the stash open when this one took the gate.
    pub(crate) fn alone(&self) -> bool {
        self.alone
    }

    /// Ends the open: the life lock becomes shared (others may open now), unless this
    /// handle `owns` the stash, and the gate is released.
    pub(crate) fn opened(&mut self, owns: bool) -> Result<()> {
        if self.alone && !owns {
            // Nobody can take the life lock in between: opening or closing needs the gate.
            self.life.unlock().map_err(|e| lock_error(Path::new("the stash"), e))?;
            self.life.lock_shared().map_err(|e| lock_error(Path::new("the stash"), e))?;
            self.alone = false;
        }
        self.created.clear();
        if let Some(gate) = self.gate.take() {
            let _ = gate.unlock();
        }
        Ok(())
    }

    /// Starts a close: takes the gate again (waiting up to `wait`) and says whether this
    /// handle is the last one. The gate is released when the hold is dropped.
    pub(crate) fn closing(&mut self, db: &Path, wait: Duration) -> Result<bool> {
        let mut created = Vec::new();
        let gate = open_lock_file(&sibling(db, GATE), &mut created)?;
        if !take_gate(&gate, Kind::Exclusive, wait).map_err(|e| lock_error(db, e))? {
            return Ok(false);
        }
        self.gate = Some(gate);
        let _ = self.life.unlock();
        match self.life.try_lock() {
            Ok(()) => Ok(true),
            Err(_) => Ok(false),
        }
    }

    /// Releases the locks after a failed open, removing the files this open created.
    pub(crate) fn abandon(self) {
        for path in &self.created {
            if let Err(e) = std::fs::remove_file(path) {
                log::debug!("objstash: removing {}: {e}", path.display());
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Shared,
    Exclusive,
}

/// Takes `gate`, trying again until `wait` has passed; returns whether it was taken.
fn take_gate(gate: &File, kind: Kind, wait: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        let taken = match kind {
            Kind::Shared => gate.try_lock_shared(),
            Kind::Exclusive => gate.try_lock(),
        };
        match taken {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(RETRY);
            }
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

fn gate_busy(db: &Path, wait: Duration) -> Error {
    Error::Busy {
        path: db.to_path_buf(),
        waited: wait,
        what: "another handle was opening, closing or recovering the stash",
    }
}

/// Opens (creating it if needed) a lock file, noting it in `created` if this call made it.
fn open_lock_file(path: &Path, created: &mut Vec<PathBuf>) -> Result<File> {
    let existed = path.exists();
    let file =
        OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path).map_err(
            |e| {
                Error::io(
                    format!(
                        "cannot create the lock file {}: a stash that is written needs a writable \
                     directory",
                        path.display()
                    ),
                    e,
                )
            },
        )?;
    if !existed {
        created.push(path.to_path_buf());
    }
    Ok(file)
}

fn lock_error(db: &Path, e: std::io::Error) -> Error {
    Error::io(format!("locking {}", db.display()), e)
}
