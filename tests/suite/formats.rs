//! Generations of key-prefix indexes (format 5, with moves counted since format 7) beside
//! the formats before them: a new stash is made in format 8 (with uses apart, `uses_apart.rs`), its young indexes move into
//! the old ones, writers sharing it keep each key once; a stash of an older format is read
//! and written as it is.

use std::collections::HashSet;

use objstash::{Key, Stash};

use crate::common::{LAYOUTS, TestResult, format_1_stash, object_schema, objects, user_version};

/// Saves `objs` twice (the second time with a copy of every other object in between),
/// reads them back, checks the counts and `verify`; the keys.
fn save_twice_and_read(stash: &Stash, objs: &[Vec<u8>]) -> anyhow::Result<Vec<Key>> {
    let keys = stash.save_all(objs)?;
    let again: Vec<Vec<u8>> = objs.iter().step_by(2).cloned().collect();
    stash.save_all(&again)?;
    stash.flush()?;
    let unique: HashSet<Key> = keys.iter().copied().collect();
    assert_eq!(stash.stats()?.objects, unique.len() as u64, "each object is stored once");
    let got = stash.get_many(&keys)?;
    for ((key, obj), got) in keys.iter().zip(objs).zip(got) {
        assert_eq!(got.as_deref(), Some(&obj[..]), "{key}");
    }
    let report = stash.verify()?;
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.checked, unique.len() as u64);
    Ok(keys)
}

#[test]
fn a_new_stash_indexes_key_prefixes_and_stores_each_object_once() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("new.db");
        let objs = objects(71, 3_000);
        let stash = Stash::builder().layout(layout).open(&path)?;
        let keys = save_twice_and_read(&stash, &objs)?;
        // Removing and saving again goes through the prefix index too.
        assert!(stash.remove(&keys[0])?);
        assert_eq!(stash.get(&keys[0])?, None);
        stash.save(&objs[0])?;
        stash.close()?;
        assert_eq!(user_version(&path)?, 8, "{layout}");
        let names = object_schema(&path)?;
        assert!(!names.iter().any(|i| i.ends_with("_key")), "{layout}: {names:?}");
        let (young, old) = generations(&path)?;
        assert_eq!(young + old, 3_000, "{layout}: every row in the key index once");
        let stash = Stash::open(&path)?;
        assert_eq!(stash.get(&keys[0])?.as_deref(), Some(&objs[0][..]));
    }
    Ok(())
}

#[test]
fn a_stash_of_an_older_format_is_read_and_written_as_it_is() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("old.db");
        format_1_stash(&path, layout)?;
        let objs = objects(72, 3_000);
        let stash = Stash::builder().layout(layout).open(&path)?;
        let keys = save_twice_and_read(&stash, &objs)?;
        stash.close()?;
        assert_eq!(user_version(&path)?, 1, "{layout}: still readable by the first version");
        let names = object_schema(&path)?;
        assert!(names.iter().any(|i| i.ends_with("_key")), "{layout}: {names:?}");
        assert!(generations(&path).is_err(), "{layout}: no young index");
        // Reopened read-only too.
        let stash = Stash::builder().read_only(true).open(&path)?;
        assert_eq!(stash.get(&keys[1])?.as_deref(), Some(&objs[1][..]));
    }
    Ok(())
}

/// Entries in the young and the old key indexes of the stash at `path`.
fn generations(path: &std::path::Path) -> anyhow::Result<(u64, u64)> {
    let conn = rusqlite::Connection::open(path)?;
    let count = |table: &str| -> rusqlite::Result<u64> {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
    };
    Ok((count("objstash_young")?, count("objstash_old")?))
}

#[test]
fn young_keys_move_into_the_old_index_and_every_key_is_found_throughout() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("moves.db");
        let objs = objects(73, 6_000);
        let stash = Stash::builder().layout(layout).young_keys(1_000).open(&path)?;
        let mut keys = Vec::new();
        for (round, part) in objs.chunks(500).enumerate() {
            keys.extend(stash.save_all(part)?);
            stash.flush()?;
            // Whatever moves are under way, every key saved so far is found, once.
            let got = stash.get_many(&keys)?;
            assert!(got.iter().all(Option::is_some), "{layout}, round {round}");
            assert_eq!(stash.save_all(&objs[..500])?.len(), 500);
        }
        stash.flush()?;
        assert_eq!(stash.stats()?.objects, 6_000, "{layout}: each object stored once");
        let gone: Vec<Key> = keys.iter().step_by(7).copied().collect();
        assert!(stash.remove_all(&gone)?.iter().all(|&removed| removed));
        stash.close()?;
        // The writer moves what it owes before it closes.
        let (young, old) = generations(&path)?;
        let left = 6_000 - gone.len() as u64;
        assert_eq!(young + old, left, "{layout}: one entry per row, removed rows' gone");
        assert!(old >= 4_000 && young < 1_250, "{layout}: {young} young, {old} old");
        let stash = Stash::open(&path)?;
        // The oldest and the newest keys in turn: a read asks first the generation where
        // the read before found its key (first_generation.rs), and the guess turns often.
        let turns =
            (0..keys.len()).map(|i| if i % 2 == 0 { i / 2 } else { keys.len() - 1 - i / 2 });
        let expected = |i: usize| (!i.is_multiple_of(7)).then_some(&objs[i][..]);
        for i in turns.clone() {
            assert_eq!(stash.get(&keys[i])?.as_deref(), expected(i), "{layout}: {}", keys[i]);
        }
        let order: Vec<usize> = turns.collect();
        let wanted: Vec<Key> = order.iter().map(|&i| keys[i]).collect();
        for (&i, got) in order.iter().zip(stash.get_many(&wanted)?) {
            assert_eq!(got.as_deref(), expected(i), "{layout}: get_many, {}", keys[i]);
        }
        let report = stash.verify()?;
        assert!(report.is_ok() && report.checked == left, "{layout}: {report}");
    }
    Ok(())
}

/// Two writers on one stash, each keeping a filter of stored prefixes (`key_filter.rs`,
/// from format 7). They take turns; a turn first saves again the objects the other saved in
/// its last turn, then enough new ones, in several transactions, for the filter to be
/// built. With young indexes of 2,000 keys the other has moved most of them into the old
/// index since (a move the filter did not see); then, reopened with young indexes too large
/// to move, the other has left them in the young index after this writer's filter was
/// built (inserts the filter did not see). The saves again are cut so that the writer, not
/// a lookup before it, finds them stored: each group of a save's chunk (`SAVE_CHUNK`, 256)
/// begins with new objects, and a chunk that begins with new ones is not looked up. No key
/// is stored twice, in the counts or in the tables.
#[test]
fn writers_sharing_a_stash_store_each_key_once_whatever_the_other_moved_or_added() -> TestResult {
    const OBJECTS: usize = 120_000;
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("two.db");
        let objs = objects(74, OBJECTS);
        let mut fresh = objs.iter();
        let mut last_turn: [Vec<&Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        for young_keys in [2_000, 1_000_000] {
            let open = || Stash::builder().layout(layout).young_keys(young_keys).open(&path);
            let handles = [open()?, open()?];
            for round in 0..2 {
                for (i, stash) in handles.iter().enumerate() {
                    let mut again: Vec<&Vec<u8>> = Vec::new();
                    let mut mine: Vec<&Vec<u8>> = Vec::new();
                    for group in last_turn[1 - i].chunks(240) {
                        let new: Vec<&Vec<u8>> = fresh.by_ref().take(16).collect();
                        again.extend_from_slice(&new);
                        again.extend_from_slice(group);
                        mine.extend(new);
                    }
                    // Long enough that the save is cut in chunks of 256.
                    let new: Vec<&Vec<u8>> = fresh.by_ref().take(2_048).collect();
                    again.extend_from_slice(&new);
                    mine.extend(new);
                    stash.save_all(&again)?;
                    stash.flush()?;
                    // Then, with no other writer committing, enough new rows for a filter.
                    for size in [5_000, 5_000, 1_000] {
                        let new: Vec<&Vec<u8>> = fresh.by_ref().take(size).collect();
                        stash.save_all(&new)?;
                        stash.flush()?;
                        mine.extend(new);
                    }
                    last_turn[i] = mine;
                    assert!(fresh.len() > 0, "{young_keys}, round {round}: more objects needed");
                }
            }
            for stash in handles {
                stash.close()?;
            }
        }
        let stored = (OBJECTS - fresh.len()) as u64;
        assert_eq!(user_version(&path)?, 8, "{layout}: moves are counted");
        let (young, old) = generations(&path)?;
        assert_eq!(young + old, stored, "{layout}: each key indexed once");
        let stash = Stash::open(&path)?;
        assert_eq!(stash.stats()?.objects, stored, "{layout}: each object counted once");
        let report = stash.verify()?;
        assert!(report.is_ok() && report.checked == stored, "{layout}: {report}");
    }
    Ok(())
}
