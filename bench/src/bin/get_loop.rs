//! A `get` loop to profile: fills a stash once (kept in `--dir` for the next run), then
//! reads objects one `get` at a time, or in `get_many` calls of `--many` keys, in a
//! shuffled order, pass after pass, and prints the rate of each pass. Run it under `perf
//! record` to see where a read's time goes.
//!
//! `cargo run --release -p objstash-bench --bin get_loop -- [--count 100000] [--passes 5]
//! [--layout single|bucketed] [--reads N] [--many KEYS_PER_CALL] [--read-only]
//! [--transaction-per-read] [--mmap BYTES] [--dir DIR]`
//! (`--reads`: each pass reads the first N keys of the shuffled order.)

use std::time::Instant;

use anyhow::{Result, bail};
use objstash::{Key, Layout, Stash};
use objstash_bench::shuffled;
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
            other => bail!("unknown flag {other}"),
        }
    }
    let temp = tempfile::tempdir()?;
    let dir = dir.map_or_else(|| temp.path().to_path_buf(), Into::into);
    let path = dir.join(format!("get_loop-{layout}-{count}.db"));
    let keys: Vec<Key> =
        (0..count).into_par_iter().map(|i| Key::of(&speckle_gen::object(1, i))).collect();
    if !path.exists() {
        let stash = Stash::builder().layout(layout).open(&path)?;
        // Generated call by call: ten million objects would not fit in memory at once.
        for from in (0..count).step_by(10_000) {
            let objects: Vec<Vec<u8>> = (from..count.min(from + 10_000))
                .into_par_iter()
                .map(|i| speckle_gen::object(1, i))
                .collect();
            stash.save_all(&objects)?;
        }
        stash.close()?;
    }
    let mut order = shuffled(keys.len());
    order.truncate(reads);
    let builder = Stash::builder().read_only(read_only).read_mmap_size(mmap);
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
