//! An owned stash (`Durability::Owned`): one handle has it, no other opens it meanwhile,
//! and it goes back to shared use when reconfigured. Kills: `tests/suite/crash.rs`.

use crate::common::{TestResult, objects};
use objstash::{Durability, Error, Stash};

#[test]
fn an_owned_stash_is_one_handles_until_it_closes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("owned.db");
    let stash = Stash::builder().durability(Durability::Owned).open(&path)?;
    let keys = stash.save_all(&objects(1, 2_000))?;
    assert!(stash.get_many(&keys)?.iter().all(Option::is_some), "reads its own writes");
    stash.flush()?;
    // Nobody else opens it: another writer, a reader, a repair.
    assert!(matches!(Stash::open(&path), Err(Error::Owned { .. })));
    assert!(matches!(Stash::builder().read_only(true).open(&path), Err(Error::Owned { .. })));
    assert!(matches!(objstash::repair(&path), Err(Error::Owned { .. } | Error::Locked { .. })));
    assert!(!crate::common::sibling(&path, "-wal").exists(), "no write-ahead log");
    stash.close()?;

    // Reopened without settings, it is owned again, and everything is there.
    let stash = Stash::open(&path)?;
    assert_eq!(stash.durability(), Durability::Owned);
    assert!(stash.recovery().is_none(), "closed cleanly");
    assert!(stash.missing(&keys)?.is_empty());
    assert!(stash.verify()?.is_ok());
    stash.close()?;

    // Back to shared use: two handles at once.
    let shared = Stash::builder().durability(Durability::Fast).reconfigure(true).open(&path)?;
    let other = Stash::open(&path)?;
    assert!(other.missing(&keys)?.is_empty());
    drop(other);
    drop(shared);
    Ok(())
}

#[test]
fn a_stash_another_handle_has_open_cannot_be_owned() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shared.db");
    let shared = Stash::open(&path)?;
    let owned = Stash::builder().durability(Durability::Owned).reconfigure(true).open(&path);
    assert!(matches!(owned, Err(Error::Owned { .. })), "{owned:?}");
    assert_eq!(Stash::open(&path)?.durability(), Durability::Fast, "nothing was changed");
    drop(shared);
    Ok(())
}
