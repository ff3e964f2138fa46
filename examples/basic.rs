//! The smallest tour of objstash: save, read back, batch calls, the size report.
//!
//! `cargo run --example basic`

use anyhow::Result;
use objstash::{Key, Stash};

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("basic.db"))?;

    let wall = br#"{"speckle_type":"Objects.BuiltElements.Wall","height":3000.0,"layer":"A-WALL"}"#;
    let key = stash.save(wall)?;
    println!("saved a wall under {key}");
    assert_eq!(stash.get(&key)?.as_deref(), Some(&wall[..]));

    let model: Vec<Vec<u8>> = speckle_gen::objects(42, 0, 10_000);
    let keys = stash.save_all(&model)?;
    println!("saved {} generated objects in parallel", keys.len());

    let wanted = [keys[0], keys[9_999], Key::of(b"not in the cache")];
    println!("still to fetch: {:?}", stash.missing(&wanted)?);
    let got = stash.get_many(&wanted)?;
    println!("get_many found {} of {}", got.iter().flatten().count(), got.len());

    stash.flush()?;
    println!("\n{}", stash.stats()?);
    let report = stash.verify()?;
    println!("verify: {report}");
    stash.close()?;
    Ok(())
}
