//! A `get` loop to profile: fills a stash once (kept in `--dir` for the next run), then
//! reads objects one `get` at a time, or in `get_many` calls of `--many` keys, in a
//! shuffled order, pass after pass, and prints the rate of each pass and the read system
//! calls it made an object (SQLite's `pread` of each page its cache does not hold). Run it
//! under `perf record` to see where a read's time goes.
//!
//! `cargo run --release -p objstash-bench --bin get_loop -- [--count 100000] [--passes 5]
//! [--layout single|bucketed] [--values rows|file] [--reads N] [--model N [--recent]] [--many KEYS_PER_CALL] [--read-only]
//! [--transaction-per-read] [--mmap BYTES] [--threads N] [--dir DIR] [--objects FILE]`
//! (`--reads`: each pass reads the first N keys of the shuffled order; `--objects`: the
//! objects of a file the peers benchmark wrote, `bench/peers/peers.py --keep-objects`,
//! instead of `--count` generated ones.)

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use objstash::{Key, Layout, Stash, Values};
use objstash_bench::{for_each_batch, proc_io, shuffled};
use rayon::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// Generated objects in the stash (unless `--objects`).
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Passes over the shuffled keys, each timed on its own.
    #[arg(long, default_value_t = 5)]
    passes: u32,
    #[arg(long, default_value_t = Layout::Single)]
    layout: Layout,
    /// Where the stash keeps its values: `rows` or `file` (format 9).
    #[arg(long, default_value_t = Values::InRows)]
    values: Values,
    /// Read only the first N keys of the shuffled order in each pass.
    #[arg(long)]
    reads: Option<usize>,
    /// Read the objects of one model instead: N objects saved one after another (from the
    /// middle of the stash), in a shuffled order.
    #[arg(long)]
    model: Option<usize>,
    /// Take the model from the end of the stash, the objects saved last, instead of the middle.
    #[arg(long)]
    recent: bool,
    /// Read in `get_many` calls of this many keys (default: one `get` at a time).
    #[arg(long, default_value_t = 0)]
    many: usize,
    /// Open the stash read-only (no use recorded, nothing committed).
    #[arg(long)]
    read_only: bool,
    /// Begin a read transaction for each `get` instead of keeping snapshots.
    #[arg(long)]
    transaction_per_read: bool,
    /// Each read connection's memory map, in bytes (0: none; default: the library's).
    #[arg(long)]
    mmap: Option<u64>,
    /// Threads of the stash's pool (default: the library's).
    #[arg(long)]
    threads: Option<usize>,
    /// Keep the filled stash here for the next run (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The objects of a file the peers benchmark wrote instead of generated ones.
    #[arg(long)]
    objects: Option<PathBuf>,
}

fn main() -> Result<()> {
    let Args {
        count,
        passes,
        layout,
        values,
        reads,
        model,
        recent,
        many,
        read_only,
        transaction_per_read,
        mmap,
        threads,
        dir,
        objects,
    } = Args::parse();
    let temp = tempfile::tempdir()?;
    let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
    let (path, keys) = match objects {
        Some(file) => {
            let path = dir.join(format!("get_loop-{layout}-objects.db"));
            let fill = (!path.exists()).then(|| Stash::builder().layout(layout).open(&path));
            let fill = fill.transpose()?;
            let mut keys = Vec::new();
            for_each_batch(&file, 10_000, |batch| {
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
            let place = if values == Values::InFile { "-file" } else { "" };
            let path = dir.join(format!("get_loop-{layout}-{count}{place}.db"));
            if !path.exists() {
                fill_generated(&path, layout, values, count)?;
            }
            (
                path,
                (0..count).into_par_iter().map(|i| Key::of(&speckle_gen::object(1, i))).collect(),
            )
        }
    };
    let mut order = match model {
        Some(n) => {
            let from = if recent { keys.len().saturating_sub(n) } else { keys.len() / 2 };
            anyhow::ensure!(from + n <= keys.len(), "a model of {n} is more than half the stash");
            shuffled(n).into_iter().map(|i| from + i).collect()
        }
        None => shuffled(keys.len()),
    };
    order.truncate(reads.unwrap_or(usize::MAX));
    let mut builder = Stash::builder().read_only(read_only);
    if let Some(bytes) = mmap {
        builder = builder.read_mmap_size(bytes);
    }
    if let Some(threads) = threads {
        builder = builder.threads(threads);
    }
    if transaction_per_read {
        builder = builder.read_snapshot(std::time::Duration::ZERO);
    }
    let stash = builder.open(&path)?;
    for pass in 0..passes {
        let start = Instant::now();
        let syscalls = proc_io("syscr");
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
        let per_object = (proc_io("syscr") - syscalls) as f64 / order.len() as f64;
        println!("pass {pass}: {rate:.0} objects/s, {per_object:.2} read calls an object");
    }
    stash.close()?;
    Ok(())
}

/// Saves `count` generated objects into a new stash at `path`.
fn fill_generated(
    path: &std::path::Path,
    layout: Layout,
    values: Values,
    count: u64,
) -> Result<()> {
    let stash = Stash::builder().layout(layout).values(values).open(path)?;
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
