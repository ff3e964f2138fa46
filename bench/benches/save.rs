//! Save throughput, in objects per second, beside its baselines in the same run:
//! hashing and compressing alone, the same pipeline (rayon producers, bounded channel, one
//! consumer thread) into an in-memory map, and the stash in each layout; also the single
//! layout with the zstd dictionary codec (`-- zstd-dict` selects it).
//!
//! `cargo bench -p objstash-bench --bench save`

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use objstash::{Codec, Key, Layout, Stash};
use rayon::prelude::*;

const LEVEL: u32 = 2;
const SIZES: [usize; 5] = [10, 100, 1_000, 10_000, 100_000];

thread_local! {
    static DEFLATE: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(flate2::Compression::new(LEVEL), false));
}

/// A gzip member of `raw` as the stash makes one: a reused deflate state per thread, the
/// 10-byte header and 8-byte trailer around the raw deflate stream.
fn gzip(raw: &[u8]) -> Vec<u8> {
    DEFLATE.with(|cell| {
        let mut deflate = cell.borrow_mut();
        deflate.reset();
        let mut out = Vec::with_capacity(raw.len() + 64);
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
        deflate
            .compress_vec(raw, &mut out, flate2::FlushCompress::Finish)
            .expect("deflate of a buffer with room to spare");
        let mut crc = flate2::Crc::new();
        crc.update(raw);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out
    })
}

/// Hash and compress in parallel, no store.
fn hash_and_compress(objects: &[Vec<u8>]) -> usize {
    objects
        .par_iter()
        .map(|o| {
            let key = Key::of(o);
            black_box(key);
            gzip(o).len()
        })
        .sum()
}

/// The stash's pipeline with a `HashMap` in place of SQLite.
fn pipeline_into_map(objects: &[Vec<u8>]) -> usize {
    let (tx, rx) = crossbeam_channel::bounded::<(Key, Vec<u8>)>(4_096);
    let consumer = std::thread::spawn(move || {
        let mut map = HashMap::new();
        for (key, value) in rx {
            map.insert(key, value);
        }
        map.len()
    });
    objects.par_iter().for_each_with(tx, |tx, o| {
        let key = Key::of(o);
        tx.send((key, gzip(o))).expect("consumer alive");
    });
    consumer.join().expect("consumer does not panic")
}

/// Total time of `iters` saves of `objects`, each into a new stash that `open` makes at a
/// path in a new directory, waiting for the commit. Opening (with whatever `open` does
/// first) and closing are outside the timing.
fn time_fresh_saves(iters: u64, objects: &[Vec<u8>], open: impl Fn(&Path) -> Stash) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let dir = tempfile::tempdir().expect("tempdir");
        let stash = open(&dir.path().join("b.db"));
        let start = Instant::now();
        stash.save_all(objects).expect("save_all");
        stash.flush().expect("flush");
        total += start.elapsed();
        stash.close().expect("close");
    }
    total
}

fn save(c: &mut Criterion) {
    let all = speckle_gen::objects(7, 0, *SIZES.last().expect("sizes"));
    let training = speckle_gen::objects(99, 0, 4_000);
    let mut group = c.benchmark_group("save");
    group.sample_size(10).warm_up_time(Duration::from_secs(1));
    for n in SIZES {
        let objects = &all[..n];
        group.throughput(Throughput::Elements(n as u64));
        group.measurement_time(Duration::from_secs(if n >= 100_000 { 30 } else { 5 }));
        group.bench_with_input(BenchmarkId::new("hash+compress", n), objects, |b, o| {
            b.iter(|| hash_and_compress(o))
        });
        group.bench_with_input(BenchmarkId::new("pipeline-to-map", n), objects, |b, o| {
            b.iter(|| pipeline_into_map(o))
        });
        for layout in [Layout::Single, Layout::Bucketed] {
            let name = format!("stash-{layout}");
            group.bench_with_input(BenchmarkId::new(name, n), objects, |b, o| {
                b.iter_custom(|iters| {
                    time_fresh_saves(iters, o, |path| {
                        Stash::builder().layout(layout).open(path).expect("open")
                    })
                })
            });
        }
        // The zstd dictionary codec in steady state: each new stash first trains its
        // dictionary on 4,000 objects of another model (untimed). Select it alone with
        // `cargo bench --bench save -- zstd-dict`.
        group.bench_with_input(BenchmarkId::new("stash-single-zstd-dict", n), objects, |b, o| {
            b.iter_custom(|iters| {
                time_fresh_saves(iters, o, |path| {
                    let stash = Stash::builder().codec(Codec::ZstdDict).open(path).expect("open");
                    stash.save_all(&training).expect("training objects");
                    stash.flush().expect("flush");
                    stash
                })
            })
        });
    }
    group.finish();
}

/// Saving objects that are all stored already, against saving them the first time.
fn resave(c: &mut Criterion) {
    let n = 100_000;
    let objects = speckle_gen::objects(8, 0, n);
    let dir = tempfile::tempdir().expect("tempdir");
    let stash = Stash::open(dir.path().join("r.db")).expect("open");
    stash.save_all(&objects).expect("first save");
    stash.flush().expect("flush");
    let mut group = c.benchmark_group("resave");
    group.sample_size(10).throughput(Throughput::Elements(n as u64));
    group.bench_function("already-stored-100000", |b| {
        b.iter(|| stash.save_all(&objects).expect("save_all"))
    });
    group.bench_function("first-save-100000", |b| {
        b.iter_custom(|iters| {
            time_fresh_saves(iters, &objects, |path| Stash::open(path).expect("open"))
        })
    });
    group.finish();
}

criterion_group!(benches, save, resave);
criterion_main!(benches);
