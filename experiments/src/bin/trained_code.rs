//! A deflate code trained per stash, read by a decoder that keeps its tables: what a gzip
//! `get` gains when its members share one dynamic code (its tables built once), and what the
//! file pays (every member still carries the code's header, and the code is the sample's
//! rather than each object's own). Beside it, the same decoder on libdeflate's members (its
//! tables built for each) and on members of the fixed codes (its tables kept, as
//! libdeflate keeps them), which sets this decoder's loop against libdeflate's.
//!
//! `cargo run --release -p objstash-experiments --bin trained_code -- [OBJECTS_FILE]`
//! (the peers benchmark's file of 4-byte lengths and objects; default: 50,000 generated
//! Speckle objects). The code is trained on the first 5,000 objects. One thread; a read is
//! an inflate into a new vector of the object's length, then blake3 of it; best of 7.

use anyhow::Result;
use objstash_experiments::inflate::Inflater;
use objstash_experiments::trained_code::TrainedCode;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Method, Strategy};

fn rate(count: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = std::time::Instant::now();
        f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    count as f64 / best
}

fn libdeflate(objects: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).expect("1"));
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

fn fixed(objects: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut state = Deflate::new_with_config(DeflateConfig {
        level: 1,
        method: Method::Deflated,
        window_bits: 15 + 16,
        mem_level: 8,
        strategy: Strategy::Fixed,
    });
    objects
        .iter()
        .map(|o| {
            state.reset();
            let mut out = vec![0; o.len() + 64];
            let before = state.total_out();
            state.compress(o, &mut out, DeflateFlush::Finish).expect("room");
            out.truncate((state.total_out() - before) as usize);
            out
        })
        .collect()
}

/// Each object with `code`, or libdeflate's member where the code cannot send it.
fn trained(objects: &[Vec<u8>], code: &TrainedCode, fallback: &[Vec<u8>]) -> Vec<Vec<u8>> {
    objects.iter().zip(fallback).map(|(o, f)| code.encode(o).unwrap_or_else(|| f.clone())).collect()
}

fn main() -> Result<()> {
    let objects = objstash_experiments::objects_of_file(std::env::args().nth(1))?;
    let raw: usize = objects.iter().map(Vec::len).sum();
    println!(
        "{} objects of {} B on average; one thread, best of 7",
        objects.len(),
        raw / objects.len()
    );
    let today = libdeflate(&objects);
    let mut encodings = vec![
        ("libdeflate 1 (today)".to_string(), today.clone()),
        ("zlib-rs 1, fixed codes".into(), fixed(&objects)),
    ];
    let sample = &objects[..5_000.min(objects.len())];
    for min_literal in [1, 4, 32] {
        let code = TrainedCode::train(sample, min_literal);
        let members = trained(&objects, &code, &today);
        let ours = rate(objects.len(), || {
            for o in &objects {
                std::hint::black_box(code.encode(o));
            }
        });
        let lib = rate(objects.len(), || {
            std::hint::black_box(libdeflate(&objects));
        });
        println!(
            "compress objects/s: trained {ours:.0}, libdeflate 1 {lib:.0} ({:.2}x)",
            ours / lib
        );
        let with = members.iter().zip(&today).filter(|(m, t)| m != t).count();
        encodings.push((
            format!(
                "trained, literals seen {min_literal}+ times (header {} B, {:.1}% of objects)",
                code.header_bytes(),
                with as f64 * 100.0 / objects.len() as f64
            ),
            members,
        ));
    }
    println!(
        "| encoding | stored / raw | libdeflate reads/s | ours reads/s | ours / libdeflate | ours: tables built, reused |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut base = None;
    for (name, members) in encodings {
        let bytes: usize = members.iter().map(Vec::len).sum();
        let mut ld = libdeflater::Decompressor::new();
        let mut ours = Inflater::default();
        for (m, o) in members.iter().zip(&objects) {
            let mut out = vec![0; o.len()];
            ld.gzip_decompress(m, &mut out).expect("a valid gzip member");
            assert_eq!(&out, o);
            out.fill(0);
            ours.inflate(&m[10..m.len() - 8], &mut out)?;
            assert_eq!(&out, o, "{name}");
        }
        let lib = rate(objects.len(), || {
            for (m, o) in members.iter().zip(&objects) {
                let mut out = vec![0; o.len()];
                ld.deflate_decompress(&m[10..m.len() - 8], &mut out).expect("inflate");
                std::hint::black_box(blake3::hash(&out));
            }
        });
        let mut ours = Inflater::default();
        let own = rate(objects.len(), || {
            for (m, o) in members.iter().zip(&objects) {
                let mut out = vec![0; o.len()];
                ours.inflate(&m[10..m.len() - 8], &mut out).expect("inflate");
                std::hint::black_box(blake3::hash(&out));
            }
        });
        let base = *base.get_or_insert(lib);
        println!(
            "| {name} | {:.3} | {lib:.0} ({:.2}x) | {own:.0} ({:.2}x) | {:.2}x | {}, {} |",
            bytes as f64 / raw as f64,
            lib / base,
            own / base,
            own / lib,
            ours.built,
            ours.reused
        );
    }
    Ok(())
}
