//! Zstd dictionaries trained by one process, read by another that opened the stash first.
//!
//! The bug: a handle read the stash's dictionaries once, when it opened. One process saved
//! Speckle objects into a new zstd-dict stash while a second, opened once the stash
//! existed, read back what the first acknowledged; once the first trained its dictionary
//! and compressed with it, every read of the second failed with "object ... is corrupt
//! (zstd frame names dictionary ..., which this stash lacks); remove it and save it again",
//! and never recovered, while `verify` from a fresh open found every object sound. A read
//! that meets a dictionary id it does not know now looks for it in the database, and only
//! an id the database does not hold either is damage.
//!
//! The writers here are real child processes (this test binary run again), killed with
//! SIGKILL at moments chosen from what they report, never from a sleep.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{LAYOUTS, MODES, TestResult, sibling};
use objstash::{Codec, Durability, Key, Layout, Stash};

const CHILD_ENV: &str = "OBJSTASH_DICT_CHILD";
/// Objects a writer saves per call.
const CHUNK: u64 = 200;
/// Bytes of objects sampled to train the first dictionary: a few chunks' worth.
const SAMPLE: usize = 96 << 10;

fn object(index: u64) -> Vec<u8> {
    speckle_gen::object(53, index)
}

fn open(db: &Path, durability: Durability, layout: Layout) -> objstash::Result<Stash> {
    Stash::builder()
        .codec(Codec::ZstdDict)
        .dictionary_sample(SAMPLE)
        .durability(durability)
        .layout(layout)
        .open(db)
}

/// A writer, as `DB|DURABILITY|LAYOUT|START|RETRAIN_AT|END|FLUSH_EVERY`: saves objects
/// `START..END` in chunks, appending `saved A B` to `<db>.events` once each save returned,
/// and flushes every `FLUSH_EVERY` chunks (0: only when it closes), appending `acked A B`
/// for what the flush covered once it returned. It calls `train()` once it has saved up to
/// `RETRAIN_AT` (`trained ID`), writes `trained-auto` after the save that filled the first
/// dictionary's sample, and `done` when it is through.
#[test]
#[ignore = "run as a child process by the shared dictionary tests"]
fn dictionary_child() -> TestResult {
    let Some(spec) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let spec = spec.into_string().map_err(|_| anyhow::anyhow!("spec is not UTF-8"))?;
    let parts: Vec<&str> = spec.split('|').collect();
    let [db, durability, layout, start, retrain_at, end, flush_every] = parts[..] else {
        anyhow::bail!("bad spec {spec}")
    };
    let db = PathBuf::from(db);
    let (start, retrain_at, end, flush_every): (u64, u64, u64, u64) =
        (start.parse()?, retrain_at.parse()?, end.parse()?, flush_every.parse()?);
    let stash = open(&db, durability.parse()?, layout.parse()?)?;
    let mut events = OpenOptions::new().create(true).append(true).open(sibling(&db, ".events"))?;
    writeln!(events, "open")?;
    let mut sampled = 0usize;
    let mut unflushed = start;
    let mut i = start;
    while i < end {
        if i == retrain_at {
            let id = stash.train()?;
            writeln!(events, "trained {id}")?;
        }
        let batch: Vec<Vec<u8>> = (i..i + CHUNK).map(object).collect();
        stash.save_all(&batch)?;
        i += CHUNK;
        writeln!(events, "saved {} {i}", i - CHUNK)?;
        let before = sampled;
        sampled += batch.iter().map(Vec::len).sum::<usize>();
        if before < SAMPLE && sampled >= SAMPLE {
            writeln!(events, "trained-auto")?;
        }
        if i == end || (flush_every > 0 && ((i - start) / CHUNK).is_multiple_of(flush_every)) {
            stash.flush()?;
            writeln!(events, "acked {unflushed} {i}")?;
            unflushed = i;
        }
    }
    stash.close()?;
    writeln!(events, "done")?;
    Ok(())
}

struct Writer {
    durability: Durability,
    layout: Layout,
    start: u64,
    retrain_at: u64,
    end: u64,
    flush_every: u64,
}

impl Writer {
    fn spawn(&self, db: &Path) -> std::io::Result<crate::common::Reaped> {
        let spec = format!(
            "{}|{}|{}|{}|{}|{}|{}",
            db.display(),
            self.durability,
            self.layout,
            self.start,
            self.retrain_at,
            self.end,
            self.flush_every
        );
        crate::common::spawn_child("shared_dictionaries::dictionary_child", CHILD_ENV, spec)
    }
}

/// The lines the writers of `db` have written so far.
fn events(db: &Path) -> Vec<String> {
    fs::read_to_string(sibling(db, ".events"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until the writer has written at least `count` lines that start with `prefix`.
fn wait_for(db: &Path, child: &mut Child, prefix: &str, count: usize) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(120);
    while events(db).iter().filter(|line| line.starts_with(prefix)).count() < count {
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(
                events(db).iter().filter(|line| line.starts_with(prefix)).count() >= count,
                "the writer exited with {status} before writing {count} `{prefix}` lines"
            );
        }
        anyhow::ensure!(Instant::now() < deadline, "the writer never wrote `{prefix}`");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Every object in the ranges of the lines that start with `prefix`.
fn ranges(db: &Path, prefix: &str) -> Vec<u64> {
    events(db)
        .iter()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            Some((words.next()?.parse::<u64>().ok()?, words.next()?.parse::<u64>().ok()?))
        })
        .flat_map(|(a, b)| a..b)
        .collect()
}

/// Reads `indexes` through `stash`, by `get_many` and one by one: each object is there with
/// its bytes (`present`), or there with its bytes or absent (not `present`); never an error.
fn read_back(stash: &Stash, indexes: &[u64], present: bool, what: &str) -> TestResult {
    let keys: Vec<Key> = indexes.iter().map(|&i| Key::of(&object(i))).collect();
    for (chunk, idx) in keys.chunks(500).zip(indexes.chunks(500)) {
        let found = stash.get_many(chunk).map_err(|e| anyhow::anyhow!("{what}: get_many: {e}"))?;
        for ((value, &i), key) in found.iter().zip(idx).zip(chunk) {
            match value {
                Some(value) => anyhow::ensure!(*value == object(i), "{what}: wrong bytes for {i}"),
                None => anyhow::ensure!(!present, "{what}: acknowledged object {i} ({key}) absent"),
            }
        }
    }
    for (&i, key) in indexes.iter().zip(&keys).step_by(97) {
        let value = stash.get(key).map_err(|e| anyhow::anyhow!("{what}: get {i}: {e}"))?;
        anyhow::ensure!(!present || value.is_some(), "{what}: get {i} found nothing");
    }
    Ok(())
}

/// A reader opened on a new zstd-dict stash before any dictionary exists reads everything
/// a second process saves afterwards: rows of the dictionary that process trained from its
/// first objects, and of the one its `train()` made later; in both modes and layouts.
#[test]
fn a_reader_opened_first_reads_every_dictionary_another_process_trains() -> TestResult {
    for durability in MODES {
        for layout in LAYOUTS {
            let dir = tempfile::tempdir()?;
            let db = dir.path().join("dicts.db");
            let reader = open(&db, durability, layout)?;
            let writer = Writer {
                durability,
                layout,
                start: 0,
                retrain_at: 2_000,
                end: 3_000,
                flush_every: 1,
            };
            let mut child = writer.spawn(&db)?;
            wait_for(&db, &mut child, "done", 1)?;
            anyhow::ensure!(child.wait()?.success(), "the writer failed");
            let what = format!("{durability} {layout}");
            anyhow::ensure!(
                events(&db).iter().any(|line| line == "trained-auto"),
                "{what}: the sample never filled"
            );
            let acked = ranges(&db, "acked ");
            anyhow::ensure!(acked.len() == 3_000, "{what}: {} acknowledged", acked.len());
            read_back(&reader, &acked, true, &what)?;
            let stats = reader.stats()?;
            anyhow::ensure!(stats.dictionaries == 2, "{what}: {} dictionaries", stats.dictionaries);
            let report = reader.verify()?;
            anyhow::ensure!(report.is_ok(), "{what}: {report}");
            reader.close()?;
        }
    }
    Ok(())
}

/// The writer is SIGKILLed between training a dictionary (the first, then a retrained one)
/// and the commits that follow, at a moment taken from its own reports; whatever reached
/// the database is readable by the reader that opened before either dictionary existed,
/// and by a fresh open: no row is ever committed before its dictionary. A last writer
/// then saves with the newest dictionary that was committed, and the reader reads that too.
#[test]
fn a_writer_killed_after_training_leaves_no_row_without_its_dictionary() -> TestResult {
    let mut rng =
        std::env::var("DICT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
        });
    eprintln!("seed {rng} (rerun with DICT_SEED={rng})");
    for durability in MODES {
        for layout in LAYOUTS {
            let dir = tempfile::tempdir()?;
            let db = dir.path().join("killed.db");
            let reader = open(&db, durability, layout)?;
            let what = format!("{durability} {layout}");
            let (mut saved, mut acked) = (Vec::new(), Vec::new());
            for (round, start) in [(0u64, 0u64), (1, 100_000)] {
                // Round 0 trains from its first objects; round 1 retrains once its first two
                // chunks are flushed (round 0 may have been killed before anything was
                // committed, and a dictionary needs objects to train on). Both flush every
                // second chunk.
                let retrain_at = if round == 0 { u64::MAX } else { start + 2 * CHUNK };
                let end = start + 50 * CHUNK;
                let writer = Writer { durability, layout, start, retrain_at, end, flush_every: 2 };
                let _ = fs::remove_file(sibling(&db, ".events"));
                let mut child = writer.spawn(&db)?;
                let marker = if round == 0 { "trained-auto" } else { "trained " };
                wait_for(&db, &mut child, marker, 1)?;
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Kill after 0 to 4 more chunks saved with the new dictionary.
                let more = (rng % 5) as usize;
                let before = events(&db).iter().filter(|l| l.starts_with("saved")).count();
                wait_for(&db, &mut child, "saved", before + more)?;
                child.kill()?;
                child.wait()?;
                saved.extend(ranges(&db, "saved "));
                acked.extend(ranges(&db, "acked "));
                let round = format!("{what} round {round}");
                read_back(&reader, &saved, false, &round)?;
                read_back(&reader, &acked, true, &round)?;
            }
            let last = Writer {
                durability,
                layout,
                start: 200_000,
                retrain_at: u64::MAX,
                end: 200_000 + 3 * CHUNK,
                flush_every: 1,
            };
            let _ = fs::remove_file(sibling(&db, ".events"));
            let mut child = last.spawn(&db)?;
            wait_for(&db, &mut child, "done", 1)?;
            anyhow::ensure!(child.wait()?.success(), "{what}: the last writer failed");
            let fresh_rows = ranges(&db, "acked ");
            read_back(&reader, &fresh_rows, true, &format!("{what} last writer"))?;
            let report = reader.verify()?;
            anyhow::ensure!(report.is_ok(), "{what}: {report}");
            reader.close()?;
            let fresh = open(&db, durability, layout)?;
            read_back(&fresh, &saved, false, &format!("{what} reopened"))?;
            read_back(&fresh, &acked, true, &format!("{what} reopened"))?;
            let report = fresh.verify()?;
            anyhow::ensure!(report.is_ok(), "{what} reopened: {report}");
            fresh.close()?;
        }
    }
    Ok(())
}
