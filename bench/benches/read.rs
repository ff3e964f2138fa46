//! Read throughput with a warm cache: `get` of random keys, `get_many` of a batch against a
//! loop of `get` over the same keys, and `missing` over keys of which half are stored.
//!
//! `cargo bench -p objstash-bench --bench read`. Cold-cache reads are measured by `examples/cold_read.rs`,
//! which needs to drop the OS page cache between runs.
//!
//! The `read-1m` group reads a stash of a million objects (the target size), each
//! iteration 1,000 keys further along a list of 100,000 random keys, so that the figure is
//! not that of a hot set. Its fixture takes about half a minute to write and is only built
//! when the group is selected: `cargo bench -p objstash-bench --bench read -- read-1m`.

use std::hint::black_box;
use std::sync::OnceLock;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use objstash::{Codec, Key, Stash};

const STORED: usize = 200_000;
const BATCH: usize = 1_000;
/// Objects in the stash of the `read-1m` group, and random keys its iterations walk.
const STORED_1M: u64 = 1_000_000;
const WALK_1M: usize = 100_000;

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
/// Select it alone with `cargo bench -p objstash-bench --bench read -- zstd-dict`.
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

/// A stash of [`STORED_1M`] objects and [`WALK_1M`] random keys of it.
struct Million {
    _dir: tempfile::TempDir,
    stash: Stash,
    keys: Vec<Key>,
}

fn million() -> Million {
    let dir = tempfile::tempdir().expect("tempdir");
    let stash = Stash::open(dir.path().join("read-1m.db")).expect("open");
    for start in (0..STORED_1M).step_by(100_000) {
        stash.save_all(&speckle_gen::objects(11, start, 100_000)).expect("save_all");
    }
    stash.flush().expect("flush");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let keys = (0..WALK_1M)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Key::of(&speckle_gen::object(11, x % STORED_1M))
        })
        .collect();
    Million { _dir: dir, stash, keys }
}

/// `get` and `get_many` at a million objects, with the OS page cache warm.
fn read_1m(c: &mut Criterion) {
    let fixture = OnceLock::new();
    let walk = |b: &mut criterion::Bencher, many: bool| {
        let Million { stash, keys, .. } = fixture.get_or_init(million);
        let mut batches = keys.chunks(BATCH).cycle();
        b.iter(|| {
            let batch = batches.next().expect("cycle of a non-empty list");
            if many {
                let found = stash.get_many(batch).expect("get_many");
                assert!(found.iter().all(Option::is_some));
            } else {
                for key in batch {
                    black_box(stash.get(key).expect("get").expect("stored"));
                }
            }
        })
    };
    let mut group = c.benchmark_group("read-1m");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("get-random-1000", |b| walk(b, false));
    group.bench_function("get_many-random-1000", |b| walk(b, true));
    group.finish();
}

criterion_group!(benches, read, read_zstd, read_1m);
criterion_main!(benches);
