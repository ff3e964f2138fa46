//! Names: the caller's own ids for objects. The model test in `layouts_agree.rs` checks
//! names against a map in every layout and mode; these check what a model cannot: shared
//! objects, bad names, reads from other threads before a commit, names racing removes, the
//! format version, and names across a salvage.

use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{LAYOUTS, MODES, TestResult, format_1_stash, objects};
use objstash::{Durability, Error, Key, Layout, MAX_NAME_LEN, Stash};
use rusqlite::Connection;

fn user_version(path: &std::path::Path) -> rusqlite::Result<i64> {
    Connection::open(path)?.query_row("PRAGMA user_version", [], |r| r.get(0))
}

#[test]
fn names_share_objects_and_follow_a_new_save() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("n.db"))?;
    let keys = stash.save_named(&[("a", "one"), ("b", "one"), ("c", "two")])?;
    assert_eq!(keys[0], keys[1]);
    stash.flush()?;
    let stats = stash.stats()?;
    assert_eq!((stats.objects, stats.names), (2, 3));
    // Saving a name again points it at the new object; the old object stays.
    stash.save_named(&[("a", "three")])?;
    assert_eq!(
        stash.get_named(&["a", "b", "c", "d"])?,
        vec![Some(b"three".to_vec()), Some(b"one".to_vec()), Some(b"two".to_vec()), None]
    );
    assert_eq!(stash.resolve(&["a"])?, vec![Some(Key::of(b"three"))]);
    let stats = stash.stats()?;
    assert_eq!((stats.objects, stats.names), (3, 3));
    // Names are bytes, not text.
    stash.save_named(&[(vec![0u8, 255, 10], b"bin")])?;
    assert_eq!(stash.get_named(&[[0u8, 255, 10]])?, vec![Some(b"bin".to_vec())]);
    let report = stash.verify()?;
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.names, 4);
    stash.close()?;
    Ok(())
}

#[test]
fn bad_names_are_refused_before_anything_is_stored() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("n.db"))?;
    let long = vec![b'x'; MAX_NAME_LEN + 1];
    for bad in [Vec::new(), long] {
        let err = stash.save_named(&[(b"fine".to_vec(), b"a"), (bad.clone(), b"b")]).unwrap_err();
        assert!(matches!(err, Error::BadName { .. }), "{err}");
        assert!(matches!(stash.get_named(&[&bad]), Err(Error::BadName { .. })));
        assert!(matches!(stash.remove_named(&[&bad]), Err(Error::BadName { .. })));
    }
    stash.save_named(&[(vec![b'y'; MAX_NAME_LEN], b"longest")])?;
    stash.flush()?;
    let stats = stash.stats()?;
    assert_eq!((stats.objects, stats.names), (1, 1), "nothing of a refused call is stored");
    Ok(())
}

#[test]
fn a_named_save_is_read_by_other_threads_before_its_commit() -> TestResult {
    for layout in LAYOUTS {
        for durability in MODES {
            let dir = tempfile::tempdir()?;
            let stash = crate::common::open(dir.path(), layout, durability)?;
            let objs = objects(41, 3_000);
            for round in 0..30 {
                let part = &objs[round * 100..(round + 1) * 100];
                let named: Vec<(String, &Vec<u8>)> =
                    part.iter().enumerate().map(|(i, o)| (format!("{round}/{i}"), o)).collect();
                stash.save_named(&named)?;
                let names: Vec<&String> = named.iter().map(|(n, _)| n).collect();
                let got = std::thread::scope(|scope| {
                    scope.spawn(|| stash.get_named(&names)).join().expect("reader thread")
                })?;
                for (got, want) in got.iter().zip(part) {
                    assert_eq!(got.as_ref(), Some(want), "{layout}/{durability} round {round}");
                }
                let first = std::thread::scope(|scope| {
                    scope.spawn(|| stash.get_named(&names[..1])).join().expect("reader thread")
                })?;
                assert_eq!(first[0].as_ref(), Some(&part[0]));
            }
            assert!(stash.verify()?.is_ok());
        }
    }
    Ok(())
}

/// Names saved while other threads remove their objects: whatever the interleaving, a
/// name never outlives its object, and the totals match a recount.
#[test]
fn names_racing_removes_never_dangle() -> TestResult {
    for durability in MODES {
        let dir = tempfile::tempdir()?;
        let stash = crate::common::open(dir.path(), objstash::Layout::Single, durability)?;
        let objs = objects(42, 400);
        let keys: Vec<Key> = objs.iter().map(|o| Key::of(o)).collect();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| -> TestResult {
            let remover = scope.spawn(|| -> objstash::Result<u64> {
                let mut removed = 0;
                while !done.load(Ordering::Relaxed) {
                    for chunk in keys.chunks(37) {
                        removed += stash.remove_all(chunk)?.iter().filter(|r| **r).count() as u64;
                    }
                }
                Ok(removed)
            });
            for round in 0..40 {
                let named: Vec<(String, &Vec<u8>)> =
                    objs.iter().enumerate().map(|(i, o)| (format!("{round}-{i}"), o)).collect();
                stash.save_named(&named)?;
            }
            done.store(true, Ordering::Relaxed);
            let removed = remover.join().expect("remover")?;
            assert!(removed > 0, "the removes never met the saves");
            Ok(())
        })?;
        let report = stash.verify()?;
        assert!(report.is_ok(), "{durability}: {report}");
        // Every name that survived reads its object.
        let names: Vec<String> =
            (0..40).flat_map(|r| (0..400).map(move |i| format!("{r}-{i}"))).collect();
        let keys = stash.resolve(&names)?;
        let found: Vec<Key> = keys.iter().flatten().copied().collect();
        assert!(stash.get_many(&found)?.iter().all(Option::is_some), "{durability}");
        assert_eq!(stash.stats()?.names, found.len() as u64);
    }
    Ok(())
}

#[test]
fn names_raise_the_format_version_only_when_used() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("v.db");
    format_1_stash(&path, Layout::Single)?;
    let stash = Stash::open(&path)?;
    stash.save(b"plain")?;
    assert!(stash.get_named(&["none yet"])?[0].is_none());
    assert!(!stash.remove_named(&["none yet"])?[0]);
    stash.close()?;
    assert_eq!(user_version(&path)?, 1, "a stash without names stays readable by v1");
    let stash = Stash::open(&path)?;
    stash.save_named(&[("n", "named")])?;
    stash.close()?;
    assert_eq!(user_version(&path)?, 6);
    let stash = Stash::open(&path)?;
    assert_eq!(stash.get_named(&["n"])?, vec![Some(b"named".to_vec())]);
    Ok(())
}

/// Whether the stash at `path` has the names' index by key.
fn names_indexed_by_key(path: &std::path::Path) -> rusqlite::Result<bool> {
    Connection::open(path)?.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'objstash_names_key'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )
}

#[test]
fn names_are_indexed_by_key_at_the_first_removal_or_cap() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        // Without removals, names are not indexed by key, and the format says so.
        let path = dir.path().join("removed.db");
        let stash = Stash::builder().layout(layout).open(&path)?;
        let objs = objects(44, 200);
        let names: Vec<String> = (0..objs.len()).map(|i| format!("{i:032x}")).collect();
        let named: Vec<(&String, &Vec<u8>)> = names.iter().zip(&objs).collect();
        let keys = stash.save_named(&named)?;
        stash.flush()?;
        assert!(!names_indexed_by_key(&path)?, "{layout}");
        assert_eq!(user_version(&path)?, 8, "{layout}: a new stash's format holds names");
        // The first removal builds the index, and drops the names of what it removes.
        assert_eq!(stash.remove_all(&keys[..50])?, vec![true; 50]);
        assert!(names_indexed_by_key(&path)?, "{layout}");
        let found = stash.get_named(&names)?;
        assert!(found[..50].iter().all(Option::is_none), "{layout}");
        assert!(found[50..].iter().zip(&objs[50..]).all(|(f, o)| f.as_ref() == Some(o)));
        assert_eq!(stash.stats()?.names, 150);
        stash.close()?;

        // A stash with a cap has it before its first eviction; names made afterwards too.
        let path = dir.path().join("capped.db");
        let stash = Stash::builder().layout(layout).max_size(1 << 30).open(&path)?;
        stash.save_named(&named)?;
        stash.flush()?;
        assert!(names_indexed_by_key(&path)?, "{layout}");
        assert_eq!(user_version(&path)?, 8, "{layout}: a new stash's format holds names");
        stash.close()?;
    }
    Ok(())
}

#[test]
fn hex_names_are_stored_packed_and_older_tables_as_they_are() -> TestResult {
    let dir = tempfile::tempdir()?;
    let objs = objects(45, 6);
    // Hex ids, a name that is not hex, and names that begin with the tag bytes.
    let names: Vec<Vec<u8>> = vec![
        b"0123456789abcdef0123456789abcdef".to_vec(),
        b"ABCDEF".to_vec(),
        b"wall 12".to_vec(),
        vec![1, b'a', b'b'],
        vec![0],
        b"ab".to_vec(),
    ];
    let named: Vec<(&Vec<u8>, &Vec<u8>)> = names.iter().zip(&objs).collect();
    let stored = |path: &std::path::Path| -> rusqlite::Result<Vec<Vec<u8>>> {
        let conn = Connection::open(path)?;
        let mut stmt = conn.prepare("SELECT name FROM objstash_names ORDER BY name")?;
        stmt.query_map([], |r| r.get(0))?.collect()
    };
    // A new table: hex names as the bytes they spell, after a tag byte.
    let path = dir.path().join("new.db");
    let stash = Stash::open(&path)?;
    stash.save_named(&named)?;
    stash.close()?;
    let held = stored(&path)?;
    let id = [0x01u8, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
    assert!(held.contains(&[&[1u8][..], &id, &id].concat()), "{held:?}");
    assert!(held.contains(&b"wall 12".to_vec()) && held.contains(&b"ABCDEF".to_vec()));
    assert!(held.contains(&vec![0, 1, b'a', b'b']) && held.contains(&vec![0, 0]));
    assert!(held.contains(&vec![1, 0xab]));
    // An older table (format 3, names as given, indexed by key) stays as it is.
    let old = dir.path().join("old.db");
    format_1_stash(&old, Layout::Single)?;
    Connection::open(&old)?.execute_batch(
        "CREATE TABLE objstash_names(name BLOB PRIMARY KEY, key BLOB NOT NULL) WITHOUT ROWID;
         CREATE INDEX objstash_names_key ON objstash_names(key);
         INSERT INTO objstash_meta(name, value) VALUES ('names', 0);
         PRAGMA user_version = 3;",
    )?;
    let stash = Stash::open(&old)?;
    stash.save_named(&named)?;
    stash.close()?;
    assert_eq!(user_version(&old)?, 3);
    let mut given = names.clone();
    given.sort();
    assert_eq!(stored(&old)?, given);
    // Both read every name back, after a reopen, and drop them.
    for path in [&path, &old] {
        let stash = Stash::open(path)?;
        let found = stash.get_named(&names)?;
        assert!(found.iter().zip(&objs).all(|(f, o)| f.as_ref() == Some(o)), "{path:?}");
        assert!(stash.missing_named(&names)?.is_empty(), "{path:?}");
        assert_eq!(stash.remove_named(&names[..3])?, vec![true; 3]);
        let found = stash.get_named(&names)?;
        assert!(found[..3].iter().all(Option::is_none) && found[3..].iter().all(Option::is_some));
        stash.close()?;
    }
    Ok(())
}

#[test]
fn a_salvage_keeps_the_names_of_the_objects_it_keeps() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.db");
        let objs = objects(43, 4_000);
        let names: Vec<String> = (0..objs.len()).map(|i| format!("object {i}")).collect();
        {
            let stash = Stash::builder().layout(layout).durability(Durability::Fast).open(&path)?;
            let named: Vec<(&String, &Vec<u8>)> = names.iter().zip(&objs).collect();
            stash.save_named(&named)?;
            stash.close()?;
        }
        crate::common::mark_unclean(&path)?;
        // Zero a run of pages three quarters into the file (object and name pages alike,
        // past the bucketed layout's empty tables and their schema).
        let len = std::fs::metadata(&path)?.len();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path)?;
        file.seek(SeekFrom::Start(len * 3 / 4 / 8192 * 8192))?;
        file.write_all(&vec![0u8; 8192 * 4])?;
        drop(file);

        let stash = Stash::builder().layout(layout).open(&path)?;
        let report = stash.recovery().expect("damage is reported").clone();
        assert!(report.problem.is_some(), "{layout}: {report}");
        eprintln!("{layout}: {report}");
        assert_eq!(report.names_claimed, Some(4_000));
        assert!(report.names_recovered <= report.recovered, "{layout}: {report}");
        assert!(report.names_recovered > 3_000, "most names survive: {report}");
        // Lost names are news, and the damaged file is kept for them.
        let lost = 4_000 - report.names_recovered;
        assert_eq!(report.lost_names(), Some(lost));
        assert_eq!(report.to_string().contains(&format!("{lost} names are lost")), lost > 0);
        assert_eq!(report.damaged_copy.is_some(), report.lost_anything(), "{report}");
        assert_eq!(stash.stats()?.names, report.names_recovered);
        let keys = stash.resolve(&names)?;
        let got = stash.get_named(&names)?;
        assert_eq!(keys.iter().flatten().count() as u64, report.names_recovered);
        for ((key, value), obj) in keys.iter().zip(&got).zip(&objs) {
            assert_eq!(key.is_some(), value.is_some());
            if let Some(value) = value {
                assert_eq!(value, obj);
            }
        }
        let report = stash.verify()?;
        assert!(report.is_ok(), "{report}");
    }
    Ok(())
}

#[test]
fn stored_objects_can_be_named_afterwards_and_absent_ones_are_not() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("stash.db");
    let stash = Stash::open(&path)?;
    let key = stash.save(b"a stored object")?;
    let absent = Key::of(b"never saved");
    assert_eq!(stash.name(&[("first", key), ("second", absent)])?, vec![true, false]);
    assert_eq!(stash.resolve(&["first"])?, vec![Some(key)]);
    stash.close()?;
    let stash = Stash::open(&path)?;
    assert_eq!(stash.resolve(&["first", "second"])?, vec![Some(key), None]);
    assert_eq!(stash.get_named(&["first"])?[0].as_deref(), Some(&b"a stored object"[..]));
    assert!(matches!(stash.name(&[("", key)]), Err(Error::BadName { .. })));
    Ok(())
}

/// Every named object at once (`named_objects`, what Speckle's `GetAllObjects` lists): each
/// name with its object, in both layouts and with values in a file; an object under two
/// names under each; a removed object and an incomplete model's root left out; a large
/// (chunked) object whole.
#[test]
fn named_objects_lists_every_name_with_its_object() -> TestResult {
    use objstash::Values;
    for (layout, values) in
        LAYOUTS.into_iter().flat_map(|l| [(l, Values::InRows), (l, Values::InFile)])
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("n.db");
        let stash = Stash::builder().layout(layout).values(values).open(&path)?;
        let many = objects(70, 9_000);
        let named: Vec<(String, &[u8])> =
            many.iter().enumerate().map(|(i, o)| (format!("id-{i}"), &o[..])).collect();
        stash.save_named(&named)?;
        stash.save_named(&[("twin", &many[5][..])])?;
        let large = crate::common::noise(71, 9 << 20);
        stash.save_named(&[("large", &large[..])])?;
        assert!(stash.remove(&Key::of(&many[7]))?);
        let root = b"{\"root\":1}".to_vec();
        let member = Key::of(&many[8]);
        stash.save_named(&[("root", &root[..])])?;
        stash.declare_model(&Key::of(&root), &[member])?;
        assert!(stash.remove(&member)?, "the model is incomplete: its root reads absent");

        let listed: std::collections::HashMap<Vec<u8>, Vec<u8>> =
            stash.named_objects()?.into_iter().collect();
        assert_eq!(listed.len(), 9_000 - 2 + 2, "{layout} {values}");
        for (i, object) in many.iter().enumerate() {
            let got = listed.get(format!("id-{i}").as_bytes());
            assert_eq!(got.map(Vec::as_slice), (i != 7 && i != 8).then_some(&object[..]));
        }
        assert_eq!(listed[&b"twin"[..]], many[5]);
        assert_eq!(listed[&b"large"[..]], large);
        assert!(
            !listed.contains_key(&b"root"[..]),
            "{layout} {values}: an incomplete model's root"
        );
        stash.close()?;
    }
    Ok(())
}
