//! The async handle (#79): its calls as futures under a multi-threaded tokio runtime with
//! many tasks, under no runtime at all, never blocking the executor's thread, and a future
//! dropped before its answer losing nothing.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use crate::common::{TestResult, noise, objects};
use objstash::{AsyncStash, Key, Stash};

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .build()
        .expect("a tokio runtime")
}

#[test]
fn two_hundred_tasks_save_and_read_under_a_multi_threaded_runtime() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("async.db");
    let stash = Arc::new(AsyncStash::new(Stash::open(&path)?)?);
    let all: Vec<Vec<u8>> = runtime(2).block_on(async {
        let tasks: Vec<_> = (0..200u64)
            .map(|t| {
                let stash = Arc::clone(&stash);
                tokio::spawn(async move {
                    let mine = objects(1_000 + t, 20);
                    let keys = stash.save_all(mine.clone()).await?;
                    let one = stash.save(format!("{{\"task\":{t}}}").into_bytes()).await?;
                    assert_eq!(
                        stash.get(one).await?,
                        Some(format!("{{\"task\":{t}}}").into_bytes())
                    );
                    let read = stash.get_many(keys.clone()).await?;
                    assert!(read.iter().zip(&mine).all(|(r, m)| r.as_deref() == Some(&m[..])));
                    assert_eq!(stash.missing(keys).await?, Vec::<Key>::new());
                    Ok::<_, objstash::Error>(mine)
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.expect("the task ran")?);
        }
        stash.flush().await?;
        Ok::<_, objstash::Error>(all)
    })?;
    block_on(Arc::try_unwrap(stash).expect("every task ended").close())?;
    let stash = Stash::open(&path)?;
    let keys: Vec<Key> = all.iter().map(|o| Key::of(o)).collect();
    assert_eq!(stash.missing(&keys)?, Vec::<Key>::new(), "every object of every task");
    Ok(())
}

/// On a runtime of one thread, a task that counts while a call is pending: a call that
/// blocked the thread would answer on its first poll, before the counter ever ran.
#[test]
fn a_call_never_blocks_the_executor_s_thread() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = AsyncStash::new(Stash::open(dir.path().join("one.db"))?)?;
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let (polled, keys) = rt.block_on(async {
        let done = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let counter = {
            let (done, count) = (Arc::clone(&done), Arc::clone(&count));
            tokio::spawn(async move {
                while !done.load(Ordering::Acquire) {
                    count.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };
        let keys = stash.save_all(objects(7, 3_000)).await;
        let read = stash.get_many(keys.as_ref().map(Vec::clone).unwrap_or_default()).await;
        done.store(true, Ordering::Release);
        counter.await.expect("the counter ran");
        (count.load(Ordering::Relaxed), keys.and_then(|k| read.map(|r| (k, r))))
    });
    let (keys, read) = keys?;
    assert!(polled > 0, "the counter ran while the calls were pending");
    assert_eq!(read.len(), keys.len());
    block_on(stash.close())?;
    Ok(())
}

/// A waker that unparks the thread that waits.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The smallest executor: polls on this thread, parks between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[test]
fn without_a_runtime_a_large_object_streams_in_pieces_and_a_dropped_future_loses_nothing()
-> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("plain.db");
    let stash = AsyncStash::new(Stash::open(&path)?)?;
    let big = noise(5, 9 << 20);
    let key = block_on(stash.save(big.clone()))?;
    let mut reader = block_on(stash.open_reader(key))?.expect("stored");
    let mut read = Vec::new();
    while let Some(piece) = block_on(reader.next_piece(1 << 20))? {
        assert!(!piece.is_empty() && piece.len() <= 1 << 20);
        read.extend(piece);
    }
    assert!(read == big, "the pieces make the object");
    assert!(block_on(reader.next_piece(1 << 20))?.is_none(), "and end");

    // Futures dropped after one poll, and one never polled: their calls run all the same.
    let dropped = objects(9, 500);
    let mut save = stash.save_all(dropped.clone());
    let waker = Waker::noop();
    let _ = std::pin::Pin::new(&mut save).poll(&mut Context::from_waker(waker));
    drop(save);
    drop(stash.save(b"never polled".to_vec()));
    let mut flush = stash.flush();
    let _ = std::pin::Pin::new(&mut flush).poll(&mut Context::from_waker(waker));
    drop(flush);
    // What the dropped calls saved is stored once they end: the handle's threads finish
    // every call queued before the stash closes.
    block_on(stash.close())?;
    let mut keys: Vec<Key> = dropped.iter().map(|o| Key::of(o)).collect();
    keys.push(Key::of(b"never polled"));
    let stash = once_stored(&path, &keys)?;
    assert!(stash.verify()?.is_ok());
    Ok(())
}

/// The stash at `path`, opened once every one of `keys` is stored: the calls whose futures
/// were dropped end on the async handle's threads, in their own time.
fn once_stored(path: &std::path::Path, keys: &[Key]) -> objstash::Result<Stash> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let stash = Stash::open(path)?;
        if stash.missing(keys)?.is_empty() {
            return Ok(stash);
        }
        drop(stash);
        assert!(std::time::Instant::now() < deadline, "the dropped calls never ended");
        std::thread::yield_now();
    }
}
