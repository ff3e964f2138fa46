//! The Rust half of the peers benchmark (`bench/peers/run.sh`): times one system on the
//! objects of a file the Python half wrote, and prints its figures as one JSON line.
//!
//! `peers SYSTEM OBJECTS_FILE DIR [READS] [--reads-only]` where SYSTEM is
//! `objstash:LAYOUT:DURABILITY:CODEC` (with `:file` for values in a file of their own, and
//! `:MAP_BYTES` for a read map other than the default) or `cacache`. The file holds each object as a 4-byte little-endian length and
//! its bytes; it is read as the objects are saved, 10,000 at a time, so that ten million
//! objects need not fit in memory beside the stash's pages.
//! Timed: saving every object, reading the file included (objstash: `save_all` in calls of
//! 10,000 objects, then a flush; cacache: `write_sync` of each under its index, then its
//! content is on disk), `get` by key on one thread in a shuffled order after one warm-up
//! pass, and (objstash) `get_many` in calls of 1,000 keys, of every object or of READS
//! objects drawn at random. Bytes on disk: every file the system left in DIR, after it
//! closed. With `--reads-only`, DIR holds what an earlier run of the same system saved
//! there, and only the reads are timed (the keys are found again by hashing the file's
//! objects, untimed): so that systems saved once can be read in alternating rounds.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use objstash::{Codec, Durability, Key, Layout, Stash, Values};
use objstash_bench::{for_each_batch, shuffled};

/// The order of the timed reads: every object shuffled, or the first `reads` of that.
fn read_order(n: usize, reads: usize) -> Vec<usize> {
    let mut order = shuffled(n);
    if reads > 0 {
        order.truncate(reads);
    }
    order
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

fn objstash(
    spec: &str,
    file: &Path,
    reads: usize,
    dir: &Path,
    reads_only: bool,
) -> Result<serde_json::Value> {
    let fields = spec.split(':').collect::<Vec<_>>();
    let usage =
        || format!("objstash:LAYOUT:DURABILITY:CODEC[:VALUES][:MAP_BYTES], not objstash:{spec}");
    let (&[layout, durability, codec], rest) = fields.split_at(3.min(fields.len())) else {
        bail!(usage())
    };
    let path = dir.join("objstash.db");
    let mut builder = Stash::builder()
        .layout(layout.parse::<Layout>()?)
        .durability(durability.parse::<Durability>()?)
        .codec(codec.parse::<Codec>()?);
    for field in rest {
        builder = match (field.parse::<Values>(), field.parse::<u64>()) {
            (Ok(values), _) => builder.values(values),
            (_, Ok(bytes)) => builder.read_mmap_size(bytes),
            _ => bail!(usage()),
        };
    }
    anyhow::ensure!(!reads_only || path.exists(), "nothing saved in {}", path.display());
    let stash = builder.open(&path)?;
    let start = Instant::now();
    let mut keys: Vec<Key> = Vec::new();
    for_each_batch(file, 10_000, |batch| {
        if reads_only {
            keys.extend(batch.iter().map(|object| Key::of(object)));
        } else {
            keys.extend(stash.save_all(batch)?);
        }
        Ok(())
    })?;
    stash.flush()?;
    let save = rate(keys.len(), start);
    let order = read_order(keys.len(), reads);
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
    if reads_only {
        return Ok(serde_json::json!({ "get": get, "get_many": get_many }));
    }
    Ok(
        serde_json::json!({ "save": save, "get": get, "get_many": get_many, "bytes": dir_bytes(dir) }),
    )
}

fn cacache(file: &Path, reads: usize, dir: &Path, reads_only: bool) -> Result<serde_json::Value> {
    let cache = dir.join("cacache");
    anyhow::ensure!(!reads_only || cache.exists(), "nothing saved in {}", cache.display());
    let name = |i: usize| format!("object-{i}");
    let mut lens = Vec::new();
    let start = Instant::now();
    for_each_batch(file, 10_000, |batch| {
        for object in batch {
            if !reads_only {
                cacache::write_sync(&cache, name(lens.len()), object)?;
            }
            lens.push(object.len());
        }
        Ok(())
    })?;
    let save = rate(lens.len(), start);
    let order = read_order(lens.len(), reads);
    let mut get = 0.0;
    for pass in 0..2 {
        let start = Instant::now();
        for &i in &order {
            let data = cacache::read_sync(&cache, name(i))?;
            anyhow::ensure!(data.len() == lens[i]);
        }
        if pass == 1 {
            get = rate(order.len(), start);
        }
    }
    if reads_only {
        return Ok(serde_json::json!({ "get": get }));
    }
    Ok(serde_json::json!({ "save": save, "get": get, "bytes": dir_bytes(dir) }))
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().collect();
    let reads_only = args.last().is_some_and(|a| a == "--reads-only");
    if reads_only {
        args.pop();
    }
    let usage = "usage: peers SYSTEM OBJECTS_FILE DIR [READS] [--reads-only]";
    let (system, file, dir, reads) = match &args[..] {
        [_, system, file, dir] => (system, file, dir, 0),
        [_, system, file, dir, reads] => (system, file, dir, reads.parse().context(usage)?),
        _ => bail!(usage),
    };
    let (file, dir) = (Path::new(file), Path::new(dir));
    std::fs::create_dir_all(dir)?;
    let figures = match system.split_once(':') {
        Some(("objstash", spec)) => objstash(spec, file, reads, dir, reads_only)?,
        None if system == "cacache" => cacache(file, reads, dir, reads_only)?,
        _ => bail!("unknown system {system}: objstash:LAYOUT:DURABILITY:CODEC or cacache"),
    };
    println!("{figures}");
    Ok(())
}
