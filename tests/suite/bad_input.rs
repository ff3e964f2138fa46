//! Every bad input gets a clear error, and nothing already stored is lost.

use std::fs;

use crate::common::{TestResult, Tmpfs, noise, objects};
use objstash::{Error, Stash};
use rusqlite::Connection;

mod full_disk;

#[test]
fn a_directory_is_not_a_stash() -> TestResult {
    let dir = tempfile::tempdir()?;
    let err = Stash::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err:?}");
    assert!(err.to_string().contains("is a directory"), "{err}");
    Ok(())
}

#[test]
fn a_text_file_is_refused_and_left_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    fs::write(&path, &text)?;
    let err = Stash::open(&path).unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains("not a SQLite database"), "{err}");
    assert_eq!(fs::read_to_string(&path)?, text);
    assert_eq!(entries(dir.path())?, ["notes.txt"], "nothing is left beside the file");
    Ok(())
}

/// The names in a directory, sorted.
fn entries(dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    Ok(names)
}

#[test]
fn an_empty_file_becomes_a_stash() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("empty.db");
    fs::write(&path, b"")?;
    let stash = Stash::open(&path)?;
    let key = stash.save(b"first")?;
    stash.close()?;
    assert_eq!(Stash::open(&path)?.get(&key)?.as_deref(), Some(&b"first"[..]));
    Ok(())
}

#[test]
fn another_applications_database_is_refused_untouched() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("app.db");
    {
        let conn = Connection::open(&path)?;
        conn.execute_batch(
            "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO customers(name) VALUES ('Ada'), ('Grace');",
        )?;
    }
    let before = fs::read(&path)?;
    let err = Stash::open(&path).unwrap_err();
    assert!(matches!(err, Error::ForeignDatabase { .. }), "{err:?}");
    assert!(err.to_string().contains("another application"), "{err}");
    assert_eq!(fs::read(&path)?, before, "the foreign database was modified");
    // The lock file an open makes is removed again when the file turns out not to be a
    // stash (a lock file beside another application's database was left behind before).
    assert_eq!(entries(dir.path())?, ["app.db"], "nothing is left beside the database");
    // Opened for reading only: the same error, and nothing left either.
    let err = Stash::builder().read_only(true).open(&path).unwrap_err();
    assert!(matches!(err, Error::ForeignDatabase { .. }), "{err:?}");
    assert_eq!(entries(dir.path())?, ["app.db"], "nothing is left beside the database");
    assert!(matches!(objstash::repair(&path), Err(Error::ForeignDatabase { .. })));
    assert_eq!(fs::read(&path)?, before, "the foreign database was modified");
    Ok(())
}

/// A SQLite file that holds no table (another program made it and has not written yet)
/// is not adopted as a stash: only an empty file or no file is.
#[test]
fn a_sqlite_file_without_tables_is_not_adopted() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blank.db");
    Connection::open(&path)?.execute_batch("PRAGMA user_version = 7; VACUUM;")?;
    let before = fs::read(&path)?;
    assert!(!before.is_empty());
    for read_only in [false, true] {
        let err = Stash::builder().read_only(read_only).open(&path).unwrap_err();
        assert!(matches!(err, Error::ForeignDatabase { .. }), "{err:?}");
    }
    assert_eq!(fs::read(&path)?, before);
    assert_eq!(entries(dir.path())?, ["blank.db"]);
    Ok(())
}

#[test]
fn a_newer_format_is_refused_untouched() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("new.db");
    let key = {
        let stash = Stash::open(&path)?;
        let key = stash.save(b"from the future")?;
        stash.close()?;
        key
    };
    Connection::open(&path)?.pragma_update(None, "user_version", 99)?;
    let before = fs::read(&path)?;
    let err = Stash::open(&path).unwrap_err();
    match &err {
        Error::UnsupportedFormat { found, supported, .. } => {
            assert_eq!((*found, *supported), (99, 10))
        }
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
    assert!(err.to_string().contains("upgrade objstash"), "{err}");
    assert_eq!(fs::read(&path)?, before);
    Connection::open(&path)?.pragma_update(None, "user_version", 1)?;
    assert!(Stash::open(&path)?.contains(&key)?);
    Ok(())
}

#[test]
fn settings_out_of_range_are_refused_before_touching_disk() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("cfg.db");
    let cases = [
        Stash::builder().compression_level(10),
        Stash::builder().batch_size(0),
        Stash::builder().channel_capacity(0),
        Stash::builder().threads(0),
    ];
    for builder in cases {
        let err = builder.open(&path).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    }
    assert!(!path.exists(), "a refused configuration created the file");
    Ok(())
}

#[test]
fn a_missing_directory_is_created() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("a/b/c/stash.db");
    Stash::open(&path)?.close()?;
    assert!(path.exists());
    Ok(())
}

#[test]
#[ignore = "mounts a tmpfs: needs root; .ci/run runs it with --ignored as root"]
fn a_read_only_location_opens_for_reading_and_loses_nothing() -> TestResult {
    let fs = Tmpfs::mount("8m").expect("mounting a tmpfs (needs root: run as root)");
    let path = fs.path().join("ro.db");
    let objs = objects(41, 200);
    let keys = {
        let stash = Stash::open(&path)?;
        let keys = stash.save_all(&objs)?;
        stash.close()?;
        keys
    };
    assert!(fs.remount_read_only(), "remount read-only");
    // Where writing is impossible, a stash opens for reading without being asked.
    let stash = Stash::open(&path)?;
    assert!(stash.is_read_only());
    for (value, obj) in stash.get_many(&keys)?.iter().zip(&objs) {
        assert_eq!(value.as_deref(), Some(&obj[..]));
    }
    assert_eq!(stash.len()?, 200);
    assert!(stash.verify()?.is_ok());
    let err = stash.save(b"new").unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(matches!(stash.remove(&keys[0]), Err(Error::ReadOnly { .. })));
    stash.close()?;
    // A new stash cannot be made there: a clear error.
    let err = Stash::open(fs.path().join("new.db")).unwrap_err();
    assert!(err.to_string().contains("writable"), "{err}");
    // Everything stored is still there, byte for byte.
    let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let n: i64 = conn.query_row("SELECT count(*) FROM objects", [], |r| r.get(0))?;
    assert_eq!(n, keys.len() as i64);
    Ok(())
}

/// `read_only(true)` opens a stash for reading beside a handle that writes it: it sees
/// what the writer flushed and refuses to write.
#[test]
fn a_read_only_handle_reads_beside_a_writer() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("r.db");
    assert!(matches!(Stash::builder().read_only(true).open(&path), Err(Error::NotFound { .. })));
    let writer = Stash::open(&path)?;
    let key = writer.save(b"written")?;
    writer.flush()?;
    let reader = Stash::builder().read_only(true).open(&path)?;
    assert!(reader.is_read_only());
    assert_eq!(reader.get(&key)?.as_deref(), Some(&b"written"[..]));
    assert!(matches!(reader.save(b"x"), Err(Error::ReadOnly { .. })));
    // Saving an object that is stored already is refused too: a read-only handle never
    // answers a save as if it had stored something.
    assert!(matches!(reader.save(b"written"), Err(Error::ReadOnly { .. })));
    assert!(matches!(reader.save_all(&[b"written"]), Err(Error::ReadOnly { .. })));
    assert!(matches!(reader.save_named(&[("n", b"written")]), Err(Error::ReadOnly { .. })));
    reader.flush()?;
    let later = writer.save(b"later")?;
    writer.flush()?;
    assert_eq!(reader.get(&later)?.as_deref(), Some(&b"later"[..]));
    reader.close()?;
    writer.close()?;
    Ok(())
}

#[test]
#[ignore = "mounts a tmpfs: needs root; .ci/run runs it with --ignored as root"]
fn a_full_disk_stops_the_writer_with_a_clear_error_and_loses_nothing_flushed() -> TestResult {
    let fs = Tmpfs::mount("6m").expect("mounting a tmpfs (needs root: run as root)");
    let path = fs.path().join("full.db");
    let ballast = fs.path().join("ballast");
    fs::write(&ballast, vec![1u8; 1 << 20])?;
    let objs = objects(42, 500);
    let stash = Stash::open(&path)?;
    let keys = stash.save_all(&objs)?;
    stash.flush()?;
    // Incompressible objects until the file system is full.
    let mut failure = None;
    for i in 0..200 {
        let result = stash.save(&noise(i, 64 << 10)).and_then(|_| stash.flush());
        if let Err(e) = result {
            failure = Some(e);
            break;
        }
    }
    let err = failure.expect("6 MiB fills up");
    assert!(matches!(err, Error::WriterStopped { .. }), "{err:?}");
    assert!(err.to_string().contains("disk is full"), "{err}");
    // Later writes fail at once, with the same reason, instead of hanging.
    let again = stash.save(b"after the failure").unwrap_err();
    assert!(again.to_string().contains("disk is full"), "{again}");
    assert!(stash.flush().is_err());
    // Reads still work.
    assert_eq!(stash.get(&keys[0])?.as_deref(), Some(&objs[0][..]));
    assert!(stash.close().is_err(), "close reports the failure");

    fs::remove_file(&ballast)?;
    let stash = Stash::open(&path)?;
    assert_eq!(stash.missing(&keys)?, Vec::new(), "flushed objects survive");
    assert!(stash.verify()?.is_ok());
    Ok(())
}

/// A program that only reads must not create a stash where there is none: a mistyped path
/// is an error, and nothing (not even the directory) appears.
#[test]
fn an_open_that_may_not_create_fails_on_a_missing_stash_and_creates_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("typo").join("stash.db");
    let err = Stash::builder().create(false).open(&path).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("no stash at"), "{err}");
    assert!(entries(dir.path())?.is_empty(), "{:?}", entries(dir.path())?);
    // An empty file is no stash either, and stays as it is.
    let empty = dir.path().join("empty.db");
    fs::write(&empty, b"")?;
    assert!(matches!(Stash::builder().create(false).open(&empty), Err(Error::NotFound { .. })));
    assert_eq!(entries(dir.path())?, ["empty.db"]);
    // An existing stash opens as usual.
    Stash::open(&empty)?.close()?;
    Stash::builder().create(false).open(&empty)?.close()?;
    Ok(())
}

/// The story: `put` of a 1.1 GB object printed its key, then the writer stopped ("string
/// or blob too big"): the handle was dead, every write since the last flush at risk, and
/// the next open reported an unclean shutdown. Now an object over the limit is refused
/// before anything of its call is queued, and costs nothing else.
#[test]
fn an_object_over_the_limit_is_refused_and_costs_nothing_else() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("big.db");
    let stash = Stash::builder().max_object_size(64 << 10).open(&path)?;
    let before = stash.save_all(&objects(40, 100))?;
    let big = noise(40, (64 << 10) + 1);
    let err = stash.save(&big).unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { size, limit } if size == (64 << 10) + 1 && limit == 64 << 10),
        "{err:?}"
    );
    assert!(err.to_string().contains("max_object_size"), "{err}");
    // A batch holding one object over the limit stores none of it.
    let mut batch = objects(41, 50);
    batch.push(big.clone());
    assert!(matches!(stash.save_all(&batch), Err(Error::TooLarge { .. })));
    assert!(stash.missing(&[objstash::Key::of(&batch[0])])?.len() == 1);
    // The handle goes on: saves, flushes and reads work; the limit itself is accepted.
    let at_limit = noise(42, 64 << 10);
    let key = stash.save(&at_limit)?;
    stash.flush()?;
    assert_eq!(stash.len()?, 101);
    assert_eq!(stash.get(&key)?.as_deref(), Some(&at_limit[..]));
    stash.close()?;
    let stash = Stash::open(&path)?;
    assert!(stash.recovery().is_none(), "the close was clean");
    assert!(stash.missing(&before)?.is_empty());
    // A limit that refuses everything is refused when opening; a large one is fine (large
    // objects are stored in chunks).
    let err = Stash::builder().max_object_size(0).open(dir.path().join("x.db"));
    assert!(matches!(err, Err(Error::InvalidConfig { .. })));
    Stash::builder().max_object_size(u64::MAX).open(dir.path().join("y.db"))?.close()?;
    Ok(())
}
