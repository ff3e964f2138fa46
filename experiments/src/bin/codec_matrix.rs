//! Chooses the gzip level (and, run once per backend, the flate2 backend) by measurement on
//! generated Speckle objects: ratio, compress and decompress rate per object, one thread,
//! one reused deflate state (as the library does). Whole-stream gzip is the size baseline.
//!
//! `cargo run --release -p objstash-experiments --bin codec_matrix -- [OBJECTS]` (zlib-rs, the default)
//! `cargo run --release -p objstash-experiments --features miniz --bin codec_matrix`

use std::io::Write;
use std::time::Instant;

use anyhow::Result;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

fn main() -> Result<()> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(50_000);
    let objects = speckle_gen::objects(1, 0, n);
    let raw: usize = objects.iter().map(Vec::len).sum();
    let backend = if !cfg!(feature = "miniz") { "zlib-rs" } else { "miniz_oxide" };
    println!("{n} objects, mean {} bytes, backend {backend}", raw / n);
    println!(
        "| level | per-object ratio | whole-stream ratio | compress objects/s | decompress objects/s |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for level in [1, 2, 3, 4, 5, 6, 7, 9] {
        let mut deflate = Compress::new(Compression::new(level), false);
        let start = Instant::now();
        let mut packed = Vec::with_capacity(n);
        for object in &objects {
            deflate.reset();
            let mut out = Vec::with_capacity(object.len() + 64);
            deflate.compress_vec(object, &mut out, FlushCompress::Finish)?;
            packed.push(out);
        }
        let compress_rate = n as f64 / start.elapsed().as_secs_f64();
        // gzip adds an 18-byte header and trailer to each raw deflate stream.
        let stored: usize = packed.iter().map(|p| p.len() + 18).sum();

        let mut inflate = Decompress::new(false);
        let start = Instant::now();
        for (object, p) in objects.iter().zip(&packed) {
            inflate.reset(false);
            let mut out = Vec::with_capacity(object.len() + 1);
            inflate.decompress_vec(p, &mut out, FlushDecompress::Finish)?;
            assert_eq!(out.len(), object.len());
        }
        let decompress_rate = n as f64 / start.elapsed().as_secs_f64();

        let mut stream = flate2::write::GzEncoder::new(Vec::new(), Compression::new(level));
        for object in &objects {
            stream.write_all(object)?;
        }
        let whole = stream.finish()?.len();
        println!(
            "| {level} | {:.2} | {:.2} | {compress_rate:.0} | {decompress_rate:.0} |",
            raw as f64 / stored as f64,
            raw as f64 / whole as f64
        );
    }
    Ok(())
}
