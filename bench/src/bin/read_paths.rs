//! Where a `get` loop's time goes, by layout: every object read one `get` at a time in a
//! shuffled order (then by `get_many`), on a handle that records every read as a use (its
//! writer commits them every half second, and in WAL mode each commit empties every
//! reader's page cache and drops its memory map), on one whose resolution of uses is an
//! hour (every read falls within it: reads select `used` and record nothing, the case of
//! objects read again within the default 5 seconds) and on a read-only handle (which
//! records nothing, so nothing commits), with and without memory-mapped reads, and with
//! snapshots kept between reads (the default) or a read transaction per read. Rounds
//! alternate; medians are printed, with the bytes the process wrote (Linux's
//! `/proc/self/io`, from the handle's open to its close) per object read.
//!
//! `cargo run --release -p objstash-bench --bin read_paths -- [--count 100000] [--rounds 3]`

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Parser;
use objstash::{Key, Layout, Stash};
use objstash_bench::{proc_io, shuffled};
use rayon::prelude::*;

/// `get`s per second over every key in `order`, after a warm-up pass.
fn get_rate(stash: &Stash, keys: &[Key], order: &[usize]) -> Result<f64> {
    let mut rate = 0.0;
    for pass in 0..2 {
        let start = Instant::now();
        for &i in order {
            anyhow::ensure!(stash.get(&keys[i])?.is_some(), "{} missing", keys[i]);
        }
        if pass == 1 {
            rate = order.len() as f64 / start.elapsed().as_secs_f64();
        }
    }
    Ok(rate)
}

/// Objects per second by `get_many` of every key in `order`, in calls of 1,000 keys.
fn get_many_rate(stash: &Stash, keys: &[Key], order: &[usize]) -> Result<f64> {
    let shuffled: Vec<Key> = order.iter().map(|&i| keys[i]).collect();
    let start = Instant::now();
    for chunk in shuffled.chunks(1_000) {
        anyhow::ensure!(stash.get_many(chunk)?.iter().all(Option::is_some));
    }
    Ok(shuffled.len() as f64 / start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[derive(Parser, Debug)]
struct Args {
    /// Generated objects in each layout's stash.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Rounds; medians are printed.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

fn main() -> Result<()> {
    let Args { count, rounds } = Args::parse();
    let objects: Vec<Vec<u8>> =
        (0..count).into_par_iter().map(|i| speckle_gen::object(1, i)).collect();
    let order = shuffled(objects.len());
    let dir = tempfile::tempdir()?;
    let mut stashes = Vec::new();
    for layout in [Layout::Single, Layout::Bucketed] {
        let path = dir.path().join(format!("{layout}.db"));
        let stash = Stash::builder().layout(layout).open(&path)?;
        let mut keys = Vec::with_capacity(objects.len());
        for chunk in objects.chunks(10_000) {
            keys.extend(stash.save_all(chunk)?);
        }
        stash.close()?;
        stashes.push((path, keys));
    }
    let open = |path: &Path, read_only: bool, resolution: Duration, mmap: u64, kept: bool| {
        let builder = Stash::builder().read_only(read_only).read_mmap_size(mmap);
        let builder = if kept { builder } else { builder.read_snapshot(Duration::ZERO) };
        builder.use_resolution(resolution).open(path)
    };
    const HOUR: Duration = Duration::from_secs(3600);
    // Name, read-only, resolution of uses, map size, whether snapshots are kept (the
    // default) or each read begins its own transaction (`read_snapshot(ZERO)`).
    let cases = [
        ("records every read", false, Duration::ZERO, 0, true),
        ("records every read, a transaction per read", false, Duration::ZERO, 0, false),
        ("reads within the resolution", false, HOUR, 0, true),
        ("reads within the resolution, a transaction per read", false, HOUR, 0, false),
        ("reads within the resolution, mmap 1 GiB", false, HOUR, 1 << 30, true),
        ("read-only", true, HOUR, 0, true),
        ("read-only, mmap 1 GiB", true, HOUR, 1 << 30, true),
    ];
    let mut figures = vec![vec![Vec::new(); cases.len()]; stashes.len()];
    let mut many = vec![vec![Vec::new(); cases.len()]; stashes.len()];
    let mut writes = vec![vec![Vec::new(); cases.len()]; stashes.len()];
    for _ in 0..rounds {
        for (s, (path, keys)) in stashes.iter().enumerate() {
            for (c, &(_, read_only, resolution, mmap, kept)) in cases.iter().enumerate() {
                let before = proc_io("wchar");
                let stash = open(path, read_only, resolution, mmap, kept)?;
                figures[s][c].push(get_rate(&stash, keys, &order)?);
                many[s][c].push(get_many_rate(&stash, keys, &order)?);
                stash.close()?;
                // Two `get` passes and one `get_many` pass over every key.
                writes[s][c].push((proc_io("wchar") - before) as f64 / (3 * keys.len()) as f64);
            }
        }
    }
    println!("{count} objects, `get` objects/s, one thread, medians of {rounds} rounds");
    println!(
        "| handle | `get` single | `get` bucketed | bucketed / single | `get_many` single | \
         `get_many` bucketed | bytes written per read, single / bucketed |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (c, (case, ..)) in cases.iter().enumerate() {
        let single = median(figures[0][c].clone());
        let bucketed = median(figures[1][c].clone());
        println!(
            "| {case} | {single:.0} | {bucketed:.0} | {:.2} | {:.0} | {:.0} | {:.0} / {:.0} |",
            bucketed / single,
            median(many[0][c].clone()),
            median(many[1][c].clone()),
            median(writes[0][c].clone()),
            median(writes[1][c].clone())
        );
    }
    Ok(())
}
