//! The chunk sizes of large objects (`src/chunks.rs`): two versions of a file cut by
//! FastCDC at several sizes, with the bytes the second adds, the chunks per GiB (each costs
//! a row, a key in the chunk index and a manifest entry, about 130 bytes) and the rate of
//! cutting and hashing.
//!
//! `bench/dedup.sh WORKDIR` leaves `WORKDIR/v1.tar` and `v2.tar` (a tar of cargo's registry
//! sources before and after a one-line edit); then
//! `cargo run --release -p objstash-experiments --bin chunk_sizes -- WORKDIR/v1.tar WORKDIR/v2.tar`

use std::collections::HashSet;
use std::fs::File;
use std::io::BufReader;
use std::time::Instant;

use anyhow::{Context, Result};
use fastcdc::v2020::StreamCDC;

/// (min, average, max) chunk sizes tried.
const SIZES: [(usize, usize, usize); 4] = [
    (16 << 10, 64 << 10, 256 << 10),
    (64 << 10, 256 << 10, 1 << 20),
    (256 << 10, 1 << 20, 4 << 20),
    (1 << 20, 4 << 20, 16 << 20),
];
/// Bytes one chunk costs beside its data: its row and key-index entry, its manifest entry.
const PER_CHUNK: f64 = 130.0;

fn cut(path: &str, (min, avg, max): (usize, usize, usize)) -> Result<Vec<(blake3::Hash, usize)>> {
    let file = BufReader::with_capacity(1 << 20, File::open(path).context(path.to_string())?);
    StreamCDC::new(file, min, avg, max)
        .map(|chunk| {
            let chunk = chunk?;
            Ok((blake3::hash(&chunk.data), chunk.length))
        })
        .collect()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [first, second] = &args[..] else {
        anyhow::bail!("usage: chunk_sizes FIRST SECOND");
    };
    println!("average chunk | chunks/GiB | overhead/GiB | second adds | cut+hash MB/s");
    for sizes in SIZES {
        let began = Instant::now();
        let a = cut(first, sizes)?;
        let secs = began.elapsed().as_secs_f64();
        let b = cut(second, sizes)?;
        let bytes: usize = a.iter().map(|(_, len)| len).sum();
        let known: HashSet<blake3::Hash> = a.iter().map(|(hash, _)| *hash).collect();
        let added: usize = b.iter().filter(|(hash, _)| !known.contains(hash)).map(|(_, l)| l).sum();
        let per_gib = a.len() as f64 * f64::from(1 << 30) / bytes as f64;
        println!(
            "{:>10} KiB | {:>10.0} | {:>9.0} KiB | {:>9} B | {:>8.0}",
            sizes.1 >> 10,
            per_gib,
            per_gib * PER_CHUNK / 1024.0,
            added,
            bytes as f64 / 1e6 / secs
        );
    }
    Ok(())
}
