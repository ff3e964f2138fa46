//! Measures the SQLite schema and pragma choices behind objstash's storage, one factor at a
//! time against a base configuration, on generated Speckle objects that are hashed and
//! gzipped before the clock starts (so only the store is timed).
//!
//! `cargo run --release -p objstash-experiments --bin schema_matrix -- [ROWS]` (default 500000).
//! Prints rows/s over the whole run and over its first and last tenth, so a collapse as
//! the table grows shows up as a last/first ratio well below 1.

use std::time::Instant;

use anyhow::Result;
use rayon::prelude::*;
use rusqlite::{Connection, params};

#[derive(Clone, Copy, Debug)]
struct Config {
    without_rowid: bool,
    page_size: u32,
    cache_mib: u32,
    batch: usize,
    sorted: bool,
    /// Write-ahead log (objstash's journal in both modes) instead of an in-memory journal.
    wal: bool,
    /// objstash's own table: a `used` column and its index, incremental auto-vacuum and
    /// secure delete.
    objstash_table: bool,
}

const BASE: Config = Config {
    without_rowid: false,
    page_size: 4096,
    cache_mib: 64,
    batch: 10_000,
    sorted: true,
    wal: false,
    objstash_table: false,
};

fn main() -> Result<()> {
    let rows: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(500_000);
    let only = std::env::args().nth(2).unwrap_or_default();
    eprintln!("preparing {rows} hashed and gzipped objects");
    let data: Vec<([u8; 32], Vec<u8>, usize)> = (0..rows as u64)
        .into_par_iter()
        .map(|i| {
            let raw = speckle_gen::object(1, i);
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            std::io::Write::write_all(&mut enc, &raw).expect("in-memory write");
            (*blake3::hash(&raw).as_bytes(), enc.finish().expect("in-memory gzip"), raw.len())
        })
        .collect();
    let stored: usize = data.iter().map(|d| d.1.len()).sum();
    println!("rows {rows}, mean stored row {} bytes", stored / rows);

    let mut configs = vec![("base: rowid + unique index", BASE)];
    configs.push(("WITHOUT ROWID", Config { without_rowid: true, ..BASE }));
    configs.push(("page_size 8192", Config { page_size: 8192, ..BASE }));
    configs.push(("page_size 16384", Config { page_size: 16384, ..BASE }));
    configs.push(("cache 2 MiB (SQLite default)", Config { cache_mib: 2, ..BASE }));
    configs.push(("cache 256 MiB", Config { cache_mib: 256, ..BASE }));
    configs.push(("batch 1000", Config { batch: 1_000, ..BASE }));
    configs.push(("batch 100000", Config { batch: 100_000, ..BASE }));
    configs.push(("unsorted batches", Config { sorted: false, ..BASE }));
    configs
        .push(("batch 100000, page_size 8192", Config { batch: 100_000, page_size: 8192, ..BASE }));
    configs
        .push(("batch 100000, cache 256 MiB", Config { batch: 100_000, cache_mib: 256, ..BASE }));
    configs.push(("batch 100000, unsorted", Config { batch: 100_000, sorted: false, ..BASE }));

    let chosen = Config { batch: 100_000, page_size: 8192, ..BASE };
    configs.push(("batch 100000, page_size 8192, WAL", Config { wal: true, ..chosen }));
    configs.push((
        "batch 100000, page_size 8192, WAL, objstash's table",
        Config { wal: true, objstash_table: true, ..chosen },
    ));
    configs.push((
        "batch 100000, page_size 8192, WAL, objstash's table, cache 16 MiB",
        Config { wal: true, objstash_table: true, cache_mib: 16, ..chosen },
    ));
    configs.retain(|(name, _)| name.contains(only.as_str()));
    println!(
        "| configuration | rows/s | first 10% rows/s | last 10% rows/s | last/first | file MB |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, config) in configs {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("m.db");
        let (total, first, last) = run(&path, config, &data)?;
        let size = std::fs::metadata(&path)?.len() as f64 / 1e6;
        println!(
            "| {name} | {total:.0} | {first:.0} | {last:.0} | {:.2} | {size:.0} |",
            last / first
        );
    }
    Ok(())
}

fn run(
    path: &std::path::Path,
    c: Config,
    data: &[([u8; 32], Vec<u8>, usize)],
) -> Result<(f64, f64, f64)> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", c.page_size)?;
    if c.objstash_table {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.pragma_update(None, "secure_delete", "ON")?;
    }
    conn.pragma_update(None, "journal_mode", if c.wal { "WAL" } else { "MEMORY" })?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -(i64::from(c.cache_mib) * 1024))?;
    if c.objstash_table {
        conn.execute_batch(
            "CREATE TABLE objects(rowid INTEGER PRIMARY KEY, key BLOB NOT NULL, \
             raw_len INTEGER NOT NULL, data BLOB NOT NULL, used INTEGER NOT NULL); \
             CREATE UNIQUE INDEX objects_key ON objects(key); \
             CREATE INDEX objects_used ON objects(used);",
        )?;
    } else if c.without_rowid {
        conn.execute_batch(
            "CREATE TABLE objects(key BLOB PRIMARY KEY, raw_len INTEGER NOT NULL, \
             data BLOB NOT NULL) WITHOUT ROWID",
        )?;
    } else {
        conn.execute_batch(
            "CREATE TABLE objects(id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, \
             raw_len INTEGER NOT NULL, data BLOB NOT NULL)",
        )?;
    }
    let mut marks = Vec::new();
    let start = Instant::now();
    let mut done = 0;
    for chunk in data.chunks(c.batch) {
        let mut order: Vec<&([u8; 32], Vec<u8>, usize)> = chunk.iter().collect();
        if c.sorted {
            order.sort_unstable_by_key(|row| row.0);
        }
        let tx = conn.unchecked_transaction()?;
        {
            if c.objstash_table {
                let mut stmt = tx.prepare_cached(
                    "INSERT OR IGNORE INTO objects(key, raw_len, data, used) VALUES (?, ?, ?, ?)",
                )?;
                for (key, gz, raw_len) in order {
                    stmt.execute(params![&key[..], *raw_len as i64, gz, done as i64])?;
                }
            } else {
                let mut stmt = tx.prepare_cached(
                    "INSERT OR IGNORE INTO objects(key, raw_len, data) VALUES (?, ?, ?)",
                )?;
                for (key, gz, raw_len) in order {
                    stmt.execute(params![&key[..], *raw_len as i64, gz])?;
                }
            }
        }
        tx.commit()?;
        done += chunk.len();
        marks.push((done, start.elapsed().as_secs_f64()));
    }
    let n = data.len();
    let (end_rows, end_secs) = *marks.last().expect("at least one batch");
    let total = end_rows as f64 / end_secs;
    let &(d1, t1) = marks.iter().find(|m| m.0 >= n / 10).expect("the last mark has every row");
    let first = d1 as f64 / t1;
    let &(d0, t0) = marks.iter().rev().find(|m| m.0 <= n - n / 10).unwrap_or(&(0, 0.0));
    let last = (n - d0) as f64 / (end_secs - t0);
    Ok((total, first, last))
}
