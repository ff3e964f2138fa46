//! Contention: eight threads saving and eight reading through one `Stash` for a while, and
//! a second process opening a stash that the first one is writing.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{MODES, TestResult};
use objstash::{Error, Key, Layout, Stash};

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
        let deadline = Instant::now() + Duration::from_secs(3);
        thread::scope(|s| {
            for t in 0..8u64 {
                let (stash, saved) = (&stash, &saved);
                s.spawn(move || {
                    let mut i = 0;
                    while Instant::now() < deadline {
                        let objs = speckle_gen::objects(100 + t, i, 50);
                        stash.save_all(&objs).expect("save_all under contention");
                        stash.save(&objs[0]).expect("save under contention");
                        if i % 500 == 0 {
                            stash.flush().expect("flush under contention");
                        }
                        i += 50;
                    }
                    saved.fetch_max(i, Ordering::Relaxed);
                });
            }
            for t in 0..8u64 {
                let (stash, stop, reads) = (&stash, &stop, &reads);
                s.spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let obj = speckle_gen::object(100 + t, i % 2_000);
                        let key = Key::of(&obj);
                        if let Some(bytes) = stash.get(&key).expect("get under contention") {
                            assert_eq!(bytes, obj);
                        }
                        stash.missing(&[key]).expect("missing under contention");
                        i += 1;
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            while Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
        });
        let per_thread = saved.load(Ordering::Relaxed);
        assert!(per_thread > 0 && reads.load(Ordering::Relaxed) > 0);
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

/// The second process: tries to open the stash and reports how it went on stdout.
#[test]
#[ignore = "run as a child process by second_process_gets_a_clear_error"]
fn second_process_child() {
    let Some(db) = std::env::var_os("OBJSTASH_SECOND_PROCESS") else { return };
    match Stash::open(std::path::PathBuf::from(db)) {
        Err(Error::Locked { .. }) => println!("LOCKED"),
        Err(e) => println!("OTHER {e}"),
        Ok(_) => println!("OPENED"),
    }
}

/// Runs `second_process_child` on `path` and returns what it printed.
fn second_process_open(path: &std::path::Path) -> std::io::Result<String> {
    let out = Command::new(std::env::current_exe()?)
        .args(["second_process_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("OBJSTASH_SECOND_PROCESS", path)
        .stderr(Stdio::null())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn second_process_gets_a_clear_error_not_a_hang() -> TestResult {
    for mode in MODES {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("two.db");
        let stash = Stash::builder().durability(mode).open(&path)?;
        let keys = stash.save_all(&speckle_gen::objects(5, 0, 2_000))?;
        let start = Instant::now();
        let text = second_process_open(&path)?;
        assert!(text.contains("LOCKED"), "{mode}: the second process said {text}");
        assert!(start.elapsed() < Duration::from_secs(20), "the second open hung");
        // The first process goes on writing, and its data is intact.
        stash.save(b"still writing")?;
        assert!(stash.missing(&keys)?.is_empty());
        stash.close()?;
        let out = second_process_open(&path)?;
        assert!(out.contains("OPENED"), "after close the file opens");
    }
    Ok(())
}

/// Saving does not wait while the writer commits: objects it cannot look up then are
/// compressed and sent, and the writer still stores each object once.
///
/// To hold the writer inside a commit, another connection keeps a read transaction open:
/// the writer's commit then holds SQLite's PENDING lock (which turns new readers away)
/// while it waits for that reader to leave.
#[test]
fn saving_does_not_wait_for_a_commit() -> TestResult {
    for layout in [Layout::Single, Layout::Bucketed] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("busy.db");
        let stash = Stash::builder().layout(layout).open(&path)?;
        let objs = common::objects(41, 400);
        let first = stash.save_all(&objs[..200])?;
        stash.flush()?;
        let reader = rusqlite::Connection::open(&path)?;
        reader.execute_batch("BEGIN")?;
        reader.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
        // A new object starts a batch; its commit cannot finish while `reader` reads.
        let starter = stash.save(&objs[399])?;
        let probe = rusqlite::Connection::open(&path)?;
        probe.busy_timeout(Duration::ZERO)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while probe.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(())).is_ok() {
            assert!(Instant::now() < deadline, "{layout}: the writer never started its commit");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Half of these are stored, half new; a lookup that waited would block until
        // `reader` leaves, and this thread is the one that makes it leave.
        let keys = stash.save_all(&objs[100..300])?;
        let key = stash.save(&objs[350])?;
        assert_eq!(keys[..100], first[100..]);
        // New objects are readable before their commit, from the pending rows.
        assert_eq!(stash.get(&keys[150])?.as_deref(), Some(&objs[250][..]));
        assert_eq!(stash.get(&key)?.as_deref(), Some(&objs[350][..]));
        reader.execute_batch("COMMIT")?;
        drop((reader, probe));
        stash.flush()?;
        let stats = stash.stats()?;
        assert_eq!(stats.objects, 302, "{layout}: every object counted once");
        assert_eq!(stash.get_many(&keys)?.iter().flatten().count(), 200);
        assert_eq!(stash.get(&starter)?.as_deref(), Some(&objs[399][..]));
        let report = stash.verify()?;
        assert!(report.is_ok() && report.checked == 302, "{layout}: {report:?}");
    }
    Ok(())
}
