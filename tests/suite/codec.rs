//! The zstd dictionary codec: training from the first objects, mixed rows, retraining,
//! reopening with either codec, a lost dictionary, and repair.

use crate::common::{TestResult, format_1_stash, objects};
use objstash::{Codec, Error, Key, Layout, Stash};
use rusqlite::Connection;

const SAMPLE: usize = 256 << 10;

fn zstd_stash(path: &std::path::Path) -> objstash::Result<Stash> {
    Stash::builder().codec(Codec::ZstdDict).dictionary_sample(SAMPLE).open(path)
}

fn assert_all_read(stash: &Stash, keys: &[Key], objs: &[Vec<u8>]) {
    let got = stash.get_many(keys).expect("get_many");
    for ((key, obj), got) in keys.iter().zip(objs).zip(got) {
        assert_eq!(got.as_ref(), Some(obj), "{key}");
        assert_eq!(stash.get(key).expect("get").as_ref(), Some(obj), "{key}");
    }
}

fn user_version(path: &std::path::Path) -> rusqlite::Result<i64> {
    Connection::open(path)?.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Counts the stored values of each kind by their first bytes.
fn row_kinds(path: &std::path::Path) -> rusqlite::Result<(i64, i64)> {
    Connection::open(path)?.query_row(
        "SELECT sum(substr(data, 1, 2) = x'1f8b'), sum(substr(data, 1, 4) = x'28b52ffd') \
         FROM objects",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

#[test]
fn the_first_objects_train_a_dictionary_that_shrinks_the_rest() -> TestResult {
    let dir = tempfile::tempdir()?;
    let objs = objects(60, 4_000);
    let gzip = Stash::open(dir.path().join("gzip.db"))?;
    gzip.save_all(&objs)?;
    let gzip_stored = gzip.stats()?.stored_bytes;

    let path = dir.path().join("zstd.db");
    let stash = zstd_stash(&path)?;
    // Saved one by one, so the training thread runs while objects keep coming.
    let keys: Vec<Key> = objs.iter().map(|o| stash.save(o)).collect::<Result<_, _>>()?;
    assert_all_read(&stash, &keys, &objs);
    let stats = stash.stats()?;
    assert_eq!((stats.objects, stats.dictionaries), (4_000, 1), "{stats}");
    assert!(
        stats.stored_bytes * 10 < gzip_stored * 8,
        "zstd {} bytes, gzip {gzip_stored}",
        stats.stored_bytes
    );
    assert!(stash.verify()?.is_ok());
    stash.close()?;
    let (gzipped, zstd) = row_kinds(&path)?;
    assert!(gzipped > 0 && zstd > 2_000, "{gzipped} gzip rows, {zstd} zstd rows");
    assert_eq!(gzipped + zstd, 4_000);
    assert_eq!(user_version(&path)?, 8, "a new stash's format holds dictionaries");
    Ok(())
}

#[test]
fn either_codec_reads_both_kinds_of_rows_and_reopening_does_not_retrain() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("mixed.db");
    let objs = objects(61, 3_000);
    let (first, second, third) = (&objs[..1_000], &objs[1_000..2_000], &objs[2_000..]);
    let mut keys = {
        let stash = zstd_stash(&path)?;
        let keys = stash.save_all(first)?;
        stash.flush()?;
        let stats = stash.stats()?;
        assert_eq!(stats.dictionaries, 1, "{stats}");
        stash.close()?;
        keys
    };
    {
        // Switching codecs is a deliberate change of the recorded setting.
        let stash = Stash::builder().codec(Codec::Gzip).reconfigure(true).open(&path)?;
        keys.extend(stash.save_all(second)?);
        assert_all_read(&stash, &keys, &objs[..2_000]);
        stash.close()?;
    }
    let stash = Stash::builder().codec(Codec::ZstdDict).reconfigure(true).open(&path)?;
    keys.extend(stash.save_all(third)?);
    assert_all_read(&stash, &keys, &objs);
    assert_eq!(stash.stats()?.dictionaries, 1, "a later open must reuse the dictionary");
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn retraining_keeps_old_rows_readable() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("retrain.db");
    let objs = objects(62, 3_000);
    let mut keys = Vec::new();
    let mut ids = Vec::new();
    {
        let stash = zstd_stash(&path)?;
        for part in objs.chunks(1_000) {
            keys.extend(stash.save_all(part)?);
            ids.push(stash.train()?);
        }
        assert_eq!(stash.stats()?.dictionaries, ids.len() + 1, "{ids:?}");
        assert_all_read(&stash, &keys, &objs);
        stash.close()?;
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each training gives a new dictionary");
    let stash = Stash::open(&path)?;
    assert_all_read(&stash, &keys, &objs);
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn a_gzip_stash_keeps_the_first_format_and_cannot_train() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gzip.db");
    format_1_stash(&path, Layout::Single)?;
    let stash = Stash::open(&path)?;
    stash.save_all(&objects(63, 20))?;
    assert!(matches!(stash.train(), Err(Error::Training { .. })));
    stash.close()?;
    assert_eq!(user_version(&path)?, 1, "a stash without dictionaries stays readable by v1");
    let stash = Stash::builder().codec(Codec::ZstdDict).reconfigure(true).open(&path)?;
    let err = stash.train().unwrap_err();
    assert!(matches!(err, Error::Training { .. }), "20 objects are too few: {err:?}");
    Ok(())
}

#[test]
fn a_lost_dictionary_makes_its_rows_corrupt_never_wrong() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("lost.db");
    let objs = objects(64, 2_000);
    let keys = {
        let stash = zstd_stash(&path)?;
        let keys = stash.save_all(&objs)?;
        stash.close()?;
        keys
    };
    let (_, zstd) = row_kinds(&path)?;
    assert!(zstd > 0);
    Connection::open(&path)?.execute("DELETE FROM objstash_dicts", [])?;
    let stash = Stash::open(&path)?;
    let mut corrupt = 0;
    for (key, obj) in keys.iter().zip(&objs) {
        match stash.get(key) {
            Ok(Some(bytes)) => assert_eq!(&bytes, obj),
            Err(Error::Corrupt { reason, .. }) => {
                assert!(reason.contains("dictionary"), "{reason}");
                corrupt += 1;
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(corrupt, zstd);
    let report = stash.verify()?;
    assert_eq!(report.corrupt.len() as i64, zstd, "{report}");
    Ok(())
}

#[test]
fn repair_carries_the_dictionaries_over() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("repair.db");
    let objs = objects(65, 2_000);
    let keys = {
        let stash = zstd_stash(&path)?;
        let keys = stash.save_all(&objs)?;
        stash.close()?;
        keys
    };
    let report = objstash::repair(&path)?;
    assert_eq!((report.recovered, report.dropped), (2_000, 0), "{report}");
    let stash = Stash::open(&path)?;
    assert_all_read(&stash, &keys, &objs);
    assert_eq!(stash.stats()?.dictionaries, 1);
    Ok(())
}
