//! Objects under your own ids: an application that knows objects by its ids (Speckle ids,
//! paths, URLs) saves them under those names, asks which ids it still lacks and reads by
//! id. Every read by name is still checked against the object's hash.
//!
//! `cargo run --example your_ids`

use anyhow::Result;
use objstash::Stash;

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("cache.db"))?;
    let walls: Vec<(String, Vec<u8>)> = (0..100)
        .map(|i| {
            (
                format!("wall-{i}"),
                format!(r#"{{"type":"Wall","height":{}}}"#, 3000 + i).into_bytes(),
            )
        })
        .collect();
    stash.save_named(&walls)?;

    let wanted = ["wall-7", "wall-42", "beam-3"];
    println!("still to fetch: {:?}", stash.missing_named(&wanted)?);
    let found = stash.get_named(&wanted)?;
    println!("wall-42 is {}", String::from_utf8_lossy(found[1].as_deref().unwrap_or_default()));
    println!("wall-7 is stored under {:?}", stash.resolve(&["wall-7"])?[0]);

    // A name saved again points to its new object; removing a name keeps the object.
    stash.save_named(&[("wall-7", br#"{"type":"Wall","height":2800}"#)])?;
    assert_eq!(stash.remove_named(&["wall-42"])?, [true]);
    println!("{} names", stash.stats()?.names);
    stash.close()?;
    Ok(())
}
