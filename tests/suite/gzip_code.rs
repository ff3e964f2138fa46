//! The stash's trained gzip code: trained once on the first objects, stored, used by every
//! handle that saves later; its rows are standard gzip members that read back anywhere.

use std::collections::HashMap;
use std::io::Read;

use crate::common::{TestResult, objects};
use objstash::Stash;
use rusqlite::{Connection, OptionalExtension};

/// How many rows share each first block header (the 40 bytes after the gzip header).
fn headers(path: &std::path::Path) -> rusqlite::Result<HashMap<Vec<u8>, usize>> {
    let conn = Connection::open(path)?;
    let mut stmt = conn.prepare("SELECT substr(data, 11, 40) FROM objects")?;
    let mut counts = HashMap::new();
    for header in stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))? {
        *counts.entry(header?).or_insert(0) += 1;
    }
    Ok(counts)
}

/// How many rows have the header most rows share.
fn most_shared(path: &std::path::Path) -> rusqlite::Result<usize> {
    Ok(headers(path)?.values().max().copied().unwrap_or(0))
}

fn stored_code(path: &std::path::Path) -> rusqlite::Result<Option<String>> {
    Connection::open(path)?
        .query_row("SELECT value FROM objstash_meta WHERE name = 'gzip_code'", [], |r| r.get(0))
        .optional()
}

fn stored_code_after_flush(
    stash: &Stash,
    path: &std::path::Path,
) -> anyhow::Result<Option<String>> {
    stash.flush()?;
    Ok(stored_code(path)?)
}

#[test]
fn one_code_is_trained_stored_and_shared_by_later_handles() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("code.db");
    let objs = objects(71, 5_000);
    let stash = Stash::open(&path)?;
    // The first 2,000 objects are the sample; a call that brings them all trains the code
    // before compressing any, so every row of it has the code.
    let mut keys = stash.save_all(&objs[..3_000])?;
    let code = stored_code_after_flush(&stash, &path)?.expect("a code trained on the sample");
    let before = most_shared(&path)?;
    assert_eq!(before, 3_000, "every row of the call that filled the sample has the code");
    keys.extend(stash.save_all(&objs[3_000..4_000])?);
    stash.close()?;
    let shared = most_shared(&path)?;
    assert_eq!(shared, before + 1_000, "every row saved after training has its header");

    // A later handle uses the stored code: its rows have the same header, and the code
    // stays the first one stored.
    let stash = Stash::open(&path)?;
    keys.extend(stash.save_all(&objs[4_000..])?);
    for (key, obj) in keys.iter().zip(&objs) {
        assert_eq!(stash.get(key)?.as_ref(), Some(obj));
    }
    stash.close()?;
    assert_eq!(stored_code(&path)?, Some(code));
    assert_eq!(most_shared(&path)?, shared + 1_000, "one header");

    // Every row is a standard gzip member: another decoder (CRC checked) reads it.
    let conn = Connection::open(&path)?;
    let mut stmt = conn.prepare("SELECT data FROM objects")?;
    let mut read = 0;
    for data in stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))? {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&data?[..]).read_to_end(&mut raw)?;
        read += 1;
    }
    assert_eq!(read, 5_000);
    Ok(())
}

#[test]
fn another_level_keeps_each_objects_own_codes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("level.db");
    let objs = objects(72, 2_500);
    let stash = Stash::builder().compression_level(6).open(&path)?;
    let keys = stash.save_all(&objs)?;
    assert_eq!(stash.get_many(&keys)?, objs.into_iter().map(Some).collect::<Vec<_>>());
    stash.close()?;
    assert_eq!(stored_code(&path)?, None);
    assert!(headers(&path)?.values().all(|&n| n < 10), "no shared header");
    Ok(())
}

#[test]
fn calls_too_small_to_fill_the_sample_train_the_code_as_they_save() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("small_calls.db");
    let objs = objects(73, 3_000);
    let stash = Stash::open(&path)?;
    let mut keys = Vec::new();
    for call in objs.chunks(100) {
        keys.extend(stash.save_all(call)?);
    }
    let code = stored_code_after_flush(&stash, &path)?;
    assert!(code.is_some(), "a code trained on the first 2,000 objects");
    let shared = most_shared(&path)?;
    // The calls before the one that filled the sample were compressed before the code
    // existed; that call and the ones after it have the code, every row of them.
    assert!((1_000..3_000).contains(&shared), "{shared} rows with the code");
    assert_eq!(shared % 100, 0, "whole calls have the code: {shared} rows");
    assert_eq!(stash.get_many(&keys)?, objs.into_iter().map(Some).collect::<Vec<_>>());
    Ok(stash.close()?)
}
