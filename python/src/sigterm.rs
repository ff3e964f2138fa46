//! SIGTERM (a pool's `terminate`) commits what every stash saved, then ends the process as
//! SIGTERM would have, without waiting for Python's main thread.
//!
//! A Python-level handler runs only when the main thread next checks for signals, and a
//! main thread asleep in a system call checks only if the signal interrupts that call. A
//! SIGTERM that lands between a pool worker's failed `sem_trywait` on its task queue and
//! the `sem_wait` after it (CPython's `SemLock.acquire`) sets CPython's flag and nothing
//! else: the worker outlives `Pool.terminate`, and the parent's `join` hangs (seen in CI).
//! So the handler is a C one that writes a byte to a pipe (all it may do in a signal
//! handler), and a thread of the package's own, asleep on the pipe, commits and then
//! ends the process. The main thread takes no part, whatever it is doing.
//!
//! The handler is installed only where SIGTERM was at its default (the package asks
//! Python first): a program's own handler decides, and one installed later replaces this
//! one. Threads and a pipe do not cross a fork as they should: before each fork the
//! thread is stopped (a fork must not copy a thread that holds a stash's lock), after it
//! the parent starts it again, and the child makes its own pipe and thread, so that a
//! child's SIGTERM never ends its parent. A SIGTERM taken by a process that is not the
//! pipe's owner (a child between the fork and its hook) ends it at once: the fork
//! committed everything first, so nothing is lost. A second SIGTERM while the first is
//! being handled ends the process at once too.
//!
//! The only unsafe code of the project: installing a signal handler, and what a handler
//! may call, are the C library's (each block says why it is sound).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::{handle, signals};

/// The write end of the pipe the handler wakes the thread through (-1: none).
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// The process that made the pipe.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// Set by the first SIGTERM handled.
static ENDING: AtomicBool = AtomicBool::new(false);
/// Set once this process (or the parent it was forked from) took SIGTERM.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The byte the handler writes.
const TERM: u8 = b'T';
/// The byte that stops the thread (before a fork).
const STOP: u8 = b'S';

/// This process's pipe and the thread asleep on it.
struct Watcher {
    read: OwnedFd,
    write: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

static WATCHER: Mutex<Option<Watcher>> = Mutex::new(None);

/// Ends the process as SIGTERM's default would. Async-signal-safe: the signal is sent to
/// the process, and a thread that does not block it (this one, once the handler returns
/// and restores its mask) takes it.
fn end_now() {
    // SAFETY: `signal`, `getpid` and `kill` are async-signal-safe and take no pointers.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

extern "C" fn on_sigterm(_: libc::c_int) {
    let errno = io::Error::last_os_error().raw_os_error();
    // SAFETY: `getpid` is async-signal-safe.
    let pid = unsafe { libc::getpid() };
    let wake = WAKE.load(Ordering::SeqCst);
    if ENDING.swap(true, Ordering::SeqCst) || wake < 0 || OWNER.load(Ordering::SeqCst) != pid {
        end_now();
    } else {
        // SAFETY: `write` is async-signal-safe; the buffer is one byte on the stack. The
        // write end never blocks: at worst the byte is dropped while the pipe is full,
        // which needs bytes the thread has not yet read, and one of them is a SIGTERM.
        unsafe { libc::write(wake, [TERM].as_ptr().cast(), 1) };
    }
    if let Some(errno) = errno {
        // SAFETY: restores the interrupted code's errno, as every handler must.
        unsafe { *errno_location() = errno };
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn errno_location() -> *mut libc::c_int {
    // SAFETY: the caller's thread's errno.
    unsafe { libc::__errno_location() }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
unsafe fn errno_location() -> *mut libc::c_int {
    // SAFETY: the caller's thread's errno.
    unsafe { libc::__error() }
}

/// The thread: sleeps on the pipe; on a SIGTERM commits every stash and ends the process.
fn watch(read: RawFd) {
    loop {
        let mut byte = 0u8;
        // SAFETY: reads one byte into `byte`; `read` stays open while the thread runs
        // (it is closed only after the thread was joined, or in a child it never reached).
        let n = unsafe { libc::read(read, (&raw mut byte).cast(), 1) };
        match n {
            1 if byte == STOP => return,
            1 => {
                handle::flush_all();
                // This thread blocks SIGTERM (as every thread of the package does):
                // let it take the signal it sends, should no other thread.
                let mut set = nix::sys::signal::SigSet::empty();
                set.add(nix::sys::signal::Signal::SIGTERM);
                let _ = set.thread_unblock();
                end_now();
                loop {
                    std::thread::park();
                }
            }
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return, // the pipe is gone: nothing will wake the thread
        }
    }
}

/// A pipe whose write end never blocks, both ends closed on exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `pipe` fills the two descriptors, which the `OwnedFd`s then own.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for (fd, nonblocking) in [(&read, false), (&write, true)] {
        // SAFETY: `fcntl` on a descriptor this function owns.
        unsafe {
            if libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            if nonblocking && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok((read, write))
}

/// Starts the thread on `watcher`'s pipe and makes it this process's.
fn start(watcher: &mut Watcher) -> io::Result<()> {
    let read = watcher.read.as_raw_fd();
    let thread = signals::blocked(|| {
        std::thread::Builder::new().name("objstash-sigterm".into()).spawn(move || watch(read))
    })?;
    watcher.thread = Some(thread);
    WAKE.store(watcher.write.as_raw_fd(), Ordering::SeqCst);
    // SAFETY: `getpid` cannot fail.
    OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    Ok(())
}

/// SIGTERM's handler now (`SIG_DFL`, `SIG_IGN` or a function), or `None` if it cannot be
/// read.
fn disposition() -> Option<libc::sighandler_t> {
    // SAFETY: a query: `act` is null and `old` a zeroed `sigaction` to fill.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) == 0)
            .then_some(old.sa_sigaction)
    }
}

/// Whether SIGTERM's handler is this module's.
fn installed() -> bool {
    disposition() == Some(on_sigterm as *const () as libc::sighandler_t)
}

/// Takes SIGTERM again if this process took it once and it is at its default again. A
/// program that saved the handler it saw and put it back later put back `SIG_DFL`
/// (Python's `getsignal` reports it while this module's handler is installed): the
/// package's saves call this, as the calls whose work a SIGTERM would lose. A handler of
/// the program's own, or `SIG_IGN`, is left alone. One `sigaction` query when taken.
pub fn keep() {
    if TAKEN.load(Ordering::Relaxed) && disposition() == Some(libc::SIG_DFL) {
        let _ = take();
    }
}

/// Takes SIGTERM if it is at its default: returns whether it did (or had). The package
/// calls it only when Python's handler is its default too.
pub fn take() -> io::Result<bool> {
    let mut guard = WATCHER.lock().unwrap_or_else(PoisonError::into_inner);
    // The thread first: a SIGTERM taken as soon as the handler is in place has a reader.
    let created = guard.is_none();
    if created {
        let (read, write) = pipe()?;
        let mut watcher = Watcher { read, write, thread: None };
        start(&mut watcher)?;
        *guard = Some(watcher);
    }
    let took = install();
    if matches!(took, Ok(true)) {
        TAKEN.store(true, Ordering::Relaxed);
    } else if created && let Some(mut watcher) = guard.take() {
        WAKE.store(-1, Ordering::SeqCst);
        stop(&mut watcher);
    }
    took
}

/// Installs the handler if SIGTERM's is the default (or is already this module's).
fn install() -> io::Result<bool> {
    let ours = on_sigterm as *const () as libc::sighandler_t;
    match disposition() {
        None => return Err(io::Error::last_os_error()),
        Some(current) if current == ours => return Ok(true),
        Some(current) if current != libc::SIG_DFL => return Ok(false),
        Some(_) => {}
    }
    // SAFETY: installs a handler that only does async-signal-safe things.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = ours;
        new.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut new.sa_mask);
        if libc::sigaction(libc::SIGTERM, &new, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(true)
}

/// Stops `watcher`'s thread, if it runs, and waits for it; the pipe stays (a SIGTERM
/// taken meanwhile waits in it for the next thread).
fn stop(watcher: &mut Watcher) {
    let Some(thread) = watcher.thread.take() else { return };
    // SAFETY: one byte from the stack to a descriptor `watcher` owns.
    let written = unsafe { libc::write(watcher.write.as_raw_fd(), [STOP].as_ptr().cast(), 1) };
    if written == 1 {
        let _ = thread.join();
    }
    // Else the pipe is full of SIGTERMs the thread is acting on: it is ending the process.
}

/// Before `os.fork`: stops the thread (a fork must not copy a thread holding a lock).
pub fn before_fork() {
    let mut guard = WATCHER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(watcher) = guard.as_mut() {
        stop(watcher);
    }
}

/// After `os.fork`, in the parent: starts the thread again on the same pipe.
pub fn after_fork_in_parent() -> io::Result<()> {
    let mut guard = WATCHER.lock().unwrap_or_else(PoisonError::into_inner);
    match guard.as_mut() {
        Some(watcher) if watcher.thread.is_none() => start(watcher),
        _ => Ok(()),
    }
}

/// After `os.fork`, in the child: the parent's pipe is closed and, if the handler is still
/// this module's, the child gets a pipe and a thread of its own.
pub fn after_fork_in_child() -> io::Result<()> {
    // The lock was free at the fork: the forking thread took and let go of it in
    // `before_fork`, and every other taker (`take`, `keep`) holds the GIL throughout,
    // which the forking thread holds across the fork.
    let mut guard = WATCHER.lock().unwrap_or_else(PoisonError::into_inner);
    // A SIGTERM the parent took during the fork is the parent's to act on.
    ENDING.store(false, Ordering::SeqCst);
    let Some(inherited) = guard.take() else { return Ok(()) };
    WAKE.store(-1, Ordering::SeqCst);
    // The parent's thread did not cross the fork: its handle is forgotten, not joined.
    let Watcher { read, write, thread } = inherited;
    std::mem::forget(thread);
    drop((read, write));
    if !installed() {
        return Ok(());
    }
    let (read, write) = pipe()?;
    let mut watcher = Watcher { read, write, thread: None };
    start(&mut watcher)?;
    *guard = Some(watcher);
    Ok(())
}
