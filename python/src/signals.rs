//! The threads of a stash never take the process's signals: they belong to Python.
//!
//! The kernel delivers a signal sent to the process (`kill`, a pool's `terminate`, Ctrl-C)
//! to any thread that does not block it. CPython's handler only sets a flag; the Python
//! handler runs when the main thread next runs bytecode. A main thread blocked in a system
//! call (a multiprocessing worker waiting on its task queue, `time.sleep`) is woken by the
//! signal only if the signal is delivered to it: delivered to the writer or to a worker of
//! a stash it never is, and the program hangs with the signal taken and never handled
//! (seen: a pool worker that never ended after `Pool.terminate`). So every thread the
//! library starts inherits a mask that blocks the asynchronous signals: they are started
//! inside [`blocked`], and Python's threads remain the ones the kernel can pick.

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

/// Signals raised by a fault of the thread itself: blocking them is undefined.
const SYNCHRONOUS: [Signal; 7] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGTRAP,
    Signal::SIGSYS,
    Signal::SIGABRT,
];

/// Runs `f`, which may start threads, with every asynchronous signal blocked in the calling
/// thread (so in the threads it starts), then restores the calling thread's mask.
pub fn blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut set = SigSet::all();
    for signal in SYNCHRONOUS {
        set.remove(signal);
    }
    let mut previous = SigSet::empty();
    // Fails only for an invalid `how`: then nothing was changed, and `f` runs as is.
    let changed = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut previous)).is_ok();
    let value = f();
    if changed {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
    }
    value
}
