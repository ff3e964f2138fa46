//! Crash tests of eviction: real processes killed by SIGKILL while a capped stash evicts,
//! shrinks its files (and compacts its file of values) and pins.
//!
//! The child (this test binary run again with `OBJSTASH_EVICTION_CHILD` set) saves batches
//! of objects into a stash with a small cap and no grace period, so the writer evicts all
//! the time; one batch in eight starts with a few objects saved pinned; every fifth batch halves the cap and the
//! next restores it (an eviction, then an incremental vacuum that shrinks the file); every
//! eleventh trims to half the cap. After each `flush` it appends the acknowledged
//! batch to a side file. The parent kills it at a random moment, opens the stash read-only
//! (reads would count as uses and change the order of eviction) and checks:
//! - `verify` passes: every row checks, and the recorded totals (objects, bytes, pins)
//!   equal a recount;
//! - every acknowledged pinned object is there, byte for byte;
//! - nothing is served wrong;
//! - no acknowledged object was lost that eviction did not take: nothing is read, so
//!   eviction takes objects in the order they were saved; once one acknowledged batch
//!   still has an unpinned object, every later batch must be whole; and with `E` objects
//!   evicted since creation, a batch with `E` unpinned objects saved before it is whole,
//!   and no more than `E` acknowledged objects are missing.
//!
//! The ignored `eviction_long` variant runs a hundred kills per mode and layout:
//! `cargo test --release --test suite -- --ignored crash_eviction::eviction_long`.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{TestResult, sibling, wait_until_open};
use objstash::{Durability, Key, Layout, Stash, Values};

const CHILD_ENV: &str = "OBJSTASH_EVICTION_CHILD";
/// Objects a batch holds; each batch is flushed.
const BATCH: u64 = 200;
/// Objects saved pinned at the start of one batch in eight: pins add up over the rounds,
/// and pins alone over the cap would leave nothing else to check.
const PINNED: u64 = 4;

fn object(index: u64) -> Vec<u8> {
    speckle_gen::object(53, index)
}

fn cap(layout: Layout, values: Values) -> u64 {
    // The bucketed layout's 256 empty tables and their indexes take about 4.3 MiB, 8.2 MiB
    // with their values in a file (the indexes of uses and places); a file of values keeps
    // a share of the cap for compaction (a segment of 1 MiB and a sixteenth).
    match (layout, values) {
        (Layout::Bucketed, Values::InFile) => 14 << 20,
        (Layout::Bucketed, _) => 8 << 20,
        (Layout::Single, Values::InFile) => 3 << 20,
        _ => 1 << 20,
    }
}

fn pinned_batch(start: u64) -> bool {
    (start / BATCH) % 8 == 3
}

/// The child's loop; does nothing unless started by a test here.
#[test]
#[ignore = "run as a child process by the eviction crash tests"]
fn eviction_child() -> TestResult {
    let Some(spec) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let spec = spec.into_string().map_err(|_| anyhow::anyhow!("spec is not UTF-8"))?;
    let [db, durability, layout, values, start] = spec.split('|').collect::<Vec<_>>()[..] else {
        anyhow::bail!("bad spec {spec}")
    };
    let db = PathBuf::from(db);
    let durability: Durability = durability.parse()?;
    let layout: Layout = layout.parse()?;
    let values: Values = values.parse()?;
    let mut i: u64 = start.parse()?;
    let cap = cap(layout, values);
    let stash = Stash::builder()
        .durability(durability)
        .layout(layout)
        .values(values)
        .max_size(cap)
        .eviction_grace(Duration::ZERO)
        .open(&db)?;
    let mut acked = OpenOptions::new().create(true).append(true).open(sibling(&db, ".acked"))?;
    writeln!(acked, "open")?;
    loop {
        let batch: Vec<Vec<u8>> = (i..i + BATCH).map(object).collect();
        if pinned_batch(i) {
            stash.save_pinned(&batch[..PINNED as usize])?;
            stash.save_all(&batch[PINNED as usize..])?;
        } else {
            stash.save_all(&batch)?;
        }
        stash.flush()?;
        writeln!(acked, "{i} {}", i + BATCH)?;
        let n = i / BATCH;
        if n.is_multiple_of(5) {
            stash.set_max_size(Some(cap / 2))?;
        } else if n % 5 == 1 {
            stash.set_max_size(Some(cap))?;
        }
        if n.is_multiple_of(11) {
            stash.trim_to(cap / 2)?;
        }
        // Batches are told apart by their use times.
        std::thread::sleep(Duration::from_millis(2));
        i += BATCH;
    }
}

fn spawn_child(
    db: &Path,
    durability: Durability,
    layout: Layout,
    values: Values,
    start: u64,
) -> std::io::Result<crate::common::Reaped> {
    let spec = format!("{}|{durability}|{layout}|{values}|{start}", db.display());
    crate::common::spawn_child("crash_eviction::eviction_child", CHILD_ENV, spec)
}

/// Waits until the child has acknowledged `batches` batches.
fn wait_until_acked(db: &Path, child: &mut std::process::Child, batches: usize) -> TestResult {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while acknowledged(db).len() < batches {
        anyhow::ensure!(child.try_wait()?.is_none(), "the child exited early");
        anyhow::ensure!(std::time::Instant::now() < deadline, "the child acknowledged too little");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// The batches the child saw acknowledged, by their first index, in order.
fn acknowledged(db: &Path) -> Vec<u64> {
    let text = fs::read_to_string(sibling(db, ".acked")).unwrap_or_default();
    text.lines().filter_map(|l| l.split(' ').next()?.parse().ok()).collect()
}

#[derive(Debug, Default)]
struct Tally {
    kills: u64,
    acked: u64,
    evicted: u64,
    /// Acknowledged unpinned objects gone, all of them taken by eviction.
    evicted_acked: u64,
    pinned: u64,
    /// Batches checked whole because an older one kept objects, over every round.
    checked: u64,
}

fn kill_loop(
    durability: Durability,
    layout: Layout,
    values: Values,
    kills: u64,
) -> anyhow::Result<Tally> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("evict.db");
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("eviction crash test seed {seed} (rerun with CRASH_SEED={seed})");
    let mut rng = seed;
    let mut below = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut tally = Tally::default();
    // Every acknowledged batch so far, in order, across children.
    let mut batches: Vec<u64> = Vec::new();
    for round in 0..kills {
        let _ = fs::remove_file(sibling(&db, ".acked"));
        let start = round * 10_000_000;
        let mut child = spawn_child(&db, durability, layout, values, start)?;
        wait_until_open(&db, &mut child)?;
        // The first child runs past its twelfth batch (its trim at the eleventh evicts in
        // either layout); the others past 1 to 6 batches. Then a random moment of the next.
        let run_past = if round == 0 { 12 } else { 1 + below(6) as usize };
        wait_until_acked(&db, &mut child, run_past)?;
        std::thread::sleep(Duration::from_millis(below(200)));
        child.kill()?;
        child.wait()?;
        tally.kills += 1;
        batches.extend(acknowledged(&db));

        let stash = Stash::builder().read_only(true).open(&db)?;
        let what = format!("{durability}/{layout}/{values} round {round}");
        let report = stash.verify()?;
        anyhow::ensure!(report.is_ok(), "{what}: {report}");
        let stats = stash.stats()?;
        tally.evicted = stats.evicted_objects;
        // Unpinned objects saved before each batch, in save order.
        let mut before = 0u64;
        tally.acked = 0;
        tally.evicted_acked = 0;
        tally.pinned = 0;
        // The first batch with an unpinned object still there: eviction takes rows in the
        // order they were saved (nothing is read), so every later batch must be whole.
        let mut kept_from: Option<u64> = None;
        for &start in &batches {
            let keys: Vec<Key> = (start..start + BATCH).map(|i| Key::of(&object(i))).collect();
            let values = stash.get_many(&keys)?;
            for (i, value) in values.iter().enumerate() {
                if let Some(value) = value {
                    anyhow::ensure!(value == &object(start + i as u64), "{what}: wrong bytes");
                }
            }
            tally.acked += BATCH;
            let pinned = if pinned_batch(start) { PINNED as usize } else { 0 };
            anyhow::ensure!(
                values[..pinned].iter().all(Option::is_some),
                "{what}: pinned objects of batch {start} lost"
            );
            tally.pinned += pinned as u64;
            let unpinned = &values[pinned..];
            let present = unpinned.iter().filter(|v| v.is_some()).count();
            let lost = (unpinned.len() - present) as u64;
            if let Some(first) = kept_from {
                anyhow::ensure!(
                    lost == 0,
                    "{what}: batch {start} lost {lost} objects while the older batch {first} \
                     kept some: eviction went out of order, or lost what it did not evict"
                );
                tally.checked += 1;
            } else if present > 0 {
                kept_from = Some(start);
            }
            anyhow::ensure!(
                lost == 0 || before < stats.evicted_objects,
                "{what}: batch {start} lost {lost} objects, but only {} objects were evicted \
                 and {before} older ones were there to go first",
                stats.evicted_objects
            );
            tally.evicted_acked += lost;
            before += unpinned.len() as u64;
        }
        anyhow::ensure!(
            tally.evicted_acked <= stats.evicted_objects,
            "{what}: {} acknowledged objects are missing, more than the {} evicted",
            tally.evicted_acked,
            stats.evicted_objects
        );
        anyhow::ensure!(stats.pinned_objects >= tally.pinned, "{what}: {stats}");
        stash.close()?;
    }
    Ok(tally)
}

/// The modes, layouts and places of values the crash tests run in.
fn every_kind() -> impl Iterator<Item = (Durability, Layout, Values)> {
    [Durability::Safe, Durability::Fast].into_iter().flat_map(|d| {
        [Layout::Single, Layout::Bucketed]
            .into_iter()
            .flat_map(move |l| [Values::InRows, Values::InFile].map(|v| (d, l, v)))
    })
}

#[test]
fn kills_while_evicting_and_shrinking_lose_nothing_but_what_eviction_took() -> TestResult {
    for (durability, layout, values) in every_kind() {
        let tally = kill_loop(durability, layout, values, 6)?;
        eprintln!("{durability}/{layout}/{values}: {tally:?}");
        anyhow::ensure!(tally.evicted > 0 && tally.checked > 0, "{tally:?}");
    }
    Ok(())
}

#[test]
#[ignore = "long: a hundred kills per mode, layout and place of values; run with --release"]
fn eviction_long() -> TestResult {
    for (durability, layout, values) in every_kind() {
        // Ten stashes of ten kills each: pins add up within one.
        for _ in 0..10 {
            let tally = kill_loop(durability, layout, values, 10)?;
            eprintln!("{durability}/{layout}/{values}: {tally:?}");
            anyhow::ensure!(tally.evicted > 0 && tally.checked > 0, "{tally:?}");
        }
    }
    Ok(())
}
