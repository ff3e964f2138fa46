//! A damaged member (its bytes overwritten on disk) found by a read or by verify: the
//! object can no longer be served, so its models are incomplete from then on, in every
//! handle and process, and their roots read as absent until it is saved again.

use crate::common::{TestResult, objects};
use objstash::{Error, Key, Stash};

/// Overwrites the stored bytes of `key` in the single layout's table, keeping their length
/// (as damage on disk does).
fn damage(path: &std::path::Path, key: &Key) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    let sql = "UPDATE objects SET data = randomblob(length(data)) WHERE key = ?1";
    assert_eq!(conn.execute(sql, [&key.as_bytes()[..]])?, 1);
    Ok(())
}

#[test]
fn a_damaged_member_found_by_a_read_or_by_verify_makes_its_models_incomplete() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("damage.db");
    let members = objects(91, 30);
    let read_root = b"{\"root\":\"damage found by a read\"}".to_vec();
    let verify_root = b"{\"root\":\"damage found by verify\"}".to_vec();
    let (read_key, verify_key) = (Key::of(&read_root), Key::of(&verify_root));
    let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
    {
        let stash = Stash::open(&path)?;
        assert!(stash.save_model(&read_root, &members[..15])?.complete());
        assert!(stash.save_model(&verify_root, &members[15..])?.complete());
        stash.close()?;
    }
    damage(&path, &keys[3])?;
    damage(&path, &keys[20])?;
    let stash = Stash::open(&path)?;
    let other = Stash::open(&path)?;
    assert!(stash.get(&read_key)?.is_some(), "no read found the damage yet");
    assert!(matches!(stash.get(&keys[3]), Err(Error::Corrupt { .. })));
    stash.flush()?;
    for handle in [&stash, &other] {
        assert_eq!(handle.get(&read_key)?, None, "its model lost a member to damage");
        let model = handle.model(&read_key)?.expect("still declared");
        assert_eq!((model.complete(), model.missing), (false, 1), "{model}");
        assert!(handle.read_model(&read_key)?.is_none());
    }
    let report = stash.verify()?;
    assert!(!report.is_ok(), "{report}");
    assert_eq!(report.corrupt, vec![keys[20]], "{report}");
    let said = report.problems.iter().find(|p| p.contains(&verify_key.to_string()));
    assert!(said.is_some_and(|p| p.contains(&keys[20].to_string())), "names the model: {report}");
    for handle in [&stash, &other] {
        assert_eq!(handle.get(&verify_key)?, None);
        assert!(!handle.model(&verify_key)?.expect("declared").complete());
    }
    // Saved again, the objects bring their models back.
    other.save_all(&[&members[3], &members[20]])?;
    other.flush()?;
    for handle in [&stash, &other] {
        assert_eq!(handle.get(&read_key)?.as_deref(), Some(&read_root[..]));
        assert_eq!(handle.read_model(&verify_key)?.map(|m| m.len()), Some(16));
    }
    let report = stash.verify()?;
    assert!(report.is_ok(), "{report}");
    stash.close()?;
    other.close()?;
    Ok(())
}
