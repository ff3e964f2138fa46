//! Stashes whose values are in a file beside the database (`Values::InFile`, format 9):
//! what they hold reads back, from this handle, another one and after a reopen; large rows
//! and chunked objects keep working; damage to the file of values is reported against the
//! keys it hits, never served; a damaged database is rebuilt around the file.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common::{TestResult, objects, sibling};
use objstash::{Durability, Error, Layout, Stash, StashBuilder, Values};

fn builder(layout: Layout) -> StashBuilder {
    Stash::builder().values(Values::InFile).layout(layout)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Whether a file of values of `len` bytes holds `stored` bytes once, and nothing but the
/// padding at the end of each 1 MiB segment but the last, shorter than the 64 KiB that a
/// value in the file is at most.
fn packed(len: u64, stored: u64) -> bool {
    let segments = len.div_ceil(1 << 20);
    stored <= len && len <= stored + segments.saturating_sub(1) * (64 << 10)
}

#[test]
fn objects_read_back_from_the_file_of_values_in_both_layouts() -> TestResult {
    for layout in [Layout::Single, Layout::Bucketed] {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("s.db");
        let objs = objects(7, 3_000);
        let keys = {
            let stash = builder(layout).open(&db)?;
            let keys = stash.save_all(&objs)?;
            stash.flush()?;
            // Read back by this handle, one at a time and many at once.
            for (key, obj) in keys.iter().zip(&objs).step_by(97) {
                assert_eq!(stash.get(key)?.as_deref(), Some(&obj[..]));
            }
            let many = stash.get_many(&keys)?;
            assert!(many.iter().zip(&objs).all(|(got, obj)| got.as_deref() == Some(&obj[..])));
            assert!(stash.missing(&keys)?.is_empty());
            let report = stash.verify()?;
            assert!(report.is_ok(), "{layout}: {report}");
            assert_eq!(report.checked, objs.len() as u64);
            stash.close()?;
            keys
        };
        // The values are in the file; the database holds rows of keys and places.
        let values = file_len(&sibling(&db, "-values"));
        let stored: u64 = Stash::open(&db)?.stats()?.stored_bytes;
        assert!(packed(values, stored), "{layout}: {values} bytes in the file for {stored} stored");
        assert_eq!(common_user_version(&db)?, 9);
        // Another handle, read-only, after a reopen.
        let stash = Stash::builder().read_only(true).open(&db)?;
        let many = stash.get_many(&keys)?;
        assert!(many.iter().zip(&objs).all(|(got, obj)| got.as_deref() == Some(&obj[..])));
        stash.close()?;
    }
    Ok(())
}

fn common_user_version(db: &Path) -> rusqlite::Result<i64> {
    crate::common::user_version(db)
}

#[test]
fn a_stash_keeps_its_values_where_it_was_made_to() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (rows, file) = (dir.path().join("rows.db"), dir.path().join("file.db"));
    Stash::open(&rows)?.close()?;
    builder(Layout::Single).open(&file)?.close()?;
    // Asked for the other place, each keeps its own.
    for (db, values_file) in [(&rows, false), (&file, true)] {
        let asked = if values_file { Values::InRows } else { Values::InFile };
        let stash = Stash::builder().values(asked).open(db)?;
        let key = stash.save(b"an object")?;
        stash.close()?;
        assert_eq!(sibling(db, "-values").exists(), values_file, "{}", db.display());
        assert_eq!(Stash::open(db)?.get(&key)?.as_deref(), Some(&b"an object"[..]));
    }
    Ok(())
}

#[test]
fn large_rows_and_chunked_objects_stay_in_the_database_and_read_back() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let stash = builder(Layout::Single).open(&db)?;
    // Incompressible: a 2 MiB row (written through blob I/O, kept in the row) and a 9 MiB
    // object in chunks (its manifest kept in the row, the chunks in their own table).
    let row = crate::common::noise(1, 2 << 20);
    let chunked = crate::common::noise(2, 9 << 20);
    let small = b"a small object".to_vec();
    let keys = stash.save_all(&[&row, &chunked, &small])?;
    stash.flush()?;
    assert_eq!(stash.get(&keys[0])?.as_deref(), Some(&row[..]));
    assert_eq!(stash.get(&keys[1])?.as_deref(), Some(&chunked[..]));
    assert_eq!(stash.get(&keys[2])?.as_deref(), Some(&small[..]));
    let report = stash.verify()?;
    assert!(report.is_ok(), "{report}");
    stash.close()?;
    assert!(file_len(&sibling(&db, "-values")) < 1 << 20, "only the small object is in the file");
    Ok(())
}

#[test]
fn removed_objects_are_gone_and_the_rest_read_back() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let stash = builder(Layout::Bucketed).open(&db)?;
    let objs = objects(11, 500);
    let keys = stash.save_all(&objs)?;
    stash.remove_all(&keys[..250])?;
    stash.flush()?;
    assert_eq!(stash.missing(&keys)?, keys[..250].to_vec());
    let many = stash.get_many(&keys[250..])?;
    assert!(many.iter().zip(&objs[250..]).all(|(got, obj)| got.as_deref() == Some(&obj[..])));
    // Saved again, they come back (at new places).
    stash.save_all(&objs[..250])?;
    stash.flush()?;
    assert!(stash.missing(&keys)?.is_empty());
    let report = stash.verify()?;
    assert!(report.is_ok(), "{report}");
    Ok(())
}

#[test]
fn two_handles_append_in_turn_and_read_each_others_objects() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let a = builder(Layout::Single).open(&db)?;
    let b = builder(Layout::Single).open(&db)?;
    let (mut keys, mut objs) = (Vec::new(), Vec::new());
    for round in 0..10u64 {
        let stash = if round % 2 == 0 { &a } else { &b };
        let batch = objects(100 + round, 200);
        keys.extend(stash.save_all(&batch)?);
        stash.flush()?;
        objs.extend(batch);
    }
    for stash in [&a, &b] {
        let many = stash.get_many(&keys)?;
        assert!(many.iter().zip(&objs).all(|(got, obj)| got.as_deref() == Some(&obj[..])));
    }
    a.close()?;
    b.close()?;
    let stored = Stash::open(&db)?.stats()?.stored_bytes;
    let values = file_len(&sibling(&db, "-values"));
    assert!(packed(values, stored), "no handle wrote over another's values: {values} for {stored}");
    Ok(())
}

#[test]
fn damage_to_the_file_of_values_is_reported_against_its_keys_and_never_served() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let objs = objects(13, 400);
    let keys = {
        let stash = builder(Layout::Single).durability(Durability::Safe).open(&db)?;
        let keys = stash.save_all(&objs)?;
        stash.close()?;
        keys
    };
    let values = sibling(&db, "-values");
    // A byte flipped in the middle of the file, and the file cut short.
    let file = OpenOptions::new().read(true).write(true).open(&values)?;
    let middle = file_len(&values) / 2;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, middle)?;
    file.write_all_at(&[byte[0] ^ 0x40], middle)?;
    file.set_len(file_len(&values) - 100)?;
    drop(file);

    let stash = Stash::open(&db)?;
    let report = stash.verify()?;
    assert!(
        (2..=3).contains(&report.corrupt.len()),
        "the flipped byte's object and the cut one: {report}"
    );
    let mut corrupt = 0;
    for (key, obj) in keys.iter().zip(&objs) {
        match stash.get(key) {
            Ok(Some(got)) => assert_eq!(got, *obj, "a wrong byte served"),
            Err(Error::Corrupt { key: bad, .. }) => {
                assert_eq!(bad, *key);
                assert!(report.corrupt.contains(key));
                corrupt += 1;
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(corrupt, report.corrupt.len());
    // `get_many` reports the first damaged key, and serves nothing wrong.
    assert!(matches!(stash.get_many(&keys), Err(Error::Corrupt { .. })));
    Ok(())
}

#[test]
fn a_damaged_database_is_rebuilt_around_its_file_of_values() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let objs = objects(17, 2_000);
    let keys = {
        let stash = builder(Layout::Single).open(&db)?;
        let keys = stash.save_all(&objs)?;
        stash.close()?;
        keys
    };
    let values_before = file_len(&sibling(&db, "-values"));
    // Damage a page in the middle of the database (its header and the meta table stay).
    let file = OpenOptions::new().write(true).open(&db)?;
    let page = 8192 * (file_len(&db) / 8192 / 2);
    file.write_all_at(&vec![0xA5; 8192], page)?;
    drop(file);
    let report = objstash::repair(&db)?;
    assert!(report.problem.is_some(), "{report}");
    let stash = Stash::open(&db)?;
    let found = stash.get_many(&keys)?;
    let kept = found.iter().filter(|f| f.is_some()).count() as u64;
    assert!(found.iter().zip(&objs).all(|(got, obj)| got.as_ref().is_none_or(|g| g == obj)));
    assert_eq!(kept, report.recovered, "{report}");
    assert_eq!(
        keys.len() as u64 - kept,
        report.lost().unwrap_or(0),
        "every loss reported: {report}"
    );
    // The values stayed where they were: the rebuilt rows point into the same file.
    assert_eq!(file_len(&sibling(&db, "-values")), values_before);
    // New saves go past the kept values.
    let more = objects(18, 300);
    let more_keys = stash.save_all(&more)?;
    stash.flush()?;
    let found = stash.get_many(&more_keys)?;
    assert!(found.iter().zip(&more).all(|(got, obj)| got.as_deref() == Some(&obj[..])));
    let again = stash.get_many(&keys)?;
    assert_eq!(again.iter().filter(|f| f.is_some()).count() as u64, kept);
    let check = stash.verify()?;
    assert!(check.is_ok(), "{check}");
    Ok(())
}

/// Bytes the file of values of the database at `db` takes on disk: its blocks, which the
/// writer gives back once their values are dead and compacted away.
fn blocks_of(db: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(sibling(db, "-values")).map_or(0, |m| m.blocks() * 512)
}

/// Waits (flushing, so that the writer runs its upkeep) until `done`; fails after a while.
fn wait_for(stash: &Stash, what: &str, done: impl Fn() -> bool) -> TestResult {
    let start = std::time::Instant::now();
    while !done() {
        anyhow::ensure!(start.elapsed() < std::time::Duration::from_secs(120), "never: {what}");
        stash.flush()?;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The indexes of one key in four (kept), and the other three keys (removed): every
/// segment of objects saved in order is then three quarters dead.
fn one_in_four(keys: &[objstash::Key]) -> (Vec<usize>, Vec<objstash::Key>) {
    let kept = (0..keys.len()).step_by(4).collect();
    let gone = keys.iter().enumerate().filter(|(i, _)| i % 4 != 0).map(|(_, k)| *k).collect();
    (kept, gone)
}

/// `n` incompressible objects of `len` bytes: each takes its length in the file.
fn noise_objects(seed: u64, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n as u64).map(|i| crate::common::noise(seed * 1_000_003 + i, len)).collect()
}

#[test]
fn removed_objects_give_their_blocks_back_and_the_rest_read_back() -> TestResult {
    for layout in [Layout::Single, Layout::Bucketed] {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("s.db");
        let stash = builder(layout).open(&db)?;
        // About 7 MiB: seven segments of the file.
        let objs = noise_objects(3, 1_200, 6 << 10);
        let keys = stash.save_all(&objs)?;
        stash.flush()?;
        let full = blocks_of(&db);
        assert!(full >= 7 << 20, "{layout}: {full}");
        // Three objects of every four go: every segment is three quarters dead, and its
        // live quarter is moved before its blocks are given back.
        let (kept, gone) = one_in_four(&keys);
        stash.remove_all(&gone)?;
        wait_for(&stash, "the blocks of removed values given back", || blocks_of(&db) <= full / 2)?;
        let check = |stash: &Stash| -> TestResult {
            let got = stash.get_many(&kept.iter().map(|&i| keys[i]).collect::<Vec<_>>())?;
            for (&i, got) in kept.iter().zip(&got) {
                assert_eq!(got.as_deref(), Some(&objs[i][..]), "{layout}: object {i}");
            }
            assert_eq!(stash.missing(&gone)?, gone);
            let report = stash.verify()?;
            assert!(report.is_ok(), "{layout}: {report}");
            assert_eq!(report.checked, kept.len() as u64);
            Ok(())
        };
        check(&stash)?;
        stash.close()?;
        check(&Stash::open(&db)?)?;
    }
    Ok(())
}

#[test]
fn readers_of_any_handle_read_right_bytes_while_the_file_is_compacted() -> TestResult {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let writer = builder(Layout::Single).open(&db)?;
    let other = Stash::open(&db)?;
    let objs = noise_objects(5, 1_200, 6 << 10);
    let keys = writer.save_all(&objs)?;
    writer.flush()?;
    let full = blocks_of(&db);
    let (kept, gone) = one_in_four(&keys);
    let stop = AtomicBool::new(false);
    let rounds = [AtomicU64::new(0), AtomicU64::new(0)];
    std::thread::scope(|s| -> TestResult {
        // Two readers, one on the writer's handle and one on another, read the objects that
        // stay, one at a time and many at once, until told to stop: every byte right.
        let readers: Vec<_> = [&writer, &other]
            .into_iter()
            .zip(&rounds)
            .map(|(stash, round)| {
                let (stop, keys, objs, kept) = (&stop, &keys, &objs, &kept);
                s.spawn(move || -> TestResult {
                    while !stop.load(Ordering::Acquire) {
                        for &i in kept.iter().step_by(7) {
                            assert_eq!(stash.get(&keys[i])?.as_deref(), Some(&objs[i][..]));
                        }
                        let many: Vec<_> = kept.iter().map(|&i| keys[i]).collect();
                        for (&i, got) in kept.iter().zip(stash.get_many(&many)?) {
                            assert_eq!(got.as_deref(), Some(&objs[i][..]), "object {i}");
                        }
                        round.fetch_add(1, Ordering::Release);
                    }
                    Ok(())
                })
            })
            .collect();
        let started = |n| rounds.iter().all(|r| r.load(Ordering::Acquire) >= n);
        let compacted = (|| -> TestResult {
            wait_for(&writer, "both readers reading", || started(1))?;
            writer.remove_all(&gone)?;
            wait_for(&writer, "the blocks given back", || blocks_of(&db) <= full / 2)?;
            // Each reader reads the whole set at least once more after the blocks went.
            let after: Vec<u64> = rounds.iter().map(|r| r.load(Ordering::Acquire) + 2).collect();
            wait_for(&writer, "both readers reading after", || {
                rounds.iter().zip(&after).all(|(r, &n)| r.load(Ordering::Acquire) >= n)
            })
        })();
        stop.store(true, Ordering::Release);
        for reader in readers {
            reader.join().expect("a reader panicked")?;
        }
        compacted
    })?;
    let report = other.verify()?;
    assert!(report.is_ok(), "{report}");
    Ok(())
}
