//! A model's root withheld by one handle (a member removed, evicted or damaged) and saved
//! again by another handle or process: the save waits for its writer like any other, and
//! until then no read of that handle serves the root, whose model still misses a member.

use crate::common::{TestResult, objects};
use objstash::{Key, Stash};

/// A raw connection holding the stash's write lock, so that no writer commits meanwhile.
fn hold_write_lock(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.execute_batch(
        "BEGIN IMMEDIATE; UPDATE objstash_meta SET value = value WHERE name = 'codec';",
    )?;
    Ok(conn)
}

/// What each read of `handle` says of `root`: get, contains, missing, get_many.
fn reads(handle: &Stash, root: &Key) -> objstash::Result<[bool; 4]> {
    Ok([
        handle.get(root)?.is_some(),
        handle.contains(root)?,
        handle.missing(&[*root])?.is_empty(),
        handle.get_many(&[*root])?[0].is_some(),
    ])
}

#[test]
fn a_root_another_handle_withheld_is_not_read_from_a_pending_save() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("handles.db");
    let h1 = Stash::open(&path)?;
    let members = objects(81, 20);
    let root = b"{\"root\":\"withheld by another handle\"}".to_vec();
    assert!(h1.save_model(&root, &members)?.complete());
    let root_key = Key::of(&root);
    // Opened before the member goes, and after.
    let h2 = Stash::open(&path)?;
    assert!(h1.remove(&Key::of(&members[3]))?);
    h1.flush()?;
    let h3 = Stash::open(&path)?;
    for (name, handle) in [("opened before", &h2), ("opened after", &h3)] {
        assert_eq!(reads(handle, &root_key)?, [false; 4], "{name}");
        let lock = hold_write_lock(&path)?;
        handle.save(&root)?;
        assert_eq!(reads(handle, &root_key)?, [false; 4], "{name}: a pending save of the root");
        lock.execute_batch("COMMIT")?;
        drop(lock);
        handle.flush()?;
        assert_eq!(reads(handle, &root_key)?, [false; 4], "{name}: committed");
    }
    h2.save(&members[3])?;
    h2.flush()?;
    for handle in [&h1, &h2, &h3] {
        assert_eq!(reads(handle, &root_key)?, [true; 4]);
    }
    for handle in [h1, h2, h3] {
        handle.close()?;
    }
    Ok(())
}

#[test]
fn an_assembly_finished_and_read_hands_over_its_whole_model_read_as_declared() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("read.db");
    let h1 = Stash::open(&path)?;
    let h2 = Stash::open(&path)?;
    let members = objects(82, 40);
    let root = b"{\"root\":\"finished and read\"}".to_vec();
    let assembly = h1.assemble()?;
    let keys = assembly.save_all(&members)?;
    let root_key = assembly.save(&root)?;
    let (model, objects) = assembly.finish_and_read(Some(b"the copy"), &root_key, &keys)?;
    assert!(model.complete(), "{model}");
    assert_eq!(model.name.as_deref(), Some(&b"the copy"[..]));
    // Another handle removes the model at once: what was read stays the caller's.
    assert!(h2.remove_model(&root_key)?);
    let objects = objects.expect("a complete model is read");
    assert_eq!(objects.len(), 41);
    for (key, bytes) in &objects {
        assert_eq!(*key, Key::of(bytes));
    }
    assert_eq!(h1.get(&root_key)?, None);
    // An incomplete model reads nothing.
    let assembly = h1.assemble()?;
    let lacking = Key::of(b"never saved");
    let (model, objects) = assembly.finish_and_read(None, &root_key, &[lacking])?;
    assert!(!model.complete() && objects.is_none());
    h1.close()?;
    h2.close()?;
    Ok(())
}
