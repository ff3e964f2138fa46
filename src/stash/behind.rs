//! Write-behind (feature `remote`): objects saved by this handle are uploaded in the
//! background, so that a save never waits on the network.
//!
//! Saving puts the new object's key in a queue (a lock and a push: nothing else happens
//! on the saving thread). A thread of its own wakes when keys arrive, lets them gather for
//! the interval, then pushes them through a read-only handle of its own (committed rows
//! only; keys still in this handle's pending map wait for the next round). The queue holds
//! at most [`MAX_QUEUED`] keys; beyond that keys are not kept and the next round pushes
//! everything the remote lacks (a full listing), so memory stays bounded whatever the
//! rate. The first round after opening is such a full push too: objects saved by an
//! earlier session that closed before uploading them go up then. A failed round (the
//! remote down) keeps its keys and is retried with a growing pause (up to a minute);
//! [`Stash::flush_remote`] waits for a round that started after it was called.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::key::Key;
use crate::remote::Remote;
use crate::writer::Shared;

use super::Stash;

/// Keys the queue holds before it gives up keeping them (32 MiB).
pub(crate) const MAX_QUEUED: usize = 1 << 20;
/// Longest pause between rounds that failed.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What the saving threads and the uploading thread share.
#[derive(Default)]
struct State {
    queue: Vec<Key>,
    /// Keys were not kept (the queue was full, or a round's keys could not be put back):
    /// the next round pushes everything the remote lacks.
    full: bool,
    /// Rounds started, and the number of the last round that ended with everything it
    /// took uploaded.
    started: u64,
    clean: u64,
    /// The last round's failure, with the number of the round.
    failed: Option<(u64, String)>,
    /// Skip the gathering pause (a flush is waiting).
    hurry: bool,
    stop: bool,
}

pub(crate) struct WriteBehind {
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl WriteBehind {
    /// Starts the uploading thread for the stash at `path`.
    pub(crate) fn start(
        path: std::path::PathBuf,
        remote: Arc<Remote>,
        shared: Arc<Shared>,
        interval: Duration,
    ) -> Result<WriteBehind> {
        let state =
            Arc::new((Mutex::new(State { full: true, ..State::default() }), Condvar::new()));
        let thread_state = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("objstash-write-behind".into())
            .spawn(move || run(&path, &remote, &shared, interval, &thread_state))
            .map_err(|e| Error::io("starting the write-behind thread", e))?;
        Ok(WriteBehind { state, thread: Some(thread) })
    }

    /// Queues a key saved by this handle.
    pub(crate) fn queue(&self, key: Key) {
        let (lock, wake) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        if state.queue.len() < MAX_QUEUED {
            state.queue.push(key);
        } else {
            state.full = true;
        }
        if state.queue.len() == 1 {
            wake.notify_all();
        }
    }

    /// Waits for a round that starts after this call and uploads everything it took.
    pub(super) fn wait(&self) -> Result<()> {
        let (lock, wake) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let after = state.started;
        state.hurry = true;
        wake.notify_all();
        loop {
            if state.clean > after {
                return Ok(());
            }
            if let Some((round, reason)) = &state.failed
                && *round > after
            {
                return Err(Error::Remote {
                    operation: "uploading in the background".to_string(),
                    source: Arc::new(std::io::Error::other(reason.clone())),
                });
            }
            if state.stop {
                return Err(Error::config("the write-behind thread has stopped"));
            }
            state = wake.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Stops the thread after its current round.
    pub(crate) fn stop(&mut self) {
        {
            let (lock, wake) = &*self.state;
            lock.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
            wake.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The uploading thread.
fn run(
    path: &std::path::Path,
    remote: &Remote,
    shared: &Shared,
    interval: Duration,
    state: &(Mutex<State>, Condvar),
) {
    let (lock, wake) = state;
    let mut reader: Option<Stash> = None;
    let mut backoff = Duration::ZERO;
    loop {
        // Wait for keys (or a retry, a flush, the stop), then let more gather.
        {
            let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
            let since = Instant::now();
            while !s.stop
                && !s.hurry
                && (s.queue.is_empty() && !s.full || since.elapsed() < backoff)
            {
                let left = if s.queue.is_empty() && !s.full && backoff.is_zero() {
                    Duration::from_secs(3600)
                } else {
                    backoff.saturating_sub(since.elapsed()).max(Duration::from_millis(1))
                };
                s = wake.wait_timeout(s, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            if s.stop {
                return;
            }
            let gather = Instant::now();
            while !s.stop && !s.hurry && gather.elapsed() < interval {
                let left = interval.saturating_sub(gather.elapsed());
                s = wake.wait_timeout(s, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            if s.stop {
                return;
            }
        }
        let (round, keys, full) = {
            let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
            s.started += 1;
            s.hurry = false;
            (s.started, std::mem::take(&mut s.queue), std::mem::take(&mut s.full))
        };
        // Rows not committed yet are read next round.
        let (waiting, ready): (Vec<Key>, Vec<Key>) =
            keys.into_iter().partition(|key| shared.pending.contains(key));
        let result = (|| {
            if reader.is_none() {
                reader = Some(Stash::builder().read_only(true).open(path)?);
            }
            let reader = reader.as_ref().expect("opened above");
            if full {
                reader.push_to(remote, None)
            } else {
                reader.push_to(remote, Some(ready.clone()))
            }
        })();
        let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let put_back = |keys: Vec<Key>, s: &mut State| {
            for key in keys {
                if s.queue.len() < MAX_QUEUED {
                    s.queue.push(key);
                } else {
                    s.full = true;
                }
            }
        };
        match result {
            Ok(report) => {
                log::debug!("write-behind: {report}");
                backoff = Duration::ZERO;
                if waiting.is_empty() {
                    s.clean = round;
                }
                put_back(waiting, &mut s);
            }
            Err(e) => {
                log::warn!("write-behind: {e}; retrying");
                backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                s.failed = Some((round, e.to_string()));
                if full {
                    s.full = true;
                }
                put_back(waiting, &mut s);
                put_back(ready, &mut s);
            }
        }
        wake.notify_all();
    }
}
