//! Inflate of small objects: the decoders a `get` could use on the gzip members objstash
//! stores (libdeflate level 1, as the writer makes them), one thread, each into a new
//! vector of the object's length as a `get` returns it.
//!
//! `cargo run --release -p objstash-experiments --bin small_inflate -- [COUNT]`
//! (default: 50,000 generated Speckle objects). Objects/s, best of 5.

use std::time::Instant;

use anyhow::Result;
use flate2::{Decompress, FlushDecompress};

/// Objects/s of `f` over `stored`, best of 5 passes.
fn run(name: &str, stored: &[(Vec<u8>, usize)], mut f: impl FnMut(&[u8], usize) -> Vec<u8>) {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for (member, len) in stored {
            let out = f(member, *len);
            assert_eq!(out.len(), *len);
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "| {name} | {:.0} | {:.2} |",
        stored.len() as f64 / best,
        best * 1e6 / stored.len() as f64
    );
}

fn main() -> Result<()> {
    let count: u64 = std::env::args().nth(1).map_or(Ok(50_000), |s| s.parse())?;
    let mut compressor =
        libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).expect("1"));
    let stored: Vec<(Vec<u8>, usize)> = (0..count)
        .map(|i| {
            let raw = speckle_gen::object(1, i);
            let mut out = vec![0; compressor.gzip_compress_bound(raw.len())];
            let n = compressor.gzip_compress(&raw, &mut out).expect("bound");
            out.truncate(n);
            (out, raw.len())
        })
        .collect();
    let mean = stored.iter().map(|(_, n)| n).sum::<usize>() / stored.len();
    println!("{count} objects of {mean} B on average, one thread, best of 5");
    println!("| decoder | objects/s | µs/object |");
    println!("|---|---:|---:|");
    let mut zlib = Decompress::new(false);
    run("zlib-rs, one reused state", &stored, |member, len| {
        zlib.reset(false);
        let mut out = Vec::with_capacity(len + 64);
        zlib.decompress_vec(&member[10..], &mut out, FlushDecompress::Finish).expect("inflate");
        out
    });
    let mut libdeflate = libdeflater::Decompressor::new();
    run("libdeflate, raw deflate after the header", &stored, |member, len| {
        let mut out = vec![0; len];
        let n = libdeflate
            .deflate_decompress(&member[10..member.len() - 8], &mut out)
            .expect("inflate");
        out.truncate(n);
        out
    });
    run("libdeflate, gzip (its CRC checked)", &stored, |member, len| {
        let mut out = vec![0; len];
        let n = libdeflate.gzip_decompress(member, &mut out).expect("inflate");
        out.truncate(n);
        out
    });
    run("blake3 of the object (for scale)", &stored, |member, len| {
        let mut out = vec![0; len];
        out[..member.len().min(len)].copy_from_slice(&member[..member.len().min(len)]);
        std::hint::black_box(blake3::hash(&out));
        out
    });
    Ok(())
}
