//! Format 5 (object tables that index the keys' first 8 bytes) beside the formats before
//! it: a new stash is made in it; a stash of an older format is read and written as it is.

use std::collections::HashSet;

use objstash::{Key, Stash};

use crate::common::{LAYOUTS, TestResult, format_1_stash, index_names, objects, user_version};

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
        assert_eq!(user_version(&path)?, 5, "{layout}");
        let indexes = index_names(&path)?;
        assert!(indexes.iter().any(|i| i.ends_with("_prefix")), "{layout}: {indexes:?}");
        assert!(!indexes.iter().any(|i| i.ends_with("_key")), "{layout}: {indexes:?}");
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
        let indexes = index_names(&path)?;
        assert!(!indexes.iter().any(|i| i.ends_with("_prefix")), "{layout}: {indexes:?}");
        // Reopened read-only too.
        let stash = Stash::builder().read_only(true).open(&path)?;
        assert_eq!(stash.get(&keys[1])?.as_deref(), Some(&objs[1][..]));
    }
    Ok(())
}
