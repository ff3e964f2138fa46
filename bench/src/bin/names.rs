//! What names cost: `save_named` against `save_all` of the same objects, reads by name
//! against reads by key, and the bytes each name adds on disk. Rounds alternate between
//! the two so that both see the same machine.
//!
//! `cargo run --release -p objstash-bench --bin names -- [--count 200000] [--rounds 3] [--reads 20000]`
//!
//! Names are the generator's 32-hex Speckle ids, as a Speckle client would use them.

use std::time::Instant;

#[path = "../../../examples/common/mod.rs"]
mod common;

use anyhow::Result;
use clap::Parser;
use objstash::{Key, Stash};
use rayon::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// Objects saved per round.
    #[arg(long, default_value_t = 200_000)]
    count: u64,
    /// Rounds of each kind of save, alternating.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Random single-object reads timed per kind.
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    let objects: Vec<Vec<u8>> =
        (0..args.count).into_par_iter().map(|i| speckle_gen::object(16, i)).collect();
    let ids: Vec<String> = (0..args.count).map(|i| speckle_gen::id(16, i)).collect();
    let named: Vec<(&String, &Vec<u8>)> = ids.iter().zip(&objects).collect();
    let (mut plain, mut by_name) = (Vec::new(), Vec::new());
    let (mut plain_bytes, mut named_bytes) = (0, 0);
    for round in 0..args.rounds {
        for naming in [false, true] {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("n.db");
            let stash = Stash::open(&path)?;
            let start = Instant::now();
            if naming {
                stash.save_named(&named)?;
            } else {
                stash.save_all(&objects)?;
            }
            stash.flush()?;
            let rate = args.count as f64 / start.elapsed().as_secs_f64();
            stash.close()?;
            let bytes = std::fs::metadata(&path)?.len();
            println!(
                "round {round}: {:<10} {rate:>9.0} objects/s, {bytes} bytes",
                if naming { "save_named" } else { "save_all" }
            );
            if naming {
                by_name.push(rate);
                named_bytes = bytes;
            } else {
                plain.push(rate);
                plain_bytes = bytes;
            }
        }
    }
    let (plain, by_name) = (median(plain), median(by_name));
    println!("\n| | objects/s (median of {}) |", args.rounds);
    println!("|---|---:|");
    println!("| save_all | {plain:.0} |");
    println!("| save_named | {by_name:.0} ({:.2}x save_all) |", by_name / plain);
    println!(
        "bytes on disk per name: {:.1} (file {plain_bytes} -> {named_bytes} bytes for {} names)",
        (named_bytes as f64 - plain_bytes as f64) / args.count as f64,
        args.count
    );

    // Reads: one object at a time, by key and by name, on one stash holding both.
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("r.db"))?;
    let keys = stash.save_named(&named)?;
    stash.flush()?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let picks: Vec<usize> =
        common::pick(&(0..keys.len()).collect::<Vec<_>>(), args.reads, &mut state);
    let (mut by_key, mut by_id, mut two_steps) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let start = Instant::now();
        for &i in &picks {
            let key: &Key = &keys[i];
            assert!(stash.get(key)?.is_some());
        }
        by_key.push(args.reads as f64 / start.elapsed().as_secs_f64());
        let start = Instant::now();
        for &i in &picks {
            assert!(stash.get_named(&[&ids[i]])?[0].is_some());
        }
        by_id.push(args.reads as f64 / start.elapsed().as_secs_f64());
        let start = Instant::now();
        for &i in &picks {
            let key = stash.resolve(&[&ids[i]])?[0].expect("saved");
            assert!(stash.get(&key)?.is_some());
        }
        two_steps.push(args.reads as f64 / start.elapsed().as_secs_f64());
    }
    let (by_key, by_id, two_steps) = (median(by_key), median(by_id), median(two_steps));
    println!("\n| one thread, warm | objects/s |");
    println!("|---|---:|");
    println!("| get | {by_key:.0} |");
    println!("| get_named (one name a call) | {by_id:.0} ({:.2}x get) |", by_id / by_key);
    println!("| resolve, then get | {two_steps:.0} ({:.2}x get) |", two_steps / by_key);
    let names: Vec<&String> = picks.iter().map(|&i| &ids[i]).collect();
    let start = Instant::now();
    let got = stash.get_named(&names)?;
    let many = names.len() as f64 / start.elapsed().as_secs_f64();
    assert!(got.iter().all(Option::is_some));
    println!("| get_named ({} names in one call) | {many:.0} |", names.len());
    stash.close()?;
    Ok(())
}
