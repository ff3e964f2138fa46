//! Damaged rows and damaged files: wrong bytes are reported, never returned, and a file
//! damaged by a fast-mode crash is rebuilt from what still verifies.

use std::collections::HashSet;
use std::io::{Seek, SeekFrom, Write};

use crate::common::{LAYOUTS, TestResult, mark_unclean, objects};
use objstash::{Durability, Error, Key, Layout, Stash, Values};
use rusqlite::Connection;

fn table_of(layout: Layout, key: &Key) -> String {
    match layout {
        Layout::Single => "objects".to_string(),
        _ => format!("objects_{:02x}", key.as_bytes()[0]),
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn damaged_rows_are_reported_not_returned() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("c.db");
        let objs = objects(31, 300);
        let keys = {
            let stash = Stash::builder().layout(layout).open(&path)?;
            let keys = stash.save_all(&objs)?;
            stash.close()?;
            keys
        };
        {
            let conn = Connection::open(&path)?;
            let set = |key: &Key, data: Vec<u8>, raw_len: i64| -> rusqlite::Result<usize> {
                conn.execute(
                    &format!(
                        "UPDATE {} SET data = ?1, raw_len = ?2 WHERE key = ?3",
                        table_of(layout, key)
                    ),
                    rusqlite::params![data, raw_len, &key.as_bytes()[..]],
                )
            };
            // Valid gzip of other bytes of the same length: only the hash check can tell.
            let mut other = objs[1].clone();
            other[10] ^= 1;
            assert_eq!(set(&keys[1], gzip(&other), other.len() as i64)?, 1);
            // Garbage that is not gzip at all.
            assert_eq!(set(&keys[2], vec![0xde, 0xad, 0xbe, 0xef], objs[2].len() as i64)?, 1);
            // A wrong recorded length.
            assert_eq!(set(&keys[3], gzip(&objs[3]), objs[3].len() as i64 + 5)?, 1);
        }
        // Reads through SQLite's page cache and through a memory map check the same way.
        for mmap in [0, 64 << 20] {
            let stash =
                Stash::builder().layout(layout).threads(4).read_mmap_size(mmap).open(&path)?;
            for bad in &keys[1..4] {
                match stash.get(bad) {
                    Err(Error::Corrupt { key, .. }) => assert_eq!(key, *bad),
                    other => panic!("{layout}/{mmap}: expected Corrupt for {bad}, got {other:?}"),
                }
                assert!(stash.get_many(&[keys[0], *bad]).is_err());
            }
            // Over all 300 keys (split across threads), the error names the first damaged
            // key of the input, here the last of the three in key order or not.
            let reversed: Vec<Key> = keys.iter().rev().copied().collect();
            match stash.get_many(&reversed) {
                Err(Error::Corrupt { key, .. }) => assert_eq!(key, keys[3]),
                other => panic!("{layout}/{mmap}: expected Corrupt for {}, got {other:?}", keys[3]),
            }
            assert_eq!(stash.get(&keys[0])?.as_deref(), Some(&objs[0][..]));
            let report = stash.verify()?;
            assert_eq!(report.checked, 300);
            let mut corrupt = report.corrupt.clone();
            corrupt.sort();
            let mut want = keys[1..4].to_vec();
            want.sort();
            assert_eq!(corrupt, want, "{layout}/{mmap}");
            assert!(!report.is_ok());
        }
        let stash = Stash::builder().layout(layout).open(&path)?;
        // The damaged object can be removed and saved again.
        assert!(stash.remove(&keys[1])?);
        stash.save(&objs[1])?;
        assert_eq!(stash.get(&keys[1])?.as_deref(), Some(&objs[1][..]));
    }
    Ok(())
}

/// Marks the stash as left open by a fast-mode writer, as a crash would.
#[test]
fn unclean_but_sound_file_is_kept_and_reported() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("u.db");
    let keys = {
        let stash = Stash::open(&path)?;
        let keys = stash.save_all(&objects(32, 500))?;
        stash.close()?;
        keys
    };
    mark_unclean(&path)?;
    let stash = Stash::open(&path)?;
    let report = stash.recovery().expect("an unclean shutdown is reported").clone();
    assert_eq!(report.problem, None);
    assert_eq!(report.recovered, 500);
    assert!(report.damaged_copy.is_none());
    assert!(report.to_string().contains("checked sound"), "{report}");
    assert_eq!(stash.missing(&keys)?, Vec::<Key>::new());
    stash.close()?;
    assert!(Stash::open(&path)?.recovery().is_none(), "the clean close is recorded");
    Ok(())
}

#[test]
fn damaged_file_after_unclean_shutdown_is_salvaged() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.db");
        let objs = objects(33, 4_000);
        let keys = {
            let stash = Stash::builder().layout(layout).durability(Durability::Fast).open(&path)?;
            let keys = stash.save_all(&objs)?;
            stash.close()?;
            keys
        };
        mark_unclean(&path)?;
        // Zero a run of pages in the middle of the file, as a torn commit might.
        let len = std::fs::metadata(&path)?.len();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path)?;
        file.seek(SeekFrom::Start(len / 2 / 8192 * 8192))?;
        file.write_all(&vec![0u8; 8192 * 4])?;
        drop(file);

        let stash = Stash::builder().layout(layout).open(&path)?;
        let report = stash.recovery().expect("damage is reported").clone();
        assert!(report.problem.is_some(), "{layout}: {report:?}");
        assert!((3_900..=4_000).contains(&report.recovered), "{layout}: {report}");
        assert_eq!(report.claimed, Some(4_000));
        // The damaged file is kept exactly when objects were lost.
        assert_eq!(report.damaged_copy.is_some(), report.lost_anything(), "{layout}: {report}");
        assert_eq!(report.lost_anything(), report.recovered < 4_000, "{layout}: {report}");
        if let Some(copy) = &report.damaged_copy {
            assert!(copy.exists());
        }
        assert_eq!(stash.len()?, report.recovered);
        let got = stash.get_many(&keys)?;
        let present = got.iter().filter(|g| g.is_some()).count() as u64;
        assert_eq!(present, report.recovered);
        for (value, obj) in got.iter().zip(&objs) {
            if let Some(value) = value {
                assert_eq!(value, obj);
            }
        }
        assert!(stash.verify()?.is_ok());
        // The rebuilt stash takes writes and closes cleanly.
        stash.save_all(&objs)?;
        stash.close()?;
        let stash = Stash::open(&path)?;
        assert!(stash.recovery().is_none());
        assert_eq!(stash.len()?, 4_000);
    }
    Ok(())
}

/// A torn root page hides every row from SQLite, though every leaf is intact: salvage must
/// read the leaves directly and lose nothing.
#[test]
fn a_destroyed_root_page_loses_no_object() -> TestResult {
    // Only the page scanner reaches rows below a destroyed root; it read the row's first
    // four columns, so a stash with values in a file lost every row there.
    for values in [Values::InRows, Values::InFile] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("root.db");
        let objs = objects(34, 4_000);
        let keys = {
            let stash = Stash::builder().values(values).open(&path)?;
            let keys = stash.save_all(&objs)?;
            stash.close()?;
            keys
        };
        let root: i64 = Connection::open(&path)?.query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'objects'",
            [],
            |r| r.get(0),
        )?;
        mark_unclean(&path)?;
        let mut file = std::fs::OpenOptions::new().write(true).open(&path)?;
        file.seek(SeekFrom::Start((root as u64 - 1) * 8192))?;
        file.write_all(&[0u8; 8192])?;
        drop(file);

        let stash = Stash::open(&path)?;
        let report = stash.recovery().expect("damage is reported").clone();
        assert!(report.problem.is_some(), "{values}: {report:?}");
        assert_eq!(report.recovered, 4_000, "{values}: {report}");
        assert!(stash.missing(&keys)?.is_empty(), "{values}");
        for (got, obj) in stash.get_many(&keys)?.iter().zip(&objs) {
            assert_eq!(got.as_deref(), Some(&obj[..]), "{values}");
        }
        assert!(stash.verify()?.is_ok(), "{values}");
    }
    Ok(())
}

/// Reads every key and checks the one rule: right bytes, or an error that says why.
fn read_all_safely(stash: &Stash, keys: &[Key], objs: &[Vec<u8>]) -> (usize, usize) {
    let (mut good, mut errors) = (0, 0);
    for (key, obj) in keys.iter().zip(objs) {
        match stash.get(key) {
            Ok(Some(bytes)) => {
                assert_eq!(&bytes, obj, "wrong bytes served for {key}");
                good += 1;
            }
            Ok(None) => {}
            Err(Error::Corrupt { key: k, .. }) => {
                assert_eq!(k, *key);
                errors += 1;
            }
            Err(Error::Database { context, .. }) => {
                assert!(context.contains(&key.to_string()), "{context}");
                errors += 1;
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    (good, errors)
}

#[test]
fn random_byte_flips_are_listed_and_never_serve_wrong_bytes() -> TestResult {
    for layout in LAYOUTS {
        // Seed 20 damages a row's key and its bytes at once (seeds 1-40 pass).
        for seed in [1, 2, 3, 20u64] {
            flip_bytes_and_check(layout, seed)?;
        }
    }
    Ok(())
}

/// Flips 200 random bits past the header page of a 2,000-object stash, then checks that no
/// read serves wrong bytes and that every key `get` cannot serve is accounted for: named by
/// `verify` (or counted as a row with an untrustworthy key), or, when the damage forced a
/// salvage at open, counted by the recovery report.
fn flip_bytes_and_check(layout: Layout, seed: u64) -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("flip.db");
    let objs = objects(35, 2_000);
    let keys = {
        let stash = Stash::builder().layout(layout).open(&path)?;
        let keys = stash.save_all(&objs)?;
        stash.close()?;
        keys
    };
    let mut bytes = std::fs::read(&path)?;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = 8192 + (x % (bytes.len() as u64 - 8192)) as usize;
        bytes[at] ^= 1 << (x % 8);
    }
    std::fs::write(&path, &bytes)?;

    let stash = Stash::builder().layout(layout).open(&path)?;
    let mut bad = HashSet::new();
    for (key, obj) in keys.iter().zip(&objs) {
        match stash.get(key) {
            Ok(Some(bytes)) => assert_eq!(&bytes, obj, "{layout}/{seed}: wrong bytes for {key}"),
            Ok(None) | Err(Error::Corrupt { .. } | Error::Database { .. }) => {
                bad.insert(*key);
            }
            Err(other) => panic!("{layout}/{seed}: unexpected error {other:?}"),
        }
    }
    let good = keys.len() - bad.len();
    assert!(good > 1_500, "{layout}/{seed}: only {good} objects read back");
    let report = stash.verify()?;
    match stash.recovery() {
        // The damage reached the schema: the open salvaged what verifies and counted the
        // rest; the new file is sound.
        Some(recovery) => {
            assert!(recovery.recovered >= good as u64, "{layout}/{seed}: {recovery}");
            assert!(recovery.dropped > 0 || recovery.recovered == 2_000, "{recovery}");
            assert!(report.is_ok(), "{layout}/{seed}: {report}");
        }
        None => {
            assert!(
                !report.is_ok(),
                "{layout}/{seed}: {} keys unreadable, verify silent",
                bad.len()
            );
            let listed: HashSet<Key> =
                report.corrupt.iter().chain(&report.unreachable).copied().collect();
            let unlisted = bad.iter().filter(|key| !listed.contains(key)).count() as u64;
            // A row whose key bytes and stored bytes are both damaged can only be named by
            // the key it holds: its true key is nowhere in the file (a prefix index keeps
            // 8 bytes of it). Such a row is listed, under a key no save returned.
            let misnamed = listed.iter().filter(|key| !keys.contains(key)).count() as u64;
            assert!(
                unlisted <= report.unnamed + misnamed,
                "{layout}/{seed}: {unlisted} unreadable keys not named, {} rows counted, \
                 {misnamed} named by a damaged key: {report}",
                report.unnamed
            );
            // Everything named really is unreadable.
            for key in &listed {
                assert!(
                    bad.contains(key) || !keys.contains(key),
                    "{layout}/{seed}: {key} listed (corrupt: {}), get now says {:?}",
                    report.corrupt.contains(key),
                    stash.get(key).map(|o| o.map(|b| b.len()))
                );
            }
        }
    }
    stash.close()?;
    let repaired = objstash::repair(&path)?;
    assert!(repaired.recovered >= good as u64, "{layout}/{seed}: {repaired}");
    let stash = Stash::open(&path)?;
    assert!(stash.verify()?.is_ok(), "{layout}/{seed}: repaired stash still damaged");
    Ok(())
}

#[test]
fn a_truncated_file_never_serves_wrong_bytes() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("cut.db");
        let objs = objects(36, 2_000);
        let keys = {
            let stash = Stash::builder().layout(layout).open(&path)?;
            let keys = stash.save_all(&objs)?;
            stash.close()?;
            keys
        };
        let len = std::fs::metadata(&path)?.len();
        std::fs::OpenOptions::new().write(true).open(&path)?.set_len(len / 2)?;
        // SQLite finds the file shorter than its header says: the open salvages it, with
        // no unclean marker needed, and reports what it kept.
        let stash = Stash::builder().layout(layout).open(&path)?;
        let report = stash.recovery().expect("the truncation is reported").clone();
        assert!(report.problem.is_some(), "{layout}: {report}");
        assert!(report.recovered > 500 && report.recovered < 2_000, "{layout}: {report}");
        assert_eq!(report.claimed, None, "the totals row is past the cut: {report}");
        let (good, errors) = read_all_safely(&stash, &keys, &objs);
        assert_eq!((good as u64, errors), (report.recovered, 0), "{layout}");
        assert!(stash.verify()?.is_ok());
    }
    Ok(())
}

/// A header damaged alone cost nearly every object. With its page size changed (8192 to
/// 1, which SQLite reads as 65,536), salvage trusted it, read every page at the wrong place
/// and kept 2,088 of 19,497 objects, then "checked sound" from then on, while the copy it
/// set aside held every row. With the first 16 or 100 bytes zeroed, every command called
/// the file "not a SQLite database" and invited the user to pass another path. The pages
/// say their own size: salvage reads them through a rebuilt header and keeps every object,
/// and a stash whose header is gone is named as one, left untouched, and repaired.
#[test]
fn a_damaged_header_loses_no_object() -> TestResult {
    for layout in LAYOUTS {
        for values in [Values::InRows, Values::InFile] {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("head.db");
            let objs = objects(61, 3_000);
            let keys = {
                let stash = Stash::builder()
                    .layout(layout)
                    .values(values)
                    .durability(Durability::Safe)
                    .open(&path)?;
                let keys = stash.save_all(&objs)?;
                stash.save_named(&[("wall-17", &objs[7][..])])?;
                stash.close()?;
                keys
            };
            let all_there = |stash: &Stash| -> TestResult {
                for (got, obj) in stash.get_many(&keys)?.iter().zip(&objs) {
                    assert_eq!(got.as_deref(), Some(&obj[..]), "{layout} {values}");
                }
                assert_eq!(stash.resolve(&["wall-17"])?, vec![Some(keys[7])]);
                assert!(stash.verify()?.is_ok(), "{layout} {values}");
                Ok(())
            };
            let sound = std::fs::read(&path)?;

            // The page size: the open rebuilds the stash from its pages, losing nothing.
            let mut damaged = sound.clone();
            damaged[16..18].copy_from_slice(&1u16.to_be_bytes());
            std::fs::write(&path, &damaged)?;
            let stash = Stash::open(&path)?;
            let report = stash.recovery().expect("a rebuild is reported").clone();
            assert!(report.problem.as_deref().is_some_and(|p| p.contains("8192")), "{report}");
            assert_eq!((report.recovered, report.lost()), (3_000, Some(0)), "{report}");
            assert!(!report.lost_anything(), "{layout} {values}: {report}");
            assert_eq!(stash.durability(), Durability::Safe, "the settings are kept");
            all_there(&stash)?;
            stash.close()?;

            // The magic string, then the whole header: a clear error that names repair,
            // the file untouched; repair keeps every object.
            for zeroed in [16, 100] {
                std::fs::write(&path, &sound)?;
                let mut damaged = sound.clone();
                damaged[..zeroed].fill(0);
                std::fs::write(&path, &damaged)?;
                let err = Stash::open(&path).unwrap_err();
                assert!(matches!(err, Error::DamagedHeader { .. }), "{zeroed}: {err:?}");
                assert!(err.to_string().contains("repair"), "{err}");
                assert_eq!(std::fs::read(&path)?, damaged, "an open changes nothing");
                let report = objstash::repair(&path)?;
                assert_eq!((report.recovered, report.lost()), (3_000, Some(0)), "{report}");
                let stash = Stash::open(&path)?;
                all_there(&stash)?;
                stash.close()?;
            }
        }
    }
    Ok(())
}

/// A file that is not SQLite and holds no stash's pages is not one.
#[test]
fn a_destroyed_header_of_something_else_is_a_clear_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("head.db");
    std::fs::write(&path, b"not a database, and no pages of one\n".repeat(500))?;
    let err = Stash::open(&path).unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    Ok(())
}
