//! A `get` loop to profile: fills a stash once, then reads every object one `get` at a
//! time (or `get_many` calls of `--many` keys) in a shuffled order, pass after pass, and prints the rate of each pass. Run it
//! under `perf record` to see where a read's time goes.
//!
//! `cargo run --release -p objstash-bench --bin get_loop -- [--count 100000] [--passes 5]
//! [--layout single|bucketed] [--read-only] [--transaction-per-read] [--mmap BYTES] [--many KEYS_PER_CALL] [--dir DIR]`

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
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--read-only" => read_only = true,
            "--transaction-per-read" => kept = false,
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
        let objects: Vec<Vec<u8>> =
            (0..count).into_par_iter().map(|i| speckle_gen::object(1, i)).collect();
        for chunk in objects.chunks(10_000) {
            stash.save_all(chunk)?;
        }
        stash.close()?;
    }
    let order = shuffled(keys.len());
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
        println!("pass {pass}: {rate:.0} get/s");
    }
    stash.close()?;
    Ok(())
}
