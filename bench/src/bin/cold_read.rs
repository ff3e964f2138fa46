//! Reads with a cold and with a warm OS page cache: `get` of random keys and `get_many` of
//! the same keys, right after dropping the page cache and then again.
//!
//! `cargo run --release -p objstash-bench --bin cold_read -- [--objects 1000000] [--reads 2000]`
//!
//! Dropping the page cache needs root (`/proc/sys/vm/drop_caches`); without it the example
//! says so and reports warm figures only. Warm-cache numbers can hide a disk-bound read
//! path; this shows both.

use std::time::Instant;

#[path = "../../../examples/common/mod.rs"]
mod common;

use anyhow::Result;
use clap::Parser;
use objstash::{Key, Stash};
use rayon::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// Objects in the stash.
    #[arg(long, default_value_t = 1_000_000)]
    objects: u64,
    /// Random keys read per measurement.
    #[arg(long, default_value_t = 2_000)]
    reads: usize,
}

fn drop_page_cache() -> bool {
    let synced = std::process::Command::new("sync").status().is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("cold.db");
    let mut keys = Vec::with_capacity(args.objects as usize);
    {
        let stash = Stash::open(&path)?;
        for start in (0..args.objects).step_by(10_000) {
            let end = (start + 10_000).min(args.objects);
            let chunk: Vec<Vec<u8>> =
                (start..end).into_par_iter().map(|i| speckle_gen::object(4, i)).collect();
            keys.extend(stash.save_all(&chunk)?);
        }
        stash.close()?;
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let picks: Vec<Key> = common::pick(&keys, args.reads, &mut x);
    let file_mb = std::fs::metadata(&path)?.len() as f64 / 1e6;
    println!(
        "{} objects, {file_mb:.0} MB file, {} random keys per measurement",
        args.objects, args.reads
    );
    println!("| cache | get (objects/s) | get_many (objects/s) |");
    println!("|---|---:|---:|");
    for cache in ["cold", "warm"] {
        let mut rates = [0.0; 2];
        for (i, many) in [false, true].into_iter().enumerate() {
            if cache == "cold" && !drop_page_cache() {
                println!("(cannot drop the page cache here: not root; cold figures skipped)");
                break;
            }
            let stash = Stash::open(&path)?;
            let start = Instant::now();
            if many {
                let got = stash.get_many(&picks)?;
                assert!(got.iter().all(Option::is_some));
            } else {
                for key in &picks {
                    assert!(stash.get(key)?.is_some());
                }
            }
            rates[i] = picks.len() as f64 / start.elapsed().as_secs_f64();
            stash.close()?;
        }
        println!("| {cache} | {:.0} | {:.0} |", rates[0], rates[1]);
    }
    Ok(())
}
