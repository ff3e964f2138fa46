//! Deflate of small objects: how much of each call is setting up the compressor's tables.
//! libdeflate level 1 (objstash's default) clears a 128 KiB hash table for every object;
//! zlib-rs with a window and a hash table sized to the object clears a few KiB.
//!
//! `cargo run --release -p objstash-experiments --bin small_deflate -- [OBJECTS_FILE]`
//! (the peers benchmark's file of 4-byte lengths and objects; default: 50,000 generated
//! Speckle objects). One thread; objects/s and the per-object gzip ratio.

use std::time::Instant;

use anyhow::Result;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Method, Strategy};

fn run(name: &str, objects: &[Vec<u8>], mut f: impl FnMut(&[u8], &mut Vec<u8>) -> usize) {
    let raw: usize = objects.iter().map(Vec::len).sum();
    let mut out = Vec::new();
    let mut best = f64::MAX;
    let mut stored = 0;
    for _ in 0..3 {
        stored = 0;
        let start = Instant::now();
        for o in objects {
            stored += f(o, &mut out);
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!("| {name} | {:.0} | {:.3} |", objects.len() as f64 / best, raw as f64 / stored as f64);
}

fn main() -> Result<()> {
    let objects = objstash_experiments::objects_of_file(std::env::args().nth(1))?;
    let mean = objects.iter().map(Vec::len).sum::<usize>() / objects.len();
    println!("{} objects of {mean} B on average, one thread, best of 3", objects.len());
    println!("| compressor | objects/s | ratio |");
    println!("|---|---:|---:|");
    for level in [1, 2] {
        let lvl = libdeflater::CompressionLvl::new(level).expect("a libdeflate level");
        let mut c = libdeflater::Compressor::new(lvl);
        run(&format!("libdeflate {level}"), &objects, |o, out| {
            out.resize(c.gzip_compress_bound(o.len()), 0);
            c.gzip_compress(o, out).expect("bound")
        });
    }
    for level in [1, 2, 3, 4] {
        for hash_less in [None, Some(0), Some(1), Some(2)] {
            let name = match hash_less {
                None => format!("zlib-rs {level}, window 32 KiB, hash 2^15"),
                Some(n) => format!("zlib-rs {level}, window and hash sized to the object, -{n}"),
            };
            // One reused compressor per window size (2^9 to 2^15 bytes).
            let mut states: Vec<Option<Deflate>> = (0..16).map(|_| None).collect();
            run(&name, &objects, |o, out| {
                let bits = (usize::BITS - o.len().max(256).leading_zeros()).clamp(9, 15) as i32;
                let (window_bits, mem_level) = match hash_less {
                    None => (15, 8),
                    // hash bits = mem_level + 7: about one slot per byte of the object
                    Some(n) => (bits, (bits - 7 - n).clamp(1, 9)),
                };
                let state = states[window_bits as usize].get_or_insert_with(|| {
                    Deflate::new_with_config(DeflateConfig {
                        level,
                        method: Method::Deflated,
                        window_bits: window_bits + 16,
                        mem_level,
                        strategy: Strategy::Default,
                    })
                });
                state.reset();
                out.clear();
                out.reserve(o.len() + 64);
                let before = state.total_out();
                let spare = out.spare_capacity_mut();
                state
                    .compress_uninit(o, spare, DeflateFlush::Finish)
                    .expect("compressing into room enough");
                (state.total_out() - before) as usize
            });
        }
    }
    Ok(())
}
