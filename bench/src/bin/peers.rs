//! The Rust half of the peers benchmark (`bench/peers/run.sh`): times one system on the
//! objects of a file the Python half wrote, and prints its figures as one JSON line.
//!
//! `peers SYSTEM OBJECTS_FILE DIR` where SYSTEM is `objstash:LAYOUT:DURABILITY:CODEC`
//! (with `:MAP_BYTES` for a read map other than the default) or `cacache`. The file holds
//! each object as a 4-byte little-endian length and its bytes.
//! Timed: saving every object (objstash: `save_all` in calls of 10,000 objects, then a
//! flush; cacache: `write_sync` of each under its index, then its content is on disk),
//! `get` of every object by its key on one thread in a shuffled order after one warm-up
//! pass, and (objstash) `get_many` in calls of 1,000 keys. Bytes on disk: every file the
//! system left in DIR, after it closed.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use objstash::{Codec, Durability, Key, Layout, Stash};
use objstash_bench::shuffled;

fn read_objects(path: &Path) -> Result<Vec<Vec<u8>>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut objects = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into()?) as usize;
        objects.push(bytes[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    Ok(objects)
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn rate(n: usize, start: Instant) -> f64 {
    n as f64 / start.elapsed().as_secs_f64()
}

fn objstash(spec: &str, objects: &[Vec<u8>], dir: &Path) -> Result<serde_json::Value> {
    let fields = spec.split(':').collect::<Vec<_>>();
    let (&[layout, durability, codec], map) = fields.split_at(3.min(fields.len())) else {
        bail!("objstash:LAYOUT:DURABILITY:CODEC[:MAP_BYTES], not objstash:{spec}")
    };
    let path = dir.join("objstash.db");
    let mut builder = Stash::builder()
        .layout(layout.parse::<Layout>()?)
        .durability(durability.parse::<Durability>()?)
        .codec(codec.parse::<Codec>()?);
    match map {
        [] => {}
        [bytes] => builder = builder.read_mmap_size(bytes.parse()?),
        _ => bail!("objstash:LAYOUT:DURABILITY:CODEC[:MAP_BYTES], not objstash:{spec}"),
    }
    let stash = builder.open(&path)?;
    let start = Instant::now();
    let mut keys: Vec<Key> = Vec::with_capacity(objects.len());
    for chunk in objects.chunks(10_000) {
        keys.extend(stash.save_all(chunk)?);
    }
    stash.flush()?;
    let save = rate(objects.len(), start);
    let order = shuffled(keys.len());
    let mut get = 0.0;
    for pass in 0..2 {
        let start = Instant::now();
        for &i in &order {
            anyhow::ensure!(stash.get(&keys[i])?.is_some(), "{} missing", keys[i]);
        }
        if pass == 1 {
            get = rate(order.len(), start);
        }
    }
    let shuffled_keys: Vec<Key> = order.iter().map(|&i| keys[i]).collect();
    let start = Instant::now();
    for chunk in shuffled_keys.chunks(1_000) {
        anyhow::ensure!(stash.get_many(chunk)?.iter().all(Option::is_some));
    }
    let get_many = rate(shuffled_keys.len(), start);
    stash.close()?;
    Ok(
        serde_json::json!({ "save": save, "get": get, "get_many": get_many, "bytes": dir_bytes(dir) }),
    )
}

fn cacache(objects: &[Vec<u8>], dir: &Path) -> Result<serde_json::Value> {
    let cache = dir.join("cacache");
    let names: Vec<String> = (0..objects.len()).map(|i| format!("object-{i}")).collect();
    let start = Instant::now();
    for (name, object) in names.iter().zip(objects) {
        cacache::write_sync(&cache, name, object)?;
    }
    let save = rate(objects.len(), start);
    let order = shuffled(objects.len());
    let mut get = 0.0;
    for pass in 0..2 {
        let start = Instant::now();
        for &i in &order {
            let data = cacache::read_sync(&cache, &names[i])?;
            anyhow::ensure!(data.len() == objects[i].len());
        }
        if pass == 1 {
            get = rate(order.len(), start);
        }
    }
    Ok(serde_json::json!({ "save": save, "get": get, "bytes": dir_bytes(dir) }))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, system, file, dir] = &args[..] else { bail!("usage: peers SYSTEM OBJECTS_FILE DIR") };
    let objects = read_objects(Path::new(file))?;
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir)?;
    let figures = match system.split_once(':') {
        Some(("objstash", spec)) => objstash(spec, &objects, dir)?,
        None if system == "cacache" => cacache(&objects, dir)?,
        _ => bail!("unknown system {system}: objstash:LAYOUT:DURABILITY:CODEC or cacache"),
    };
    println!("{figures}");
    Ok(())
}
