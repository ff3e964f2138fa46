//! Deflate's fixed Huffman codes for small objects: what a `get` gains and what the file
//! pays. A block with dynamic codes carries its code lengths, and every inflate of it
//! builds its decoding tables from them (libdeflate's `build_decode_table`, a third of
//! inflating a 700-byte object); a block with the fixed codes of RFC 1951 carries none, and
//! libdeflate keeps the fixed tables between calls on one decompressor. The read here is
//! what `get` does after SQLite: inflate with a reused libdeflate decompressor into a new
//! vector of the object's length, then blake3 of it.
//!
//! `cargo run --release -p objstash-experiments --bin fixed_huffman -- [OBJECTS_FILE]`
//! (the peers benchmark's file of 4-byte lengths and objects; default: 50,000 generated
//! Speckle objects). One thread; each encoding's read rate, best of 5 passes, its stored
//! bytes against the raw bytes, and its compression rate; then the same for generated
//! objects glued 4, 16 and 64 at a time, where the tables serve more bytes.

use std::time::Instant;

use anyhow::Result;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Method, Strategy};

/// The best of `passes` timings of `f` over every object, in objects/s.
fn rate(count: usize, passes: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..passes {
        let start = Instant::now();
        f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    count as f64 / best
}

/// Gzips each object with a reused zlib-rs state at `level` and `strategy`.
fn zlib(objects: &[Vec<u8>], level: i32, strategy: Strategy) -> Vec<Vec<u8>> {
    let mut state = Deflate::new_with_config(DeflateConfig {
        level,
        method: Method::Deflated,
        window_bits: 15 + 16,
        mem_level: 8,
        strategy,
    });
    objects
        .iter()
        .map(|o| {
            state.reset();
            let mut out = vec![0; o.len() + 64];
            let before = state.total_out();
            state
                .compress(o, &mut out, DeflateFlush::Finish)
                .expect("compressing into room enough");
            out.truncate((state.total_out() - before) as usize);
            out
        })
        .collect()
}

/// Gzips each object with a reused libdeflate compressor at `level` (dynamic or fixed
/// codes, whichever it finds smaller for each block: objstash's writer today).
fn libdeflate(objects: &[Vec<u8>], level: i32) -> Vec<Vec<u8>> {
    let lvl = libdeflater::CompressionLvl::new(level).expect("a libdeflate level");
    let mut c = libdeflater::Compressor::new(lvl);
    objects
        .iter()
        .map(|o| {
            let mut out = vec![0; c.gzip_compress_bound(o.len())];
            let n = c.gzip_compress(o, &mut out).expect("bound");
            out.truncate(n);
            out
        })
        .collect()
}

type Encode = Box<dyn Fn(&[Vec<u8>]) -> Vec<Vec<u8>>>;

/// Prints a row per encoding of `objects`: its read rate, bytes, compression rate and
/// share of objects whose first block has the fixed codes.
fn table(objects: &[Vec<u8>], encodings: Vec<(String, Encode)>) {
    let raw: usize = objects.iter().map(Vec::len).sum();
    println!(
        "\n{} objects of {} B on average; one thread, best of 5",
        objects.len(),
        raw / objects.len()
    );
    println!(
        "| encoding | read (inflate + blake3) objects/s | stored / raw | compress objects/s | fixed |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut inflate = libdeflater::Decompressor::new();
    let mut inflate_fixed = libdeflater::Decompressor::new();
    for (name, encode) in encodings {
        let stored = encode(objects);
        let compress = rate(objects.len(), 3, || {
            std::hint::black_box(encode(objects));
        });
        let bytes: usize = stored.iter().map(Vec::len).sum();
        let fixed = stored.iter().filter(|m| (m[10] >> 1) & 3 == 1).count();
        let read = rate(objects.len(), 5, || {
            for (member, o) in stored.iter().zip(objects) {
                let mut out = vec![0; o.len()];
                // BTYPE of the first block: 1 is the fixed codes.
                let fixed = (member[10] >> 1) & 3 == 1;
                let inflate = if fixed { &mut inflate_fixed } else { &mut inflate };
                let n = inflate
                    .deflate_decompress(&member[10..member.len() - 8], &mut out)
                    .expect("inflate");
                assert_eq!(n, o.len());
                std::hint::black_box(blake3::hash(&out));
            }
        });
        println!(
            "| {name} | {read:.0} | {:.3} | {compress:.0} | {:.0}% |",
            bytes as f64 / raw as f64,
            fixed as f64 * 100.0 / stored.len() as f64
        );
    }
}

fn main() -> Result<()> {
    let objects = objstash_experiments::objects_of_file(std::env::args().nth(1))?;
    let mut encodings: Vec<(String, Encode)> = vec![
        ("libdeflate 1 (today)".into(), Box::new(|o| libdeflate(o, 1))),
        ("libdeflate 6".into(), Box::new(|o| libdeflate(o, 6))),
        ("zlib-rs 1, fixed codes".into(), Box::new(|o| zlib(o, 1, Strategy::Fixed))),
        ("zlib-rs 6, fixed codes".into(), Box::new(|o| zlib(o, 6, Strategy::Fixed))),
        ("zlib-rs 9, fixed codes".into(), Box::new(|o| zlib(o, 9, Strategy::Fixed))),
    ];
    // Either per object: the fixed codes where they cost at most `slack` more than
    // libdeflate's choice. Read with one decompressor for each kind of first block, so that
    // the fixed tables stay built in one of them.
    for slack in [0.05, 0.10, 0.20] {
        encodings.push((
            format!("either, fixed where within {:.0}% of libdeflate 1", slack * 100.0),
            Box::new(move |o| {
                let fixed = zlib(o, 1, Strategy::Fixed);
                let pick = |(d, f): (Vec<u8>, Vec<u8>)| {
                    if f.len() as f64 <= d.len() as f64 * (1.0 + slack) { f } else { d }
                };
                libdeflate(o, 1).into_iter().zip(fixed).map(pick).collect()
            }),
        ));
    }
    table(&objects, encodings);
    // Larger objects: generated ones glued `k` at a time, where the tables are built once
    // for more bytes.
    for k in [4, 16, 64] {
        let glued: Vec<Vec<u8>> = (0..40_000 / k)
            .map(|i| (0..k).flat_map(|j| speckle_gen::object(1, i * k + j)).collect())
            .collect();
        table(
            &glued,
            vec![
                ("libdeflate 1 (today)".into(), Box::new(|o| libdeflate(o, 1))),
                ("zlib-rs 1, fixed codes".into(), Box::new(|o| zlib(o, 1, Strategy::Fixed))),
            ],
        );
    }
    Ok(())
}
