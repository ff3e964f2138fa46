//! Contention: eight threads saving and eight reading through one `Stash` for a while, a
//! second process sharing a stash the first one is writing, and a held write lock.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{MODES, TestResult};
use objstash::{Error, Key, Layout, Stash};

/// Objects each saver thread saves.
const SAVES_PER_THREAD: u64 = 2_000;

#[test]
fn eight_savers_and_eight_readers() -> TestResult {
    for mode in MODES {
        let dir = tempfile::tempdir()?;
        let stash = Stash::builder()
            .layout(Layout::Bucketed)
            .durability(mode)
            .channel_capacity(64)
            .batch_size(500)
            .open(dir.path().join("c.db"))?;
        let saved = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        thread::scope(|s| {
            let savers: Vec<_> = (0..8u64)
                .map(|t| {
                    let (stash, saved) = (&stash, &saved);
                    s.spawn(move || {
                        for i in (0..SAVES_PER_THREAD).step_by(50) {
                            let objs = speckle_gen::objects(100 + t, i, 50);
                            stash.save_all(&objs).expect("save_all under contention");
                            stash.save(&objs[0]).expect("save under contention");
                            if i % 500 == 0 {
                                stash.flush().expect("flush under contention");
                            }
                        }
                        saved.fetch_max(SAVES_PER_THREAD, Ordering::Relaxed);
                    })
                })
                .collect();
            for t in 0..8u64 {
                let (stash, stop, reads) = (&stash, &stop, &reads);
                s.spawn(move || {
                    // At least one read each, however the threads are scheduled.
                    for i in 0.. {
                        let obj = speckle_gen::object(100 + t, i % 2_000);
                        let key = Key::of(&obj);
                        if let Some(bytes) = stash.get(&key).expect("get under contention") {
                            assert_eq!(bytes, obj);
                        }
                        stash.missing(&[key]).expect("missing under contention");
                        reads.fetch_add(1, Ordering::Relaxed);
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                });
            }
            for saver in savers {
                saver.join().expect("a saver panicked");
            }
            stop.store(true, Ordering::Relaxed);
        });
        let per_thread = saved.load(Ordering::Relaxed);
        assert!(per_thread > 0 && reads.load(Ordering::Relaxed) >= 8);
        // Every object any saver saved is readable at the end.
        for t in 0..8u64 {
            let objs = speckle_gen::objects(100 + t, 0, 200);
            let keys: Vec<Key> = objs.iter().map(|o| Key::of(o)).collect();
            for (value, obj) in stash.get_many(&keys)?.into_iter().zip(&objs) {
                assert_eq!(value.as_ref(), Some(obj), "{mode}");
            }
        }
        let report = stash.verify()?;
        assert!(report.is_ok() && report.checked >= 8 * 50, "{mode}: {report}");
        stash.close()?;
    }
    Ok(())
}

/// The second process: opens the stash, reads what the first flushed, saves its own
/// object, and reports on stdout.
#[test]
#[ignore = "run as a child process by a_second_process_shares_the_stash"]
fn second_process_child() {
    let Some(db) = std::env::var_os("OBJSTASH_SECOND_PROCESS") else { return };
    let run = || -> objstash::Result<String> {
        let stash = Stash::open(std::path::PathBuf::from(db))?;
        let theirs = speckle_gen::objects(5, 0, 2_000);
        let keys: Vec<Key> = theirs.iter().map(|o| Key::of(o)).collect();
        let found = stash.get_many(&keys)?;
        let same = found.iter().zip(&theirs).all(|(f, o)| f.as_deref() == Some(&o[..]));
        stash.save(b"from the second process")?;
        stash.flush()?;
        stash.close()?;
        Ok(format!("OPENED {same}"))
    };
    match run() {
        Ok(text) => println!("{text}"),
        Err(e) => println!("ERROR {e}"),
    }
}

/// Runs `second_process_child` on `path` and returns what it printed.
fn second_process_open(path: &std::path::Path) -> std::io::Result<String> {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "contention::second_process_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OBJSTASH_SECOND_PROCESS", path)
        .stderr(Stdio::null())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A second process opens a stash the first has open, sees what the first flushed, and
/// what it saves is seen by the first once it has flushed.
#[test]
fn a_second_process_shares_the_stash() -> TestResult {
    for mode in MODES {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("two.db");
        let stash = Stash::builder().durability(mode).open(&path)?;
        let keys = stash.save_all(&speckle_gen::objects(5, 0, 2_000))?;
        stash.flush()?;
        let start = Instant::now();
        let text = second_process_open(&path)?;
        assert!(text.contains("OPENED true"), "{mode}: the second process said {text}");
        assert!(start.elapsed() < Duration::from_secs(20), "the second open hung");
        // The first process goes on writing, and sees the second one's object.
        stash.save(b"still writing")?;
        assert!(stash.missing(&keys)?.is_empty());
        let theirs = Key::of(b"from the second process");
        assert_eq!(stash.get(&theirs)?.as_deref(), Some(&b"from the second process"[..]));
        assert_eq!(stash.len()?, 2_002);
        assert!(stash.verify()?.is_ok());
        stash.close()?;
    }
    Ok(())
}

/// While another connection holds the write lock (another process in the middle of its
/// transaction), saving and reading go on without waiting: saves are queued and readable
/// from the pending rows, lookups read the last committed state. Only a flush waits, up
/// to the busy timeout, and then says `Busy` and loses nothing: once the lock is let go,
/// the queued objects are written, each once.
#[test]
fn a_held_write_lock_delays_only_flushes_and_loses_nothing() -> TestResult {
    for layout in [Layout::Single, Layout::Bucketed] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("busy.db");
        let stash =
            Stash::builder().layout(layout).busy_timeout(Duration::from_millis(500)).open(&path)?;
        let objs = crate::common::objects(41, 400);
        let first = stash.save_all(&objs[..200])?;
        stash.flush()?;
        let other = rusqlite::Connection::open(&path)?;
        other.execute_batch(
            "BEGIN IMMEDIATE; UPDATE objstash_meta SET value = value WHERE name = 'codec';",
        )?;
        let start = Instant::now();
        // Half of these are stored, half new.
        let keys = stash.save_all(&objs[100..300])?;
        let key = stash.save(&objs[350])?;
        assert_eq!(keys[..100], first[100..]);
        assert_eq!(stash.get(&keys[150])?.as_deref(), Some(&objs[250][..]));
        assert_eq!(stash.get(&key)?.as_deref(), Some(&objs[350][..]));
        assert!(stash.missing(&keys)?.is_empty());
        // None of these waited for the lock: it is held until the end of the test, so a
        // call that waited for it would have ended in `Busy` after the busy timeout.
        let err = stash.flush().unwrap_err();
        assert!(matches!(err, Error::Busy { .. }), "{layout}: {err:?}");
        assert!(err.to_string().contains("nothing stored or queued was lost"), "{err}");
        assert!(start.elapsed() >= Duration::from_millis(500), "{layout}: the flush did not wait");
        // Still readable while queued.
        assert_eq!(stash.get_many(&keys)?.iter().flatten().count(), 200);
        other.execute_batch("COMMIT")?;
        drop(other);
        stash.flush()?;
        let stats = stash.stats()?;
        assert_eq!(stats.objects, 301, "{layout}: every object counted once");
        let report = stash.verify()?;
        assert!(report.is_ok() && report.checked == 301, "{layout}: {report:?}");
        stash.close()?;
        assert_eq!(Stash::open(&path)?.len()?, 301);
    }
    Ok(())
}

/// A handle closing while another connection holds the write lock tries its queued batch a
/// few times, each for the busy timeout, and then says what it could not write: the loss
/// is an error of `close`, never silent.
#[test]
fn a_close_that_cannot_write_says_what_it_lost() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("close.db");
    let stash = Stash::builder().busy_timeout(Duration::from_millis(200)).open(&path)?;
    stash.save(b"committed")?;
    stash.flush()?;
    let other = rusqlite::Connection::open(&path)?;
    other.execute_batch(
        "BEGIN IMMEDIATE; UPDATE objstash_meta SET value = value WHERE name = 'codec';",
    )?;
    stash.save_all(&crate::common::objects(43, 10))?;
    let start = Instant::now();
    let err = stash.close().unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(600), "gave up after {:?}", start.elapsed());
    assert!(matches!(err, Error::WriterStopped { .. }), "{err:?}");
    assert!(err.to_string().contains("10 objects could not be written"), "{err}");
    other.execute_batch("COMMIT")?;
    drop(other);
    let stash = Stash::open(&path)?;
    assert_eq!(stash.len()?, 1, "only what was flushed before is stored");
    assert!(stash.verify()?.is_ok());
    Ok(())
}
