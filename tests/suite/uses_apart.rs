//! Uses recorded apart from the rows (format 8): a stash without a cap writes the uses of
//! its reads into narrow tables beside its object tables, and whatever reads the order of
//! uses (expiry by age, eviction, the oldest use in `stats`) counts them. Stashes of older
//! formats keep recording uses in their rows. Ages are set by writing the rows' `used`
//! directly into a closed stash, so no test waits for a clock.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use crate::common::{LAYOUTS, TestResult, noise};
use objstash::{Key, Layout, Stash, StashBuilder};

/// A use long ago: one second after the Unix epoch.
const LONG_AGO: i64 = 1_000;

/// Every read records its use, and nothing recent is spared beyond the call.
fn builder(layout: Layout) -> StashBuilder {
    Stash::builder().layout(layout).eviction_grace(Duration::ZERO).use_resolution(Duration::ZERO)
}

/// The object tables of the stash on `conn`, and whether each has a narrow table of uses.
fn tables(conn: &rusqlite::Connection) -> anyhow::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'objects%' \
         AND name NOT LIKE '%\\_uses' ESCAPE '\\' ORDER BY name",
    )?;
    let names = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Sets every object's last use, in the rows, to [`LONG_AGO`] (the stash closed).
fn age_every_row(path: &Path) -> TestResult {
    let conn = rusqlite::Connection::open(path)?;
    for table in tables(&conn)? {
        conn.execute(&format!("UPDATE {table} SET used = ?1"), [LONG_AGO])?;
    }
    Ok(())
}

/// Rows of the narrow tables of uses, and object rows whose own use is [`LONG_AGO`].
fn counts(path: &Path) -> anyhow::Result<(i64, i64)> {
    let conn = rusqlite::Connection::open(path)?;
    let (mut apart, mut aged) = (0, 0);
    for table in tables(&conn)? {
        apart += conn
            .query_row(&format!("SELECT count(*) FROM {table}_uses"), [], |r| r.get::<_, i64>(0))?;
        aged += conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE used = ?1"),
            [LONG_AGO],
            |r| r.get::<_, i64>(0),
        )?;
    }
    Ok((apart, aged))
}

/// One object saved into a new single-layout stash at `path`, its use then set long ago.
fn saved_long_ago(path: &Path, seed: u64) -> anyhow::Result<Key> {
    let stash = builder(Layout::Single).open(path)?;
    let key = stash.save(&noise(seed, 1_000))?;
    stash.close()?;
    age_every_row(path)?;
    Ok(key)
}

/// Opens the stash at `path`, reads `key` and closes it (which writes the read's use).
fn read_once(path: &Path, key: &Key) -> TestResult {
    let stash = builder(Layout::Single).open(path)?;
    anyhow::ensure!(stash.get(key)?.is_some(), "{key} is stored");
    stash.close()?;
    Ok(())
}

#[test]
fn reads_of_an_uncapped_stash_are_recorded_apart_and_expiry_counts_them() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.db");
        let objects: Vec<Vec<u8>> = (0..6).map(|i| noise(i, 2_000)).collect();
        let keys = {
            let stash = builder(layout).open(&path)?;
            let keys = stash.save_all(&objects)?;
            stash.close()?;
            keys
        };
        age_every_row(&path)?;
        {
            let stash = builder(layout).open(&path)?;
            assert_eq!(stash.get(&keys[0])?.as_deref(), Some(&objects[0][..]));
            let many = stash.get_many(&keys[1..3])?;
            assert!(many.iter().all(Option::is_some), "{layout}");
            stash.close()?;
        }
        // Three uses, written beside the rows; the rows themselves untouched.
        assert_eq!(counts(&path)?, (3, 6), "{layout}");

        let stash = builder(layout).open(&path)?;
        // Expiry folds them in first: the three read stay, the three unread go.
        assert_eq!(stash.evict_unused_since(Duration::from_secs(3600))?.objects, 3, "{layout}");
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(stash.contains(key)?, i < 3, "{layout}: object {i}");
        }
        let report = stash.verify()?;
        anyhow::ensure!(report.is_ok(), "{report}");
        stash.close()?;
        assert_eq!(counts(&path)?, (0, 0), "{layout}: folded into the rows");
    }
    Ok(())
}

#[test]
fn the_oldest_use_counts_the_uses_recorded_apart() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let objects: Vec<Vec<u8>> = (10..12).map(|i| noise(i, 1_000)).collect();
    let keys = {
        let stash = builder(Layout::Single).open(&path)?;
        let keys = stash.save_all(&objects)?;
        // An expiry that evicts nothing builds the index of uses `stats` reads.
        assert_eq!(stash.evict_unused_since(Duration::from_secs(3600))?.objects, 0);
        stash.close()?;
        keys
    };
    age_every_row(&path)?;
    let long_ago = Some(UNIX_EPOCH + Duration::from_millis(LONG_AGO as u64));
    read_once(&path, &keys[0])?;
    let stash = builder(Layout::Single).open(&path)?;
    assert_eq!(stash.stats()?.oldest_use, long_ago, "the unread object's use is the oldest");
    stash.close()?;
    read_once(&path, &keys[1])?;
    assert_eq!(counts(&path)?, (2, 2), "both uses apart");
    let stash = builder(Layout::Single).open(&path)?;
    let oldest = stash.stats()?.oldest_use;
    assert!(oldest.is_some_and(|t| t > UNIX_EPOCH + Duration::from_secs(86_400)), "{oldest:?}");
    Ok(())
}

#[test]
fn a_removed_object_leaves_no_use_behind() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let key = saved_long_ago(&path, 20)?;
    read_once(&path, &key)?;
    assert_eq!(counts(&path)?, (1, 1));
    let stash = builder(Layout::Single).open(&path)?;
    assert!(stash.remove(&key)?);
    stash.close()?;
    assert_eq!(counts(&path)?, (0, 0));
    Ok(())
}

#[test]
fn a_stash_of_an_older_format_keeps_recording_uses_in_its_rows() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let key = saved_long_ago(&path, 30)?;
    // What format 7 made: the same tables, without the narrow one.
    let conn = rusqlite::Connection::open(&path)?;
    conn.execute_batch("DROP TABLE objects_uses; PRAGMA user_version = 7;")?;
    drop(conn);
    read_once(&path, &key)?;
    let conn = rusqlite::Connection::open(&path)?;
    let used: i64 = conn.query_row("SELECT used FROM objects", [], |r| r.get(0))?;
    assert!(used > LONG_AGO, "the use went into the row");
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    assert_eq!(version, 7, "left in its format");
    let narrow: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%\\_uses' ESCAPE '\\'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(narrow, 0);
    Ok(())
}
