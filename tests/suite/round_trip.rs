//! Saving and reading back, in both layouts and both durability modes.

use crate::common::{LAYOUTS, MODES, TestResult, noise, objects, open};
use objstash::Key;

#[test]
fn round_trip_in_every_layout_and_mode() -> TestResult {
    for layout in LAYOUTS {
        for mode in MODES {
            let dir = tempfile::tempdir()?;
            let stash = open(dir.path(), layout, mode)?;
            let objs = objects(1, 2_000);
            let keys = stash.save_all(&objs)?;
            assert_eq!(keys.len(), objs.len());
            for (key, obj) in keys.iter().zip(&objs) {
                assert_eq!(*key, Key::of(obj));
                assert_eq!(stash.get(key)?.as_deref(), Some(&obj[..]), "{layout} {mode}");
            }
            let single = stash.save(b"one more")?;
            stash.flush()?;
            assert_eq!(stash.len()?, 2_001);
            assert_eq!(stash.get(&single)?.as_deref(), Some(&b"one more"[..]));
            assert_eq!(stash.get(&Key::of(b"never saved"))?, None);
            assert_eq!(stash.layout(), layout);
            assert_eq!(stash.durability(), mode);
            stash.close()?;
        }
    }
    Ok(())
}

#[test]
fn batch_calls_keep_input_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Four threads: get_many splits these keys into four parts, read on four connections.
    let stash = objstash::Stash::builder()
        .layout(objstash::Layout::Bucketed)
        .threads(4)
        .open(dir.path().join("order.db"))?;
    let objs = objects(2, 500);
    let keys = stash.save_all(&objs)?;
    let absent = Key::of(b"absent");
    let mut asked: Vec<Key> = keys.iter().rev().copied().collect();
    asked.insert(250, absent);
    // The same keys twice, far apart in the input and so in different parts.
    asked.extend_from_slice(&keys[..20]);
    let got = stash.get_many(&asked)?;
    assert_eq!(got.len(), asked.len());
    for (key, value) in asked.iter().zip(&got) {
        match value {
            Some(bytes) => assert_eq!(Key::of(bytes), *key),
            None => assert_eq!(*key, absent),
        }
    }
    assert_eq!(stash.missing(&[keys[3], absent, keys[7], absent])?, vec![absent, absent]);
    assert!(stash.contains(&keys[0])? && !stash.contains(&absent)?);
    Ok(())
}

#[test]
fn remove_deletes_and_counts() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path(), objstash::Layout::Single, objstash::Durability::Safe)?;
    let keys = stash.save_all(&objects(3, 100))?;
    let before = stash.stats()?;
    assert!(stash.remove(&keys[10])?);
    assert!(!stash.remove(&keys[10])?, "a second remove finds nothing");
    assert_eq!(stash.get(&keys[10])?, None);
    let after = stash.stats()?;
    assert_eq!(after.objects, 99);
    assert!(after.raw_bytes < before.raw_bytes && after.stored_bytes < before.stored_bytes);
    // A removed object can be saved again.
    let again = stash.save(&objects(3, 11)[10])?;
    assert_eq!(again, keys[10]);
    assert!(stash.get(&again)?.is_some());
    assert_eq!(stash.len()?, 100);
    Ok(())
}

#[test]
fn resaving_costs_nothing_on_disk() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path(), objstash::Layout::Single, objstash::Durability::Fast)?;
    let objs = objects(4, 1_000);
    stash.save_all(&objs)?;
    let first = stash.stats()?;
    stash.save_all(&objs)?;
    for obj in objs.iter().take(100) {
        stash.save(obj)?;
    }
    let second = stash.stats()?;
    assert_eq!(first.objects, 1_000);
    assert_eq!(
        (second.objects, second.raw_bytes, second.stored_bytes),
        (first.objects, first.raw_bytes, first.stored_bytes)
    );
    Ok(())
}

#[test]
fn empty_and_huge_objects() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path(), objstash::Layout::Bucketed, objstash::Durability::Safe)?;
    let empty = stash.save(b"")?;
    let huge_bytes = noise(9, 64 << 20);
    let huge = stash.save(&huge_bytes)?;
    assert_eq!(stash.get(&empty)?, Some(Vec::new()));
    assert_eq!(stash.get(&huge)?.as_deref(), Some(&huge_bytes[..]), "before commit");
    stash.flush()?;
    assert_eq!(stash.get(&huge)?.as_deref(), Some(&huge_bytes[..]), "after commit");
    let empties = vec![Vec::<u8>::new(); 1_000];
    let keys = stash.save_all(&empties)?;
    assert!(keys.iter().all(|k| *k == empty));
    let stats = stash.stats()?;
    assert_eq!(stats.objects, 2);
    assert_eq!(stats.raw_bytes, 64 << 20);
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn stats_report_sizes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path(), objstash::Layout::Single, objstash::Durability::Fast)?;
    let objs = objects(5, 3_000);
    let raw: usize = objs.iter().map(Vec::len).sum();
    stash.save_all(&objs)?;
    let stats = stash.stats()?;
    assert_eq!(stats.objects, 3_000);
    assert_eq!(stats.raw_bytes, raw as u64);
    assert!(stats.stored_bytes * 10 < stats.raw_bytes * 6, "JSON should compress: {stats}");
    assert!(stats.file_bytes >= stats.stored_bytes);
    let ratio = stats.raw_bytes as f64 / stats.stored_bytes as f64;
    assert!((stats.compression_ratio() - ratio).abs() < 1e-9 && ratio > 1.6, "{stats}");
    let text = stats.to_string();
    assert!(text.contains("3000") && text.contains("compression ratio"), "{text}");
    let report = stash.verify()?;
    assert_eq!((report.checked, report.corrupt.len()), (3_000, 0));
    Ok(())
}

#[test]
fn mapped_reads_follow_a_growing_file() -> TestResult {
    for layout in LAYOUTS {
        for mode in MODES {
            let dir = tempfile::tempdir()?;
            // A map far smaller than the file will grow: reads cross from mapped pages to
            // read pages, and mapped pages are rewritten by later commits.
            let path = dir.path().join("m.db");
            let stash = objstash::Stash::builder()
                .layout(layout)
                .durability(mode)
                .read_mmap_size(256 << 10)
                .open(&path)?;
            let objs = objects(7, 3_000);
            let first = stash.save_all(&objs[..50])?;
            stash.flush()?;
            for (key, obj) in first.iter().zip(&objs) {
                assert_eq!(stash.get(key)?.as_deref(), Some(&obj[..]), "{layout} {mode}");
            }
            let keys = stash.save_all(&objs)?;
            stash.flush()?;
            assert!(stash.remove(&keys[0])?);
            assert_eq!(stash.get(&keys[0])?, None, "{layout} {mode}");
            for (key, obj) in keys.iter().zip(&objs).skip(1) {
                assert_eq!(stash.get(key)?.as_deref(), Some(&obj[..]), "{layout} {mode}");
            }
            let many = stash.get_many(&keys)?;
            assert_eq!(many[0], None);
            assert!(
                many.iter()
                    .skip(1)
                    .zip(&objs[1..])
                    .all(|(got, obj)| got.as_deref() == Some(&obj[..]))
            );
            assert!(stash.verify()?.is_ok(), "{layout} {mode}");
            // Reads are served from the map (in WAL mode once the pages reach the file).
            stash.close()?;
            let stash = objstash::Stash::builder().read_mmap_size(256 << 10).open(&path)?;
            assert_eq!(stash.get(&keys[1])?.as_deref(), Some(&objs[1][..]));
            let maps = std::fs::read_to_string("/proc/self/maps")?;
            let name = path.to_string_lossy();
            assert!(maps.lines().any(|l| l.ends_with(&*name)), "{layout} {mode}: not mapped");
        }
    }
    Ok(())
}

/// One call mixing runs of new objects with runs of stored ones: every object is stored
/// and counted once.
#[test]
fn new_and_stored_objects_mixed_in_one_call() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let stash = open(dir.path(), layout, objstash::Durability::Fast)?;
        let objs = objects(9, 4_000);
        let (old, new): (Vec<_>, Vec<_>) = objs.iter().enumerate().partition(|(i, _)| i % 4 != 0);
        let old: Vec<&Vec<u8>> = old.into_iter().map(|(_, o)| o).collect();
        stash.save_all(&old)?;
        stash.flush()?;
        // Runs of 20 new objects, then 60 stored ones, and so on.
        let mut mixed: Vec<&Vec<u8>> = Vec::new();
        for (fresh, stored) in new.chunks(20).zip(old.chunks(60)) {
            mixed.extend(fresh.iter().map(|(_, o)| *o));
            mixed.extend(stored);
        }
        let keys = stash.save_all(&mixed)?;
        for (key, obj) in keys.iter().zip(&mixed) {
            assert_eq!(*key, Key::of(obj));
        }
        let stats = stash.stats()?;
        let raw: u64 = objs.iter().map(|o| o.len() as u64).sum();
        assert_eq!((stats.objects, stats.raw_bytes), (4_000, raw), "{layout}");
        assert!(stash.verify()?.is_ok());
    }
    Ok(())
}

/// `entries` lists every stored object once, with its sizes, in every layout; removed
/// objects are gone from it and pending ones are listed (it flushes first).
#[test]
fn entries_list_every_object_with_its_sizes() -> TestResult {
    for layout in crate::common::LAYOUTS {
        let dir = tempfile::tempdir()?;
        let stash = crate::common::open(dir.path(), layout, objstash::Durability::Fast)?;
        let objs = objects(77, 3_000);
        let keys = stash.save_all(&objs)?;
        stash.remove_all(&keys[..100])?;
        let listed: Vec<objstash::Entry> = stash.entries()?.collect::<objstash::Result<_>>()?;
        assert_eq!(listed.len(), 2_900, "{layout}");
        let sizes: std::collections::HashMap<Key, usize> =
            keys.iter().zip(&objs).skip(100).map(|(k, o)| (*k, o.len())).collect();
        let mut stored = 0;
        for entry in &listed {
            assert_eq!(sizes.get(&entry.key), Some(&(entry.raw_bytes as usize)), "{layout}");
            assert!(entry.stored_bytes > 0 && entry.stored_bytes < entry.raw_bytes);
            stored += entry.stored_bytes;
        }
        let unique: std::collections::HashSet<Key> = listed.iter().map(|e| e.key).collect();
        assert_eq!(unique.len(), listed.len(), "{layout}: a key listed twice");
        assert_eq!(stored, stash.stats()?.stored_bytes, "{layout}");
    }
    Ok(())
}

/// `remove_all` removes many keys in one commit and says which were stored.
#[test]
fn remove_all_answers_per_key_in_input_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = objstash::Stash::open(dir.path().join("r.db"))?;
    let keys = stash.save_all(&objects(78, 50))?;
    let absent = Key::of(b"never saved");
    let asked = [keys[3], absent, keys[7], keys[3]];
    assert_eq!(stash.remove_all(&asked)?, [true, false, true, false]);
    assert_eq!(stash.len()?, 48);
    assert_eq!(stash.missing(&keys)?, [keys[3], keys[7]]);
    assert!(stash.remove_all(&[])?.is_empty());
    assert!(stash.verify()?.is_ok());
    Ok(())
}
