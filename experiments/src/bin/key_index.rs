//! What the key index costs as a stash grows, and two designs that could keep the writer
//! flat: SQLite alone, in objstash's configuration (write-ahead log, `synchronous=OFF`,
//! 8 KiB pages, a 16 MiB cache, incremental vacuum, secure delete, the `used` column and
//! its index), one writer thread, rows already compressed (a pool of 100,000 gzipped
//! generated objects reused under random keys), batches sorted by key.
//!
//! `cargo run --release -p objstash-experiments --bin key_index -- [ROWS] [DESIGN] [YOUNG]
//!  [wal|memory]` (default 10,000,000 rows, every design, young indexes of 1,000,000 keys,
//! the write-ahead log; `memory` is the project design's tuning for a stash one process
//! owns: an in-memory rollback journal and exclusive locking). Prints rows/s per million and the file's bytes
//! per row beyond the stored bytes.
//!
//! Designs:
//! - `today`: a unique index on the 32-byte key (objstash's format 1).
//! - `prefix`: an index on the key's first 8 bytes (an expression index, so the rows do not
//!   change); the full key is in the row and compared, and the writer looks a key up
//!   before it inserts (no unique index: two keys may share a prefix).
//! - `generations`: rows go into the table without a key index; their keys go into a small
//!   young index (`key -> rowid`, WITHOUT ROWID) that stays in the cache. Once it holds
//!   `YOUNG` keys, the writer moves them into the old index in slices of the key space, one
//!   transaction each, so every page of the old index is written once per slice instead of
//!   once per few batches. A lookup reads the young index, then the old.
//! - `both`: generations of prefix indexes (`prefix -> rowid`), the full key compared in
//!   the row.
//! - `vlog`: `both`, with each row's compressed bytes appended to a file of values beside
//!   the database (flushed to the OS before each commit, as `synchronous=OFF` leaves the
//!   rest to it) and the row holding their offset and length: the bytes of a value are
//!   written once, not to the log and again by the checkpoint (or to the table's pages at
//!   random places in the in-memory journal's mode). Checks a sample of values read back.
//! - `append`: the floor, no design: the rows appended to the table with no index at all
//!   and no lookup. What every writer of these bytes pays to SQLite, the file system and
//!   the machine; a design's decline beyond this one's is the design's.

use anyhow::{Result, bail};
use objstash_experiments::ValueLog;
use rusqlite::{Connection, params};

const POOL: u64 = 100_000;
/// Rows per transaction (objstash's journal budget allows 20,000 to 100,000 at these sizes).
const BATCH: usize = 50_000;
/// Keys the young index holds before they move into the old one, unless the third
/// argument says otherwise.
const YOUNG: u64 = 1_000_000;
/// Transactions a move is cut into, each a slice of the key space.
const SLICES: u32 = 16;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Design {
    Today,
    Prefix,
    Generations,
    Both,
    Vlog,
    Append,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::Today => "today",
            Design::Prefix => "prefix",
            Design::Generations => "generations",
            Design::Both => "both",
            Design::Vlog => "vlog",
            Design::Append => "append",
        }
    }
}

fn main() -> Result<()> {
    let rows: u64 = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(10_000_000);
    let only = std::env::args().nth(2).unwrap_or_default();
    let young: u64 = std::env::args().nth(3).map(|s| s.parse()).transpose()?.unwrap_or(YOUNG);
    let journal = std::env::args().nth(4).unwrap_or_else(|| "wal".to_string());
    if journal != "wal" && journal != "memory" {
        bail!("the journal is wal or memory, not {journal}");
    }
    let pool = objstash_experiments::gzipped_pool(POOL);
    let mean = pool.iter().map(|(_, d)| d.len() as u64).sum::<u64>() / POOL;
    println!(
        "{rows} rows of {mean} B on average, batches of {BATCH}, young indexes of {young}, \
         journal {journal}"
    );
    for design in [
        Design::Today,
        Design::Prefix,
        Design::Generations,
        Design::Both,
        Design::Vlog,
        Design::Append,
    ] {
        if !only.is_empty() && design.name() != only {
            continue;
        }
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("k.db");
        let rates = run(&path, design, rows, young, &journal, &pool)?;
        let values = std::fs::metadata(path.with_extension("values")).map_or(0, |m| m.len());
        let file = (std::fs::metadata(&path)?.len() + values) as f64;
        let overhead = file / rows as f64 - mean as f64;
        let first = rates[0];
        let line: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<12} rows/s per million: {}; last/first {:.2}; {overhead:.0} B/row beyond the stored bytes",
            design.name(),
            line.join(" "),
            rates.last().copied().unwrap_or(first) / first
        );
    }
    Ok(())
}

fn open(path: &std::path::Path, design: Design, journal: &str) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", 8192)?;
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    if journal == "memory" {
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    }
    conn.pragma_update(None, "journal_mode", journal)?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "secure_delete", "ON")?;
    conn.pragma_update(None, "cache_size", -16 * 1024)?;
    conn.pragma_update(None, "journal_size_limit", -1)?;
    conn.execute_batch(&objstash_experiments::objects_table("rowid", design == Design::Vlog))?;
    if design != Design::Append {
        conn.execute_batch("CREATE INDEX objects_used ON objects(used);")?;
    }
    match design {
        Design::Append => {}
        Design::Today => {
            conn.execute_batch("CREATE UNIQUE INDEX objects_key ON objects(key);")?;
        }
        Design::Prefix => {
            conn.execute_batch("CREATE INDEX objects_prefix ON objects(substr(key, 1, 8));")?;
        }
        Design::Generations => {
            conn.execute_batch(
                "CREATE TABLE young(key BLOB PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;\
                 CREATE TABLE old(key BLOB PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;",
            )?;
        }
        Design::Both | Design::Vlog => {
            conn.execute_batch(
                "CREATE TABLE young(key INTEGER, id INTEGER, PRIMARY KEY(key, id)) WITHOUT ROWID;\
                 CREATE TABLE old(key INTEGER, id INTEGER, PRIMARY KEY(key, id)) WITHOUT ROWID;",
            )?;
        }
    }
    Ok(conn)
}

/// Rows/s of each million.
fn run(
    path: &std::path::Path,
    design: Design,
    rows: u64,
    young_keys: u64,
    journal: &str,
    pool: &[(i64, Vec<u8>)],
) -> Result<Vec<f64>> {
    let conn = open(path, design, journal)?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next_key = || {
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        bytes
    };
    if design == Design::Prefix {
        let plan: String = conn.query_row(
            "EXPLAIN QUERY PLAN SELECT data FROM objects \
             WHERE substr(key, 1, 8) = substr(?1, 1, 8) AND key = ?1",
            [&[0u8; 32][..]],
            |r| r.get(3),
        )?;
        if !plan.contains("objects_prefix") {
            bail!("a lookup does not use the prefix index: {plan}");
        }
    }
    let mut values = (design == Design::Vlog)
        .then(|| ValueLog::create(&path.with_extension("values")))
        .transpose()?;
    let mut millions = objstash_experiments::PerMillion::new();
    let mut young = 0u64;
    let mut done = 0u64;
    while done < rows {
        let n = (BATCH as u64).min(rows - done);
        let mut batch: Vec<([u8; 32], u64)> = (done..done + n).map(|i| (next_key(), i)).collect();
        batch.sort_unstable_by_key(|row| row.0);
        let tx = conn.unchecked_transaction()?;
        for (key, i) in &batch {
            let (raw_len, data) = &pool[(*i % POOL) as usize];
            match design {
                Design::Append => {
                    append(&tx, key, *raw_len, data, *i)?;
                }
                Design::Today => {
                    tx.prepare_cached(
                        "INSERT OR IGNORE INTO objects(key, raw_len, data, used) VALUES (?, ?, ?, ?)",
                    )?
                    .execute(params![&key[..], raw_len, data, *i as i64])?;
                }
                Design::Prefix => {
                    // One statement (`INSERT .. SELECT .. WHERE NOT EXISTS`) reads its own
                    // table, so SQLite stages each row in a temporary table: 4x slower.
                    let known = tx
                        .prepare_cached(
                            "SELECT 1 FROM objects \
                             WHERE substr(key, 1, 8) = substr(?1, 1, 8) AND key = ?1",
                        )?
                        .exists(params![&key[..]])?;
                    if !known {
                        tx.prepare_cached(
                            "INSERT INTO objects(key, raw_len, data, used) VALUES (?, ?, ?, ?)",
                        )?
                        .execute(params![
                            &key[..],
                            raw_len,
                            data,
                            *i as i64
                        ])?;
                    }
                }
                Design::Generations => {
                    let known = tx
                        .prepare_cached("SELECT 1 FROM old WHERE key = ?")?
                        .exists(params![&key[..]])?
                        || tx
                            .prepare_cached("SELECT 1 FROM young WHERE key = ?")?
                            .exists(params![&key[..]])?;
                    if !known {
                        let id = append(&tx, key, *raw_len, data, *i)?;
                        index_young(&tx, &key[..], id)?;
                        young += 1;
                    }
                }
                Design::Both | Design::Vlog => {
                    let p = i64::from_be_bytes(key[..8].try_into().expect("8 bytes"));
                    let mut known = false;
                    for generation in ["old", "young"] {
                        let ids: Vec<i64> = tx
                            .prepare_cached(&format!("SELECT id FROM {generation} WHERE key = ?1"))?
                            .query_map([p], |r| r.get(0))?
                            .collect::<rusqlite::Result<_>>()?;
                        for id in ids {
                            let stored: Vec<u8> = tx
                                .prepare_cached("SELECT key FROM objects WHERE rowid = ?1")?
                                .query_row([id], |r| r.get(0))?;
                            known |= stored == key[..];
                        }
                        if known {
                            break;
                        }
                    }
                    if !known {
                        let id = if design == Design::Vlog {
                            let values = values.as_mut().expect("a value log has its file");
                            values.append(&tx, key, *raw_len, data, *i)?
                        } else {
                            append(&tx, key, *raw_len, data, *i)?
                        };
                        index_young(&tx, p, id)?;
                        young += 1;
                    }
                }
            }
        }
        // The values a commit refers to reach the OS first.
        if let Some(values) = &mut values {
            values.flush()?;
        }
        tx.commit()?;
        if matches!(design, Design::Generations | Design::Both | Design::Vlog)
            && young >= young_keys
        {
            move_young(&conn, design)?;
            young = 0;
        }
        done += n;
        millions.after(done, rows, design.name());
    }
    // What a lookup costs is measured elsewhere; here, that every key is still found once.
    let indexed: i64 = match design {
        Design::Generations => conn.query_row(
            "SELECT (SELECT count(*) FROM old) + (SELECT count(*) FROM young)",
            [],
            |r| r.get(0),
        )?,
        _ => conn.query_row("SELECT count(*) FROM objects", [], |r| r.get(0))?,
    };
    if indexed as u64 != rows {
        bail!("{} indexes {indexed} keys of {rows}", design.name());
    }
    if let Some(values) = &values {
        check_values(values, &conn, rows, pool)?;
    }
    if journal == "wal" {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    Ok(millions.rates)
}

/// Appends a row to the objects table; its rowid.
fn append(tx: &Connection, key: &[u8; 32], raw_len: i64, data: &[u8], used: u64) -> Result<i64> {
    tx.prepare_cached("INSERT INTO objects(key, raw_len, data, used) VALUES (?, ?, ?, ?)")?
        .execute(params![&key[..], raw_len, data, used as i64])?;
    Ok(tx.last_insert_rowid())
}

/// Indexes row `id` under `key` (a key or a prefix) in the young index.
fn index_young(tx: &Connection, key: impl rusqlite::ToSql, id: i64) -> Result<()> {
    tx.prepare_cached("INSERT INTO young(key, id) VALUES (?, ?)")?.execute(params![key, id])?;
    Ok(())
}

/// Moves the young keys into the old index, one slice of the key space per transaction.
fn move_young(conn: &Connection, design: Design) -> Result<()> {
    use rusqlite::types::Value;
    // The slices' bounds: key bytes for 32-byte keys, integers for prefixes.
    let bound = |slice: u32| -> Value {
        if matches!(design, Design::Both | Design::Vlog) {
            let step = (1i128 << 64) / i128::from(SLICES);
            Value::Integer((i128::from(i64::MIN) + step * i128::from(slice)) as i64)
        } else {
            Value::Blob(vec![(slice * 256 / SLICES) as u8])
        }
    };
    for slice in 0..SLICES {
        let tx = conn.unchecked_transaction()?;
        let (range, bounds) = if slice + 1 < SLICES {
            ("key >= ?1 AND key < ?2", vec![bound(slice), bound(slice + 1)])
        } else {
            ("key >= ?1", vec![bound(slice)])
        };
        tx.execute(
            &format!(
                "INSERT INTO old(key, id) SELECT key, id FROM young WHERE {range} ORDER BY key"
            ),
            rusqlite::params_from_iter(&bounds),
        )?;
        tx.execute(
            &format!("DELETE FROM young WHERE {range}"),
            rusqlite::params_from_iter(&bounds),
        )?;
        tx.commit()?;
    }
    Ok(())
}

/// Reads a sample of rows' values back from the `vlog` design's file and compares them with
/// the pool's.
fn check_values(
    values: &ValueLog,
    conn: &Connection,
    rows: u64,
    pool: &[(i64, Vec<u8>)],
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(&values.path)?;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for rowid in objstash_experiments::sample(&mut seed, 10_000, rows) {
        let (at, len, used): (i64, i64, i64) = conn.query_row(
            "SELECT data, len, used FROM objects WHERE rowid = ?1",
            [rowid as i64 + 1],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, at as u64)?;
        if bytes != pool[(used as u64 % POOL) as usize].1 {
            bail!("the value of row {rowid} reads back wrong");
        }
    }
    Ok(())
}
