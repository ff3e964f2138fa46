//! A `get` loop to profile: fills a stash once (kept in `--dir` for the next run), then
//! reads objects one `get` at a time, or in `get_many` calls of `--many` keys, in a
//! shuffled order, pass after pass, and prints the rate of each pass. Run it under `perf
//! record` to see where a read's time goes.
//!
//! `cargo run --release -p objstash-bench --bin get_loop -- [--count 100000] [--passes 5]
//! [--layout single|bucketed] [--reads N] [--many KEYS_PER_CALL] [--read-only]
//! [--transaction-per-read] [--mmap BYTES] [--threads N] [--dir DIR] [--objects FILE]`
//! (`--reads`: each pass reads the first N keys of the shuffled order; `--objects`: the
//! objects of a file the peers benchmark wrote, `bench/peers/peers.py --keep-objects`,
//! instead of `--count` generated ones.)

use std::time::Instant;

use anyhow::{Result, bail};
use objstash::{Key, Layout, Stash};
use objstash_bench::{for_each_batch, shuffled};
use rayon::prelude::*;

fn main() -> Result<()> {
    let mut count = 100_000u64;
    let mut passes = 5;
    let mut layout = Layout::Single;
    let mut read_only = false;
    let mut dir = None;
    let mut mmap = 0u64;
    let mut many = 0usize;
    let mut kept = true;
    let mut reads = usize::MAX;
    let mut objects = None;
    let mut threads = 0;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--read-only" => read_only = true,
            "--transaction-per-read" => kept = false,
            "--reads" => reads = args.next().unwrap_or_default().parse()?,
            "--count" => count = args.next().unwrap_or_default().parse()?,
            "--passes" => passes = args.next().unwrap_or_default().parse()?,
            "--layout" => layout = args.next().unwrap_or_default().parse()?,
            "--dir" => dir = args.next(),
            "--many" => many = args.next().unwrap_or_default().parse()?,
            "--mmap" => mmap = args.next().unwrap_or_default().parse()?,
            "--objects" => objects = args.next(),
            "--threads" => threads = args.next().unwrap_or_default().parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    let temp = tempfile::tempdir()?;
    let dir = dir.map_or_else(|| temp.path().to_path_buf(), Into::into);
    let (path, keys) = match objects {
        Some(file) => {
            let path = dir.join(format!("get_loop-{layout}-objects.db"));
            let fill = (!path.exists()).then(|| Stash::builder().layout(layout).open(&path));
            let fill = fill.transpose()?;
            let mut keys = Vec::new();
            for_each_batch(file.as_ref(), 10_000, |batch| {
                match &fill {
                    Some(stash) => keys.extend(stash.save_all(batch)?),
                    None => keys.extend(batch.par_iter().map(|o| Key::of(o)).collect::<Vec<_>>()),
                }
                Ok(())
            })?;
            if let Some(stash) = fill {
                stash.close()?;
            }
            (path, keys)
        }
        None => {
            let path = dir.join(format!("get_loop-{layout}-{count}.db"));
            if !path.exists() {
                fill_generated(&path, layout, count)?;
            }
            (
                path,
                (0..count).into_par_iter().map(|i| Key::of(&speckle_gen::object(1, i))).collect(),
            )
        }
    };
    let mut order = shuffled(keys.len());
    order.truncate(reads);
    let mut builder = Stash::builder().read_only(read_only).read_mmap_size(mmap);
    if threads > 0 {
        builder = builder.threads(threads);
    }
    let builder = if kept { builder } else { builder.read_snapshot(std::time::Duration::ZERO) };
    let stash = builder.open(&path)?;
    for pass in 0..passes {
        let start = Instant::now();
        if many > 0 {
            let shuffled: Vec<Key> = order.iter().map(|&i| keys[i]).collect();
            for call in shuffled.chunks(many) {
                anyhow::ensure!(stash.get_many(call)?.iter().all(Option::is_some));
            }
        } else {
            for &i in &order {
                anyhow::ensure!(stash.get(&keys[i])?.is_some(), "{} missing", keys[i]);
            }
        }
        let rate = order.len() as f64 / start.elapsed().as_secs_f64();
        println!("pass {pass}: {rate:.0} objects/s");
    }
    stash.close()?;
    Ok(())
}

/// Saves `count` generated objects into a new stash at `path`.
fn fill_generated(path: &std::path::Path, layout: Layout, count: u64) -> Result<()> {
    let stash = Stash::builder().layout(layout).open(path)?;
    // Generated call by call: ten million objects would not fit in memory at once.
    for from in (0..count).step_by(10_000) {
        let objects: Vec<Vec<u8>> = (from..count.min(from + 10_000))
            .into_par_iter()
            .map(|i| speckle_gen::object(1, i))
            .collect();
        stash.save_all(&objects)?;
    }
    Ok(stash.close()?)
}
