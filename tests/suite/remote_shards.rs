//! Compacted indexes against a real S3-compatible server (SeaweedFS, started by each
//! test): a new machine of a compacted remote reads through in four requests, a model's
//! objects through the indexes of their packs, the rest of the remote untouched; pushes
//! and collections after a compaction; two compactions at once; a generation collected
//! under a reader.

use std::time::Duration;

use crate::common::TestResult;
use crate::common::s3::S3Server;
use crate::remote::open;
use objstash::{CollectOptions, Key, Stash, TrimOptions};

/// `count` generated objects from `first`, saved in `stash` in batches; their keys.
fn fill(stash: &Stash, seed: u64, first: u64, count: u64) -> objstash::Result<Vec<Key>> {
    fill_with(stash, count, |i| speckle_gen::object(seed, first + i))
}

/// `count` objects of a few dozen bytes each (`seed` makes them distinct from another
/// call's), saved in `stash` in batches; their keys. For the remote of a million objects:
/// what its indexes cost does not depend on the objects' sizes, and generating, gzipping
/// and uploading a million Speckle objects took half of that test's time.
fn fill_small(stash: &Stash, seed: u64, count: u64) -> objstash::Result<Vec<Key>> {
    fill_with(stash, count, |i| format!("{{\"seed\":{seed},\"i\":{i}}}").into_bytes())
}

/// `count` objects `object(0..count)`, saved in `stash` in batches of 10,000; their keys.
fn fill_with(
    stash: &Stash,
    count: u64,
    object: impl Fn(u64) -> Vec<u8>,
) -> objstash::Result<Vec<Key>> {
    let mut keys = Vec::with_capacity(count as usize);
    for from in (0..count).step_by(10_000) {
        let batch: Vec<Vec<u8>> = (from..count.min(from + 10_000)).map(&object).collect();
        keys.extend(stash.save_all(&batch)?);
    }
    Ok(keys)
}

/// Objects in the remote of the new-machine test (`OBJSTASH_TEST_SHARD_OBJECTS`).
fn remote_objects() -> u64 {
    std::env::var("OBJSTASH_TEST_SHARD_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

#[test]
fn a_new_machine_of_a_compacted_remote_reads_what_it_needs_and_no_more() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let count = remote_objects();
    // The remote: `count` objects, the last 20,000 of them a model pushed on its own.
    let a = open(dir.path(), "a.db", server.remote("shards"))?;
    let keys = fill_small(&a, 1, count - 20_000)?;
    a.remote().expect("a remote").push()?;
    let model = fill_small(&a, 2, 20_000)?;
    a.remote().expect("a remote").push()?;
    let whole = a.remote().expect("a remote").refresh()?;
    let compacted = a.remote().expect("a remote").compact()?;
    eprintln!("{compacted}");
    assert_eq!(compacted.entries, count, "{compacted}");
    a.close()?;

    // One object on a new machine: the manifest, a shard's header, a block, the object.
    let b = open(dir.path(), "b.db", server.remote("shards"))?;
    let tier = b.remote().expect("a remote");
    let key = keys[keys.len() / 3];
    assert!(b.get(&key)?.is_some());
    let (requests, index_bytes) = (tier.requests(), tier.index_bytes());
    eprintln!("first read-through: {requests} requests, {index_bytes} bytes of index");
    assert!(requests <= 4, "{requests} requests");
    assert!(index_bytes <= 1 << 20, "{index_bytes} bytes of index");
    // A key the remote does not hold: the filter says so, mostly without a block.
    assert_eq!(tier.missing(&[Key::of(b"nowhere")])?, vec![Key::of(b"nowhere")]);

    // A model's objects: through the indexes of its packs, a small part of the remote's.
    let before = tier.index_bytes();
    let got = b.get_many(&model)?;
    assert!(got.iter().all(Option::is_some), "a model object missing");
    let read = tier.index_bytes() - before;
    let all_indexes = whole.objects * 52;
    eprintln!("a model of 20,000 objects: {read} bytes of index of the remote's {all_indexes}");
    assert!(read * 20 < all_indexes, "{read} of {all_indexes} bytes of index");
    // The machine holds what it fetched, not the whole index.
    let status = tier.refresh()?;
    assert_eq!((status.objects, status.index_shards > 0), (count, true), "{status}");
    assert!(status.local_index_bytes * 4 < whole.local_index_bytes, "{status}");
    Ok(())
}

#[test]
fn pushes_after_a_compaction_and_collections_of_old_generations_are_seen() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = || server.remote("later").pack_size(64 << 10).clock_skew(Duration::ZERO);
    let a = open(dir.path(), "a.db", remote())?;
    let first = fill(&a, 3, 0, 5_000)?;
    a.remote().expect("a remote").push()?;
    a.remote().expect("a remote").compact()?;
    // A reader of the first generation, which has fetched nothing yet.
    let reader = open(dir.path(), "reader.db", remote())?;
    assert!(reader.get(&first[0])?.is_some());
    let puller = open(dir.path(), "puller.db", remote())?;
    assert!(puller.get(&first[1])?.is_some());
    // More objects pushed, then a second compaction, and the first generation collected.
    let second = fill(&a, 4, 0, 5_000)?;
    a.remote().expect("a remote").push()?;
    let again = a.remote().expect("a remote").compact()?;
    assert_eq!(again.entries, 10_000, "{again}");
    let swept =
        a.remote().expect("a remote").collect(&CollectOptions::default().grace(Duration::ZERO))?;
    eprintln!("{swept}");
    // The reader finds everything: its shards went, it reads the current ones; what was
    // pushed after its generation it lists from the log.
    let all: Vec<Key> = first.iter().chain(&second).copied().collect();
    let got = reader.get_many(&all)?;
    assert!(got.iter().all(Option::is_some));
    // A machine of the first generation pulls: it reads the current one whole.
    let pulled = puller.remote().expect("a remote").pull()?;
    assert!(pulled.is_complete(), "{pulled}");
    assert!(puller.missing(&all)?.is_empty());
    // A new machine of the second generation pulls everything.
    let c = open(dir.path(), "c.db", remote())?;
    let pulled = c.remote().expect("a remote").pull()?;
    assert!(pulled.is_complete() && pulled.objects == 10_000, "{pulled}");
    assert!(c.missing(&all)?.is_empty());
    Ok(())
}

#[test]
fn the_status_of_a_compacted_remote_leaves_out_packs_taken_out_since() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = || server.remote("status").pack_size(64 << 10).clock_skew(Duration::ZERO);
    let a = open(dir.path(), "a.db", remote())?;
    let keys = fill(&a, 5, 0, 5_000)?;
    let tier = a.remote().expect("a remote");
    tier.push()?;
    tier.compact()?;
    let reader = open(dir.path(), "reader.db", remote())?;
    let before = reader.remote().expect("a remote").refresh()?;
    assert!(before.index_shards > 0 && before.objects == 5_000, "{before}");
    // A trim to half the remote's size takes packs the compacted index covers out.
    let options = TrimOptions::default().max_size(before.bytes / 2).grace(Duration::ZERO);
    let trimmed = tier.trim(&options)?;
    assert!(trimmed.over_size > 0, "{trimmed}");
    // The trimming machine holds every index whole: its status is counted, not estimated.
    let exact = tier.refresh()?;
    assert_eq!(exact.index_shards, 0, "{exact}");
    assert!(exact.packs < before.packs, "{exact}");
    let after = reader.remote().expect("a remote").refresh()?;
    assert!(after.index_shards > 0, "{after}");
    assert_eq!((after.packs, after.bytes), (exact.packs, exact.bytes), "{after}\n{exact}");
    // Objects of the packs gone are estimated from their bytes.
    assert!(after.objects.abs_diff(exact.objects) <= 250, "{after}\n{exact}");
    let left = keys.len() - reader.remote().expect("a remote").missing(&keys)?.len();
    assert_eq!(left as u64, exact.objects);
    Ok(())
}

#[test]
fn two_compactions_at_once_leave_one_whole_generation() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let a = open(dir.path(), "a.db", server.remote("race").pack_size(64 << 10))?;
    let keys = fill(&a, 5, 0, 20_000)?;
    a.remote().expect("a remote").push()?;
    a.close()?;
    let compactions: Vec<_> = (0..2)
        .map(|i| {
            let db = dir.path().join(format!("c{i}.db"));
            let remote = server.remote("race");
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let stash = Stash::builder().remote(remote).open(db)?;
                // The lease keeps them apart: the second waits for the first.
                let deadline = std::time::Instant::now() + Duration::from_secs(120);
                loop {
                    match stash.remote().expect("a remote").compact() {
                        Err(e)
                            if e.to_string().contains("holds it")
                                && std::time::Instant::now() < deadline =>
                        {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        other => return Ok(other?.entries),
                    }
                }
            })
        })
        .collect();
    for c in compactions {
        assert_eq!(c.join().expect("a compaction panicked")?, 20_000);
    }
    let b = open(dir.path(), "b.db", server.remote("race"))?;
    let got = b.get_many(&keys)?;
    assert!(got.iter().all(Option::is_some));
    assert!(b.remote().expect("a remote").refresh()?.index_shards > 0);
    Ok(())
}
