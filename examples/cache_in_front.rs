//! A cache in front of a slow source: ask the stash which objects it lacks, fetch only
//! those, save them, and read everything from the stash. The second run fetches nothing.
//!
//! `cargo run --example cache_in_front`

use std::cell::Cell;

use anyhow::Result;
use objstash::{Key, Stash};

/// A slow source (a server, a build step): here it makes objects and counts its calls.
struct Source {
    fetched: Cell<usize>,
}

impl Source {
    fn fetch(&self, ids: &[u64]) -> Vec<Vec<u8>> {
        self.fetched.set(self.fetched.get() + ids.len());
        ids.iter()
            .map(|id| format!(r#"{{"id":{id},"payload":"{}"}}"#, "x".repeat(200)).into_bytes())
            .collect()
    }
}

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let source = Source { fetched: Cell::new(0) };
    // The application knows the keys it wants (content keys it was given, or computed).
    let ids: Vec<u64> = (0..1_000).collect();
    let keys: Vec<Key> = source.fetch(&ids).iter().map(|o| Key::of(o)).collect();
    source.fetched.set(0);

    for run in 1..=2 {
        let stash = Stash::open(dir.path().join("cache.db"))?;
        let missing = stash.missing(&keys)?;
        let wanted: Vec<u64> =
            ids.iter().zip(&keys).filter(|(_, k)| missing.contains(k)).map(|(id, _)| *id).collect();
        stash.save_all(&source.fetch(&wanted))?;
        let objects = stash.get_many(&keys)?;
        assert!(objects.iter().all(Option::is_some));
        println!("run {run}: {} objects, {} fetched from the source", objects.len(), wanted.len());
        stash.close()?;
    }
    assert_eq!(source.fetched.get(), 1_000, "the second run fetched nothing");
    Ok(())
}
