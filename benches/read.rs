//! Read throughput with a warm cache: `get` of random keys, `get_many` of a batch against a
//! loop of `get` over the same keys, and `missing` over keys of which half are stored.
//!
//! `cargo bench --bench read`. Cold-cache reads are measured by `examples/cold_read.rs`,
//! which needs to drop the OS page cache between runs.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use objstash::{Codec, Key, Stash};

const STORED: usize = 200_000;
const BATCH: usize = 1_000;

/// A stash of [`STORED`] objects written with `codec`, and the keys the benchmarks read.
struct Fixture {
    _dir: tempfile::TempDir,
    stash: Stash,
    keys: Vec<Key>,
    /// [`BATCH`] keys in a fixed pseudo-random order, and the same keys sorted.
    random_keys: Vec<Key>,
    sorted: Vec<Key>,
}

fn fixture(codec: Codec) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let stash = Stash::builder().codec(codec).open(dir.path().join("read.db")).expect("open");
    let objects = speckle_gen::objects(9, 0, STORED);
    let keys = stash.save_all(&objects).expect("save_all");
    stash.flush().expect("flush");
    drop(objects);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let random_keys: Vec<Key> = (0..BATCH)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            keys[(x % STORED as u64) as usize]
        })
        .collect();
    let mut sorted = random_keys.clone();
    sorted.sort();
    Fixture { _dir: dir, stash, keys, random_keys, sorted }
}

fn read(c: &mut Criterion) {
    let Fixture { stash, keys, random_keys, sorted, .. } = &fixture(Codec::Gzip);

    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("get-random-1000", |b| {
        b.iter(|| {
            for key in random_keys {
                black_box(stash.get(key).expect("get").expect("stored"));
            }
        })
    });
    group.bench_function("get-loop-sorted-1000", |b| {
        b.iter(|| {
            for key in sorted {
                black_box(stash.get(key).expect("get").expect("stored"));
            }
        })
    });
    group.bench_function("get_many-sorted-1000", |b| {
        b.iter(|| black_box(stash.get_many(sorted).expect("get_many")))
    });

    let half: Vec<Key> = keys[..5_000]
        .iter()
        .copied()
        .chain((0..5_000u32).map(|i| Key::of(&i.to_le_bytes())))
        .collect();
    group.throughput(Throughput::Elements(half.len() as u64));
    group.bench_function("missing-10000-half-stored", |b| {
        b.iter(|| {
            let missing = stash.missing(&half).expect("missing");
            assert_eq!(missing.len(), 5_000);
        })
    });
    group.finish();
}

/// `get` and `get_many` of the same keys from a stash written with the zstd dictionary
/// codec, to set beside `read/get-random-1000` and `read/get_many-sorted-1000` (gzip).
/// Select it alone with `cargo bench --bench read -- zstd-dict`.
fn read_zstd(c: &mut Criterion) {
    let Fixture { stash, random_keys, sorted, .. } = &fixture(Codec::ZstdDict);
    let mut group = c.benchmark_group("read-zstd-dict");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("get-random-1000", |b| {
        b.iter(|| {
            for key in random_keys {
                black_box(stash.get(key).expect("get").expect("stored"));
            }
        })
    });
    group.bench_function("get_many-sorted-1000", |b| {
        b.iter(|| black_box(stash.get_many(sorted).expect("get_many")))
    });
    group.finish();
}

criterion_group!(benches, read, read_zstd);
criterion_main!(benches);
