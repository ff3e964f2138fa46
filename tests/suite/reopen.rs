//! Closing and reopening: data, layout and format survive; the recorded layout wins.

use crate::common::{LAYOUTS, TestResult, objects};
use objstash::{Durability, Error, Layout, Stash};

#[test]
fn data_survives_close_and_reopen() -> TestResult {
    for layout in LAYOUTS {
        for mode in crate::common::MODES {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("r.db");
            let objs = objects(11, 1_500);
            let keys = {
                let stash = Stash::builder().layout(layout).durability(mode).open(&path)?;
                let keys = stash.save_all(&objs)?;
                stash.close()?;
                keys
            };
            // Reopen with defaults: the recorded layout and durability are used; the other
            // mode also reads everything once chosen deliberately.
            let other = if mode == Durability::Fast { Durability::Safe } else { Durability::Fast };
            let stash = Stash::builder().durability(other).reconfigure(true).open(&path)?;
            assert_eq!((stash.layout(), stash.durability()), (layout, other));
            assert!(stash.recovery().is_none(), "a clean close needs no recovery");
            assert_eq!(stash.len()?, 1_500);
            for (key, obj) in keys.iter().zip(&objs).step_by(7) {
                assert_eq!(stash.get(key)?.as_deref(), Some(&obj[..]));
            }
            assert!(stash.verify()?.is_ok());
        }
    }
    Ok(())
}

#[test]
fn drop_without_close_also_commits() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("d.db");
    let key = {
        let stash = Stash::open(&path)?;
        stash.save(b"kept by drop")?
    };
    let stash = Stash::open(&path)?;
    assert_eq!(stash.get(&key)?.as_deref(), Some(&b"kept by drop"[..]));
    assert!(stash.recovery().is_none());
    Ok(())
}

#[test]
fn asking_for_another_layout_is_an_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("l.db");
    Stash::builder().layout(Layout::Bucketed).open(&path)?.close()?;
    let err = Stash::builder().layout(Layout::Single).open(&path).unwrap_err();
    match &err {
        Error::LayoutMismatch { stored, requested, .. } => {
            assert_eq!((*stored, *requested), (Layout::Bucketed, Layout::Single));
        }
        other => panic!("expected LayoutMismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("leave the layout unset"), "{err}");
    assert_eq!(Stash::builder().layout(Layout::Bucketed).open(&path)?.layout(), Layout::Bucketed);
    Ok(())
}

/// Two handles in one process share a stash: each sees what the other flushed, the
/// stash is marked closed only when the last one closes, and a repair (which replaces the
/// file) is refused while any is open.
#[test]
fn two_handles_share_a_stash_and_the_last_close_marks_it_clean() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("x.db");
    let first = Stash::open(&path)?;
    let key = first.save(b"held")?;
    first.flush()?;
    let second = Stash::open(&path)?;
    assert_eq!(second.get(&key)?.as_deref(), Some(&b"held"[..]));
    let other = second.save(b"from the second")?;
    second.flush()?;
    assert_eq!(first.get(&other)?.as_deref(), Some(&b"from the second"[..]));
    assert!(matches!(objstash::repair(&path), Err(Error::Locked { .. })));
    first.close()?;
    let state = |p: &std::path::Path| -> rusqlite::Result<String> {
        rusqlite::Connection::open(p)?.query_row(
            "SELECT value FROM objstash_meta WHERE name = 'state'",
            [],
            |r| r.get(0),
        )
    };
    assert_eq!(state(&path)?, "open-fast", "one handle is still open");
    assert_eq!(second.len()?, 2);
    second.close()?;
    assert_eq!(state(&path)?, "clean");
    let third = Stash::open(&path)?;
    assert!(third.recovery().is_none());
    assert_eq!(third.len()?, 2);
    Ok(())
}
