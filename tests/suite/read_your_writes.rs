//! Once `save` or `save_all` has returned, every later read from any thread sees the
//! object: `get`, `get_many`, `contains` and `missing` alike.
//!
//! The bug this guards against: in Safe mode (WAL) a multi-key read transaction fixes its
//! snapshot at its first statement, and `get_many` and `missing` looked each key up in the
//! pending map only when its turn came. A row that the writer committed after the snapshot
//! was taken, and then forgot from the pending map before the key's turn, was in neither:
//! about 1% of freshly saved keys came back `None` from `get_many` and were listed by
//! `missing`. `get` (one statement per key) never failed, and Fast mode never did because
//! its readers' shared lock keeps the writer from committing during a read transaction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{LAYOUTS, MODES, TestResult};
use objstash::{Durability, Key, Layout, Stash};

/// Keys the reader checks: the most recent ones the saver has been told are saved.
const WINDOW: usize = 3_000;
const SAVE_CALL: usize = 50;
const RUN: Duration = Duration::from_secs(3);

fn open(dir: &std::path::Path, layout: Layout, durability: Durability) -> objstash::Result<Stash> {
    // Small batches: many commits, each a chance for the race.
    Stash::builder().layout(layout).durability(durability).batch_size(64).open(dir.join("s.db"))
}

fn object(n: u64) -> Vec<u8> {
    format!("{{\"speckle_type\":\"Test\",\"n\":{n},\"pad\":\"{}\"}}", "y".repeat((n % 97) as usize))
        .into_bytes()
}

/// One thread saves fresh objects in calls of 50 while another reads back the last 3,000
/// keys that `save_all` returned, with every read call, for a few seconds.
fn batch_reads_see_every_returned_save(layout: Layout, durability: Durability) -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path(), layout, durability)?;
    let saved: Mutex<Vec<Key>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let (mut reads, mut failures) = (0usize, Vec::<String>::new());
    std::thread::scope(|s| -> TestResult {
        s.spawn(|| {
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < RUN {
                let objects: Vec<Vec<u8>> = (n..n + SAVE_CALL as u64).map(object).collect();
                n += SAVE_CALL as u64;
                let keys = stash.save_all(&objects).expect("save_all");
                saved.lock().unwrap().extend(keys);
            }
            done.store(true, Ordering::SeqCst);
        });
        while !done.load(Ordering::SeqCst) {
            let window: Vec<Key> = {
                let saved = saved.lock().unwrap();
                saved[saved.len().saturating_sub(WINDOW)..].to_vec()
            };
            if window.is_empty() {
                continue;
            }
            let got = stash.get_many(&window)?;
            let lost = got.iter().filter(|v| v.is_none()).count();
            if lost > 0 {
                failures.push(format!("get_many: {lost} of {} keys None", window.len()));
            }
            let missing = stash.missing(&window)?;
            if !missing.is_empty() {
                failures.push(format!("missing: listed {} of {}", missing.len(), window.len()));
            }
            reads += 1;
        }
        Ok(())
    })?;
    assert!(reads > 10, "{layout} {durability}: only {reads} read rounds ran");
    assert!(
        failures.is_empty(),
        "{layout} {durability}: {} rounds failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    stash.close()?;
    Ok(())
}

#[test]
fn batch_reads_see_writes_in_every_layout_and_mode() -> TestResult {
    for layout in LAYOUTS {
        for durability in MODES {
            batch_reads_see_every_returned_save(layout, durability)?;
        }
    }
    Ok(())
}

/// The promise as the docs state it: when `save` returns on one thread, the next read on
/// another thread, of any kind, sees the object.
#[test]
fn a_returned_save_is_seen_by_the_next_read_on_another_thread() -> TestResult {
    for layout in LAYOUTS {
        for durability in MODES {
            let dir = tempfile::tempdir()?;
            let stash = Arc::new(open(dir.path(), layout, durability)?);
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Key, Vec<u8>)>(16);
            let reader = {
                let stash = Arc::clone(&stash);
                std::thread::spawn(move || -> objstash::Result<usize> {
                    let mut seen = 0;
                    for (key, bytes) in rx {
                        assert_eq!(stash.get(&key)?.as_deref(), Some(&bytes[..]), "get {key}");
                        assert!(stash.contains(&key)?, "contains {key}");
                        assert!(stash.missing(&[key])?.is_empty(), "missing {key}");
                        let many = stash.get_many(&[key, Key::of(b"absent")])?;
                        assert_eq!(many[0].as_deref(), Some(&bytes[..]), "get_many {key}");
                        assert_eq!(many[1], None);
                        seen += 1;
                    }
                    Ok(seen)
                })
            };
            for n in 0..2_000 {
                let bytes = object(n);
                let key = stash.save(&bytes)?;
                tx.send((key, bytes))?;
            }
            drop(tx);
            let seen = reader.join().expect("reader thread")?;
            assert_eq!(seen, 2_000);
        }
    }
    Ok(())
}
