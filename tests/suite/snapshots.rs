//! Kept snapshots (`StashBuilder::read_snapshot`): a read connection keeps its read
//! transaction between reads of one key. These tests keep it for an hour, so that every
//! read after the first is made in a kept snapshot unless the rules below end it: what a
//! kept snapshot could miss must still be seen.
//! - A handle's own removes: its writer's commits end every snapshot begun before them.
//! - What another handle committed: a read that finds nothing in a kept snapshot reads
//!   again in a new one.
//! - An idle connection gives its snapshot up once it is `read_snapshot` old, so it never
//!   holds the log's checkpoints back for longer.

use std::time::{Duration, Instant};

use crate::common::{LAYOUTS, MODES, TestResult};
use objstash::{Durability, Key, Layout, Stash};

const HOUR: Duration = Duration::from_secs(3600);

fn open(
    path: &std::path::Path,
    layout: Layout,
    durability: Durability,
    kept: Duration,
) -> objstash::Result<Stash> {
    Stash::builder().layout(layout).durability(durability).read_snapshot(kept).open(path)
}

fn objects(from: u64, n: u64) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| format!("{{\"id\":{i},\"pad\":\"{}\"}}", "k".repeat(i as usize % 50)).into_bytes())
        .collect()
}

#[test]
fn a_handles_own_remove_is_seen_by_its_next_read() -> TestResult {
    for layout in LAYOUTS {
        for durability in MODES {
            let dir = tempfile::tempdir()?;
            let stash = open(&dir.path().join("s.db"), layout, durability, HOUR)?;
            let keys = stash.save_all(&objects(0, 100))?;
            stash.flush()?;
            // Each read keeps the snapshot the first one began.
            for key in &keys {
                assert!(stash.get(key)?.is_some());
            }
            assert_eq!(stash.remove_all(&keys[..10])?, vec![true; 10]);
            for key in &keys[..10] {
                assert_eq!(stash.get(key)?, None, "{layout} {durability}: removed {key} read");
                assert!(!stash.contains(key)?, "{layout} {durability}: removed {key} contained");
            }
            for key in &keys[10..] {
                assert!(stash.get(key)?.is_some(), "{layout} {durability}: {key} lost");
            }
            stash.close()?;
        }
    }
    Ok(())
}

#[test]
fn what_another_handle_committed_is_read_through_a_kept_snapshot() -> TestResult {
    for layout in LAYOUTS {
        for durability in MODES {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("s.db");
            let reader = open(&path, layout, durability, HOUR)?;
            let first = reader.save_all(&objects(0, 50))?;
            reader.flush()?;
            let other = open(&path, layout, durability, HOUR)?;
            for round in 0..20u64 {
                // The reader's snapshot is kept from this read on.
                assert!(reader.get(&first[round as usize])?.is_some());
                let saved = other.save_all(&objects(1_000 + round * 10, 10))?;
                other.flush()?;
                for (i, key) in saved.iter().enumerate() {
                    let found = if i % 2 == 0 {
                        reader.get(key)?.is_some()
                    } else {
                        reader.contains(key)?
                    };
                    assert!(
                        found,
                        "{layout} {durability} round {round}: {key}, flushed by another handle, not read"
                    );
                }
            }
            // Nothing that was never saved is found by reading again.
            assert_eq!(reader.get(&Key::of(b"never saved"))?, None);
            other.close()?;
            reader.close()?;
        }
    }
    Ok(())
}

/// The write-ahead log's size on disk, 0 once a checkpoint truncated it.
fn log_size(path: &std::path::Path) -> u64 {
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    std::fs::metadata(log).map_or(0, |m| m.len())
}

/// A writer and a reader that keeps snapshots for `kept`: the reader reads once, then the
/// writer commits, so that a truncating checkpoint must wait for the reader's snapshot.
fn a_read_then_commits(
    path: &std::path::Path,
    kept: Duration,
) -> anyhow::Result<(Stash, Stash, Vec<Key>)> {
    let writer = open(path, Layout::Single, Durability::Fast, HOUR)?;
    let keys = writer.save_all(&objects(0, 200))?;
    writer.flush()?;
    let reader = Stash::builder().read_snapshot(kept).read_only(true).open(path)?;
    assert!(reader.get(&keys[0])?.is_some());
    writer.save_all(&objects(10_000, 2_000))?;
    writer.flush()?;
    Ok((writer, reader, keys))
}

/// Runs a truncating checkpoint on `conn`: whether it had to leave some of the log (1) or
/// not (0).
fn truncate(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
}

#[test]
fn an_idle_connection_gives_its_snapshot_up_for_the_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    // A reader whose idle connection keeps its snapshot for 50 ms.
    let (writer, reader, keys) = a_read_then_commits(&path, Duration::from_millis(50))?;
    // The checkpoint succeeds only once the reader's idle connection has given its
    // snapshot up by itself. The deadline only bounds a hang.
    let conn = rusqlite::Connection::open(&path)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while truncate(&conn)? != 0 || log_size(&path) != 0 {
        assert!(Instant::now() < deadline, "the reader's idle snapshot held the checkpoint back");
        std::thread::sleep(Duration::from_millis(10));
    }
    // And the reader still reads, in a new snapshot.
    assert!(reader.get(&keys[1])?.is_some());
    drop(conn);
    reader.close()?;
    writer.close()?;
    Ok(())
}

#[test]
fn a_kept_snapshot_holds_the_truncating_checkpoint_back_until_given_up() -> TestResult {
    // The counterpart of the test above, so that it cannot pass for another reason: with
    // snapshots kept for an hour, the truncating checkpoint is refused while the reader's
    // connection keeps its snapshot, and succeeds once the reader is closed.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let (writer, reader, _) = a_read_then_commits(&path, HOUR)?;
    // Nor can the writer's own truncation when idle (`an_idle_writer_gives_the_log_back`).
    assert!(log_size(&path) > 0, "the commits went to the log");
    let conn = rusqlite::Connection::open(&path)?;
    conn.busy_timeout(Duration::ZERO)?;
    assert_eq!(truncate(&conn)?, 1, "a kept snapshot must hold the truncating checkpoint back");
    drop(reader);
    assert_eq!(truncate(&conn)?, 0, "a closed reader holds nothing back");
    drop(conn);
    writer.close()?;
    Ok(())
}

/// `n` objects of 2 KiB that do not compress.
fn incompressible(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            (0..256)
                .flat_map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()
                })
                .collect()
        })
        .collect()
}

#[test]
fn an_idle_writer_gives_the_log_back() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let writer = open(&path, Layout::Single, Durability::Fast, HOUR)?;
    let first = writer.save_all(&incompressible(1, 10))?;
    writer.flush()?;
    // Another handle's reader keeps a snapshot from before the large commit below, so the
    // log cannot start over while it does.
    let reader = Stash::builder().read_snapshot(HOUR).read_only(true).open(&path)?;
    assert!(reader.get(&first[0])?.is_some());
    let objs = incompressible(2, 2_000);
    let keys = writer.save_all(&objs)?;
    writer.flush()?;
    assert!(log_size(&path) > 4 << 20, "the commit went to the log: {}", log_size(&path));
    // Saving goes on beside the reader: the idle writer's attempts wait for no one.
    writer.save_all(&incompressible(3, 10))?;
    writer.flush()?;
    // Once the reader is gone, the idle writer truncates the log by itself. The deadline
    // only bounds a hang.
    reader.close()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while log_size(&path) != 0 {
        assert!(Instant::now() < deadline, "the idle writer left {} bytes of log", log_size(&path));
        std::thread::sleep(Duration::from_millis(10));
    }
    for (key, obj) in keys.iter().zip(&objs) {
        assert_eq!(writer.get(key)?.as_ref(), Some(obj));
    }
    writer.close()?;
    let stash = Stash::open(&path)?;
    assert_eq!(stash.len()?, 2_020);
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn zero_keeps_no_snapshot() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let (writer, reader, _) = a_read_then_commits(&path, Duration::ZERO)?;
    let conn = rusqlite::Connection::open(&path)?;
    conn.busy_timeout(Duration::ZERO)?;
    assert_eq!(truncate(&conn)?, 0, "no read transaction was kept");
    drop(conn);
    reader.close()?;
    writer.close()?;
    Ok(())
}

#[test]
fn an_owned_stash_keeps_no_snapshot_that_would_hold_its_writer_back() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    // A kept read transaction's lock would make the commit below wait, then fail as busy.
    let stash = Stash::builder()
        .durability(Durability::Owned)
        .read_snapshot(HOUR)
        .busy_timeout(Duration::from_secs(5))
        .open(&path)?;
    let keys = stash.save_all(&objects(0, 100))?;
    stash.flush()?;
    for key in &keys {
        assert!(stash.get(key)?.is_some());
    }
    stash.save_all(&objects(500, 100))?;
    stash.flush()?;
    assert!(stash.remove(&keys[0])?);
    assert_eq!(stash.len()?, 199);
    stash.close()?;
    Ok(())
}

#[test]
fn names_are_read_through_a_kept_snapshot_as_keys_are() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let reader = open(&path, Layout::Single, Durability::Fast, HOUR)?;
    let first = objects(0, 1);
    reader.save_named(&[(&b"first"[..], &first[0][..])])?;
    reader.flush()?;
    let other = open(&path, Layout::Single, Durability::Fast, HOUR)?;
    for round in 0..10u64 {
        // The reader's snapshot is kept from this read on.
        assert_eq!(reader.get_named(&[b"first"])?, vec![Some(first[0].clone())]);
        let name = format!("id-{round}");
        let object = objects(100 + round, 1).remove(0);
        other.save_named(&[(name.as_bytes(), &object[..])])?;
        other.flush()?;
        assert_eq!(reader.get_named(&[name.as_bytes()])?, vec![Some(object)], "round {round}");
    }
    // This handle's own unnaming is seen at once.
    assert_eq!(reader.remove_named(&[b"first"])?, vec![true]);
    assert_eq!(reader.get_named(&[b"first"])?, vec![None]);
    other.close()?;
    reader.close()?;
    Ok(())
}
