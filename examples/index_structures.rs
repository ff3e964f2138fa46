//! An experiment behind a design decision (notes/performance.md, "the single layout's
//! curve"): how fast SQLite takes rows with random 32-byte keys as the store grows, with
//! the key index the stash uses today against a staged key index.
//!
//! `cargo run --release --example index_structures -- --structure indexed|staged
//!  [--steps 5] [--step 1000000]`
//!
//! Only SQLite is timed: rows are 626-byte blobs (the mean stored size of the generated
//! objects) under blake3 keys, made before the clock starts, with the stash's fast-mode
//! pragmas (8 KiB pages, `journal_mode=MEMORY`, `synchronous=OFF`, 16 MiB cache).
//! - `indexed`: what the single layout does. One rowid table with a unique index on the
//!   key; batches sorted by key, capped so the index pages they are expected to change fit
//!   a 32 MiB journal.
//! - `staged`: the rowid table has no index. Keys go to a small `stage` table (key ->
//!   rowid, `WITHOUT ROWID`) that fits the page cache; when it holds `--stage` keys they are
//!   merged into the large `keys` table in key order, one key range per transaction, each
//!   range sized to the same 32 MiB journal budget. Every row is still checked against
//!   both key tables before it is written, as the writer's `INSERT OR IGNORE` does.
//!
//! Prints the rate of each step, the file size and the process's peak memory.

use std::time::Instant;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use rusqlite::{Connection, params};

#[path = "common/mod.rs"]
mod common;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Structure {
    Indexed,
    Staged,
}

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum)]
    structure: Structure,
    /// Steps to run.
    #[arg(long, default_value_t = 5)]
    steps: u64,
    /// Rows per step.
    #[arg(long, default_value_t = 1_000_000)]
    step: u64,
    /// Keys the stage holds before they are merged (staged only).
    #[arg(long, default_value_t = 262_144)]
    stage: u64,
    /// Rows per transaction of the staged structure.
    #[arg(long, default_value_t = 16_384)]
    batch: usize,
}

const PAGE: f64 = 8192.0;
const JOURNAL_BUDGET_PAGES: f64 = 32.0 * 1024.0 * 1024.0 / PAGE;
/// Bytes per key-index entry and how full random-insert pages are, as in src/writer.rs
/// (the indexed structure uses the writer's own row bound).
const ENTRY: f64 = 48.0;
const FILL: f64 = 0.7;
const VALUE_BYTES: usize = 626;

fn pages_of(keys: u64) -> f64 {
    keys as f64 * ENTRY / (PAGE * FILL) + 1.0
}

fn key(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let conn = Connection::open(dir.path().join("x.db"))?;
    conn.execute_batch(
        "PRAGMA page_size = 8192; PRAGMA journal_mode = MEMORY; PRAGMA synchronous = OFF;
         PRAGMA cache_size = -16384;
         CREATE TABLE objects(rowid INTEGER PRIMARY KEY, key BLOB NOT NULL,
                              raw_len INTEGER NOT NULL, data BLOB NOT NULL);",
    )?;
    match args.structure {
        Structure::Indexed => {
            conn.execute_batch("CREATE UNIQUE INDEX objects_key ON objects(key);")?
        }
        Structure::Staged => conn.execute_batch(
            "CREATE TABLE keys(key BLOB PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;
             CREATE TABLE stage(key BLOB PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;",
        )?,
    }
    let values: Vec<Vec<u8>> = (0..256u64)
        .map(|i| {
            let mut reader = blake3::Hasher::new().update(&i.to_le_bytes()).finalize_xof();
            let mut v = vec![0u8; VALUE_BYTES];
            reader.fill(&mut v);
            v
        })
        .collect();
    println!("| structure | step | rows | step rate (rows/s) | file (MB) | peak memory (MB) |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut stored = 0u64;
    let mut staged = 0u64;
    for step in 1..=args.steps {
        let keys: Vec<[u8; 32]> = (stored..stored + args.step).map(key).collect();
        let start = Instant::now();
        let mut next = 0;
        while next < keys.len() {
            let rows = match args.structure {
                Structure::Indexed => objstash::bench::journal_bounded_rows(100_000, stored, 8192),
                Structure::Staged => args.batch,
            };
            let end = (next + rows).min(keys.len());
            let mut batch: Vec<(usize, &[u8; 32])> = (next..end).map(|i| (i, &keys[i])).collect();
            batch.sort_unstable_by_key(|(_, k)| **k);
            let tx = conn.unchecked_transaction()?;
            match args.structure {
                Structure::Indexed => {
                    let mut insert = tx.prepare_cached(
                        "INSERT OR IGNORE INTO objects(key, raw_len, data) VALUES (?1, ?2, ?3)",
                    )?;
                    for (i, k) in &batch {
                        insert.execute(params![&k[..], 1255, &values[i % 256]])?;
                    }
                }
                Structure::Staged => {
                    let mut known = tx.prepare_cached(
                        "SELECT 1 FROM stage WHERE key = ?1 UNION ALL SELECT 1 FROM keys WHERE key = ?1",
                    )?;
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO objects(key, raw_len, data) VALUES (?1, ?2, ?3)",
                    )?;
                    let mut stage =
                        tx.prepare_cached("INSERT INTO stage(key, id) VALUES (?1, ?2)")?;
                    for (i, k) in &batch {
                        if known.exists([&k[..]])? {
                            continue;
                        }
                        insert.execute(params![&k[..], 1255, &values[i % 256]])?;
                        stage.execute(params![&k[..], tx.last_insert_rowid()])?;
                    }
                }
            }
            tx.commit()?;
            stored += (end - next) as u64;
            if let Structure::Staged = args.structure {
                staged += (end - next) as u64;
                if staged >= args.stage {
                    merge(&conn, stored - staged)?;
                    staged = 0;
                }
            }
            next = end;
        }
        let rate = args.step as f64 / start.elapsed().as_secs_f64();
        let file = std::fs::metadata(dir.path().join("x.db"))?.len() as f64 / 1e6;
        let peak = common::peak_memory().map_or(0.0, |b| b as f64 / 1e6);
        println!(
            "| {:?} | {step} | {stored} | {rate:.0} | {file:.0} | {peak:.0} |",
            args.structure
        );
    }
    Ok(())
}

/// Moves every staged key into `keys` (which holds `merged` keys) in key order, one key
/// range per transaction, each range expected to change at most the journal budget of
/// `keys` pages.
fn merge(conn: &Connection, merged: u64) -> Result<()> {
    let ranges = (pages_of(merged) / JOURNAL_BUDGET_PAGES).ceil().clamp(1.0, 65_536.0) as u32;
    for r in 0..ranges {
        let lo = bound(r, ranges);
        let hi = bound(r + 1, ranges);
        let tx = conn.unchecked_transaction()?;
        match &hi {
            Some(hi) => {
                tx.execute(
                    "INSERT INTO keys SELECT key, id FROM stage WHERE key >= ?1 AND key < ?2",
                    params![&lo, hi],
                )?;
                tx.execute("DELETE FROM stage WHERE key >= ?1 AND key < ?2", params![&lo, hi])?;
            }
            None => {
                tx.execute("INSERT INTO keys SELECT key, id FROM stage WHERE key >= ?1", [&lo])?;
                tx.execute("DELETE FROM stage WHERE key >= ?1", [&lo])?;
            }
        }
        tx.commit()?;
    }
    Ok(())
}

/// The lower bound of range `r` of `n` equal ranges of the key space (2-byte prefixes);
/// `None` past the last.
fn bound(r: u32, n: u32) -> Option<Vec<u8>> {
    if r >= n {
        return None;
    }
    let prefix = (u64::from(r) * 65_536 / u64::from(n)) as u16;
    Some(prefix.to_be_bytes().to_vec())
}
