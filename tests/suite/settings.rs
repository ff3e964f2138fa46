//! A stash remembers its durability and codec as it remembers its layout.
//!
//! The bug this guards against: a stash created with `Durability::Safe` and reopened
//! without the setting (`Stash::open`, the command line's `stats`) ran in Fast mode and
//! switched the journal, so a user who chose Safe once lost it silently. Now an open
//! without a setting uses the recorded one, a different one is refused, and only
//! `reconfigure` changes what is recorded.

use crate::common::{LAYOUTS, TestResult};
use objstash::{Codec, Durability, Error, Stash};
use rusqlite::Connection;

/// The durability the file records, read without objstash.
fn recorded_durability(path: &std::path::Path) -> rusqlite::Result<String> {
    Connection::open(path)?.query_row(
        "SELECT value FROM objstash_meta WHERE name = 'durability'",
        [],
        |r| r.get(0),
    )
}

#[test]
fn an_open_without_settings_uses_the_recorded_ones() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.db");
        let stash = Stash::builder()
            .layout(layout)
            .durability(Durability::Safe)
            .codec(Codec::ZstdDict)
            .open(&path)?;
        stash.save(b"one")?;
        stash.close()?;

        let stash = Stash::open(&path)?;
        assert_eq!((stash.durability(), stash.codec()), (Durability::Safe, Codec::ZstdDict));
        let stats = stash.stats()?;
        assert_eq!((stats.durability, stats.codec), (Durability::Safe, Codec::ZstdDict));
        assert!(stats.to_string().contains("durability safe, codec zstd-dict"), "{stats}");
        stash.close()?;
        assert_eq!(recorded_durability(&path)?, "safe", "an open without settings keeps Safe");
    }
    Ok(())
}

#[test]
fn a_different_setting_is_refused_and_changes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let stash = Stash::builder().durability(Durability::Safe).open(&path)?;
    let key = stash.save(b"kept")?;
    stash.close()?;

    let err = Stash::builder().durability(Durability::Fast).open(&path).unwrap_err();
    assert!(
        matches!(&err, Error::SettingMismatch { setting: "durability", stored, requested, .. }
            if stored == "safe" && requested == "fast"),
        "{err:?}"
    );
    assert!(err.to_string().contains("StashBuilder::reconfigure"), "{err}");
    let err = Stash::builder().codec(Codec::ZstdDict).open(&path).unwrap_err();
    assert!(matches!(err, Error::SettingMismatch { setting: "codec", .. }), "{err:?}");
    // The same value as recorded is no change.
    let stash = Stash::builder().durability(Durability::Safe).codec(Codec::Gzip).open(&path)?;
    assert_eq!(stash.get(&key)?.as_deref(), Some(&b"kept"[..]));
    stash.close()?;
    assert_eq!(Stash::open(&path)?.durability(), Durability::Safe);
    Ok(())
}

#[test]
fn reconfigure_changes_the_recorded_settings() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    let stash = Stash::builder().durability(Durability::Safe).open(&path)?;
    let key = stash.save(b"kept")?;
    stash.close()?;

    let stash = Stash::builder()
        .durability(Durability::Fast)
        .codec(Codec::ZstdDict)
        .reconfigure(true)
        .open(&path)?;
    assert_eq!(stash.get(&key)?.as_deref(), Some(&b"kept"[..]));
    stash.close()?;
    assert_eq!(recorded_durability(&path)?, "fast");
    let stash = Stash::open(&path)?;
    assert_eq!((stash.durability(), stash.codec()), (Durability::Fast, Codec::ZstdDict));
    assert_eq!(stash.get(&key)?.as_deref(), Some(&b"kept"[..]));
    Ok(())
}

/// A stash made before durability and codec were recorded opens with the defaults, or
/// what the builder asks for, and records them from then on.
#[test]
fn a_stash_without_recorded_settings_takes_the_requested_ones() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("s.db");
    Stash::builder().durability(Durability::Safe).open(&path)?.close()?;
    Connection::open(&path)?
        .execute("DELETE FROM objstash_meta WHERE name IN ('durability', 'codec')", [])?;
    let stash = Stash::open(&path)?;
    assert_eq!((stash.durability(), stash.codec()), (Durability::Fast, Codec::Gzip));
    stash.close()?;
    Connection::open(&path)?
        .execute("DELETE FROM objstash_meta WHERE name IN ('durability', 'codec')", [])?;
    Stash::builder().durability(Durability::Safe).open(&path)?.close()?;
    assert_eq!(Stash::open(&path)?.durability(), Durability::Safe);
    Ok(())
}
