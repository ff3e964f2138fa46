//! A call run on the async handle's own threads, and its answer as a future.
//!
//! The threads are the handle's: a blocking call (a save waiting for the writer, a read
//! waiting for the disk) never runs on the caller's executor, whichever it is, and the
//! answer comes back through a one-shot slot that wakes the waiting task. A future dropped
//! before its answer does not cancel the call: it runs to its end, so that nothing it was
//! doing (a save under way, a flush) is left half done.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::error::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// The threads that run calls, fed by a channel. Dropped, the pool lets them finish the
/// calls queued and end on their own: a drop on an executor's thread never waits for them.
#[derive(Clone)]
pub(crate) struct Threads {
    jobs: crossbeam_channel::Sender<Job>,
}

impl Threads {
    pub(crate) fn new(count: usize) -> Result<Threads> {
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        for i in 0..count {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("objstash-async-{i}"))
                .spawn(move || queue.iter().for_each(|job| job()))
                .map_err(|e| Error::io("starting the async handle's threads", e))?;
        }
        Ok(Threads { jobs })
    }

    /// Runs `work` on a thread of the pool; its answer, as a future.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Call<T> {
        let slot = Arc::new(Mutex::new(Slot { answer: None, waker: None }));
        let answer = Arc::clone(&slot);
        let job: Job = Box::new(move || {
            let result = work();
            let waker = {
                let mut slot = answer.lock().unwrap_or_else(|p| p.into_inner());
                slot.answer = Some(result);
                slot.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        });
        if self.jobs.send(job).is_ok() {
            return Call { slot };
        }
        let stopped = Error::WriterStopped {
            reason: "the async handle's threads have stopped".to_string(),
            source: None,
        };
        slot.lock().unwrap_or_else(|p| p.into_inner()).answer = Some(Err(stopped));
        Call { slot }
    }
}

struct Slot<T> {
    answer: Option<Result<T>>,
    waker: Option<Waker>,
}

/// The answer of a call run on the async handle's threads.
#[must_use = "a call runs whether or not it is awaited; await it for its answer"]
pub struct Call<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Future for Call<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        match slot.answer.take() {
            Some(answer) => Poll::Ready(answer),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<T> std::fmt::Debug for Call<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").finish_non_exhaustive()
    }
}
