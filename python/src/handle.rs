//! One library handle as a Python program holds it, across threads, forks and exits.
//!
//! A [`Handle`] is open, closed by the program, or given up for a fork. Python programs
//! fork (multiprocessing's default on Linux, gunicorn and Celery workers), and SQLite's
//! connections, the writer thread and the lock files of a handle cannot cross a fork:
//! the child has no threads, and SQLite's per-process lock bookkeeping would make even a
//! connection the child opens itself wrong while the parent's are open. So before every
//! `os.fork` (`suspend_all`, registered with `os.register_at_fork`) each open handle is
//! closed: in-flight calls finish, everything saved is committed. Neither process then
//! holds anything of the stash, and the next call in either reopens it with the same
//! settings, so an inherited handle simply works in the child and goes on in the parent.
//!
//! Every live handle is in one registry, so that the package can also flush them all when
//! the process is told to stop (SIGTERM, the end of a multiprocessing child) and close
//! them at interpreter exit: what `save` returned is not lost when a process ends short
//! of SIGKILL or `os._exit`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

/// What a call on a handle can fail with.
pub enum CallError {
    /// The program closed the handle.
    Closed(PathBuf),
    /// The library's error.
    Stash(objstash::Error),
}

impl From<objstash::Error> for CallError {
    fn from(e: objstash::Error) -> Self {
        CallError::Stash(e)
    }
}

enum State {
    Open(Box<objstash::Stash>),
    Closed,
    /// Closed before the process forked; the next call reopens it. `failure` is why that
    /// close failed (the writer had stopped): the next call raises it, once.
    Forked {
        failure: Option<objstash::Error>,
    },
}

/// A stash as the `Stash` class holds it.
pub struct Handle {
    state: RwLock<State>,
    pub path: PathBuf,
    /// Opens the stash again after a fork: the same settings, with what the stash
    /// records (layout, durability, codec, cap) taken from the stash itself.
    reopen: objstash::StashBuilder,
    /// What the first open found after an unclean shutdown; a reopen finds a clean stash.
    pub recovery: Option<objstash::RecoveryReport>,
    /// How many times the stash was reopened (after forks): what was opened on an earlier
    /// stash (an object reader) is opened again.
    generation: AtomicU64,
    /// Counts closes and fork suspensions, each counted before it waits for the calls
    /// under way: a stream (`model_stream.rs`) that sees it change stops, so that it never
    /// keeps a close or a fork waiting.
    interruptions: AtomicU64,
}

static LIVE: Mutex<Vec<Weak<Handle>>> = Mutex::new(Vec::new());

impl Handle {
    /// Opens the stash at `path` with `first`; later reopens use `reopen`.
    pub fn open(
        path: PathBuf,
        first: objstash::StashBuilder,
        reopen: objstash::StashBuilder,
    ) -> objstash::Result<Arc<Handle>> {
        let stash = crate::signals::blocked(|| first.open(&path))?;
        let recovery = stash.recovery().cloned();
        let handle = Arc::new(Handle {
            state: RwLock::new(State::Open(Box::new(stash))),
            path,
            reopen,
            recovery,
            generation: AtomicU64::new(0),
            interruptions: AtomicU64::new(0),
        });
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|weak| weak.strong_count() > 0);
        live.push(Arc::downgrade(&handle));
        Ok(handle)
    }

    /// Runs `f` on the open stash, reopening it first if a fork gave it up.
    pub fn run<T>(
        &self,
        f: impl FnOnce(&objstash::Stash) -> objstash::Result<T>,
    ) -> Result<T, CallError> {
        let mut f = Some(f);
        loop {
            {
                let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
                match &*state {
                    State::Open(stash) => {
                        let f = f.take().expect("called once: the loop returns after it");
                        return Ok(f(stash)?);
                    }
                    State::Closed => return Err(CallError::Closed(self.path.clone())),
                    State::Forked { .. } => {}
                }
            }
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            if let State::Forked { failure } = &mut *state {
                if let Some(e) = failure.take() {
                    return Err(e.into());
                }
                *state = State::Open(Box::new(crate::signals::blocked(|| {
                    self.reopen.clone().open(&self.path)
                })?));
                self.generation.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// How many closes and fork suspensions have begun (see `interruptions`).
    pub fn interruptions(&self) -> u64 {
        self.interruptions.load(Ordering::SeqCst)
    }

    /// Which opening of the stash calls run on now (see `generation`).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Closes the stash for good; later calls fail with [`CallError::Closed`]. The lock is
    /// held until the close has committed: a flush meanwhile (SIGTERM's, which then ends the
    /// process) waits for it rather than finding nothing to flush.
    pub fn close(&self) -> objstash::Result<()> {
        self.interruptions.fetch_add(1, Ordering::SeqCst);
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, State::Closed) {
            State::Open(stash) => stash.close(),
            State::Forked { failure: Some(e) } => Err(e),
            State::Closed | State::Forked { failure: None } => Ok(()),
        }
    }

    /// Whether the program closed the handle.
    pub fn is_closed(&self) -> bool {
        matches!(*self.state.read().unwrap_or_else(PoisonError::into_inner), State::Closed)
    }

    /// Before a fork: waits for calls under way, then closes the stash (committing
    /// everything saved) so that the next call, in either process, reopens it.
    fn suspend(&self) {
        self.interruptions.fetch_add(1, Ordering::SeqCst);
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(*state, State::Open(_)) {
            let State::Open(stash) =
                std::mem::replace(&mut *state, State::Forked { failure: None })
            else {
                unreachable!("matched above")
            };
            if let Err(e) = stash.close() {
                *state = State::Forked { failure: Some(e) };
            }
        }
    }

    /// Commits what was saved and what the handle counted (a process ended by SIGTERM
    /// counts in the stash like one that closed), if the stash is open.
    fn commit(&self) -> objstash::Result<()> {
        match &*self.state.read().unwrap_or_else(PoisonError::into_inner) {
            State::Open(stash) => {
                stash.flush()?;
                stash.counters().map(drop)
            }
            _ => Ok(()),
        }
    }
}

/// Every live handle.
fn live() -> Vec<Arc<Handle>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner).iter().filter_map(Weak::upgrade).collect()
}

/// Before `os.fork`: gives up every open handle (see the module documentation).
pub fn suspend_all() {
    live().iter().for_each(|handle| handle.suspend());
}

/// Commits what every open handle saved and counted; failures are reported on stderr,
/// which is all a process that is being stopped can do with them.
pub fn flush_all() {
    for handle in live() {
        if let Err(e) = handle.commit() {
            eprintln!("objstash: committing {} failed: {e}", handle.path.display());
        }
    }
}

/// At interpreter exit: closes every handle, reporting failures on stderr.
pub fn close_all() {
    for handle in live() {
        if let Err(e) = handle.close() {
            eprintln!("objstash: closing {} failed: {e}", handle.path.display());
        }
    }
}
