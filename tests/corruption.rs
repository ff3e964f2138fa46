//! Damaged rows and damaged files: wrong bytes are reported, never returned, and a file
//! damaged by a fast-mode crash is rebuilt from what still verifies.

mod common;

use std::io::{Seek, SeekFrom, Write};

use common::{LAYOUTS, TestResult, objects};
use objstash::{Durability, Error, Key, Layout, Stash};
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
        let stash = Stash::builder().layout(layout).open(&path)?;
        for bad in &keys[1..4] {
            match stash.get(bad) {
                Err(Error::Corrupt { key, .. }) => assert_eq!(key, *bad),
                other => panic!("{layout}: expected Corrupt for {bad}, got {other:?}"),
            }
            assert!(stash.get_many(&[keys[0], *bad]).is_err());
        }
        assert_eq!(stash.get(&keys[0])?.as_deref(), Some(&objs[0][..]));
        let report = stash.verify()?;
        assert_eq!(report.checked, 300);
        let mut corrupt = report.corrupt.clone();
        corrupt.sort();
        let mut want = keys[1..4].to_vec();
        want.sort();
        assert_eq!(corrupt, want, "{layout}");
        assert!(!report.is_ok());
        // The damaged object can be removed and saved again.
        assert!(stash.remove(&keys[1])?);
        stash.save(&objs[1])?;
        assert_eq!(stash.get(&keys[1])?.as_deref(), Some(&objs[1][..]));
    }
    Ok(())
}

/// Marks the stash as left open by a fast-mode writer, as a crash would.
fn mark_unclean(path: &std::path::Path) -> TestResult {
    let conn = Connection::open(path)?;
    conn.execute("UPDATE objstash_meta SET value = 'open-fast' WHERE name = 'state'", [])?;
    Ok(())
}

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
        let copy = report.damaged_copy.clone().expect("the damaged file is kept");
        assert!(copy.exists());
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
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("root.db");
    let objs = objects(34, 4_000);
    let keys = {
        let stash = Stash::open(&path)?;
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
    assert!(report.problem.is_some(), "{report:?}");
    assert_eq!(report.recovered, 4_000, "{report}");
    assert!(stash.missing(&keys)?.is_empty());
    assert!(stash.verify()?.is_ok());
    Ok(())
}
