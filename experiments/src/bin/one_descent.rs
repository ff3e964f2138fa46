//! One B-tree descent per read instead of two, at a size where neither tree fits a cache
//! (#27, target 2: `get` at ten million objects).
//!
//! Today (format 5) a read descends a prefix index (`prefix -> rowid`, the first 8 key bytes
//! as an integer) and then the table by rowid: two leaf pages copied in from the OS page
//! cache per read, where the leaves are far beyond SQLite's cache. The design measured
//! here makes the prefix the row id itself, so one descent of the table reaches the row;
//! the full key is in the row and compared (a collision takes the next free id). The cost
//! is on the writer's side: rows go to random places in the table instead of its end.
//!
//! Both files get the same rows (a pool of 100,000 gzipped generated objects reused under
//! the keys `blake3(i)`), in the writer's shape: batches of 50,000 sorted by key, the
//! project's tuning (write-ahead log, `synchronous=OFF`, 8 KiB pages, a 16 MiB cache). Then
//! one connection per file, with a reader's 8 MiB cache, reads the same random keys from
//! each, alternating by rounds after a warm-up pass; a read is the row's lookup, the copy
//! of its bytes, the inflate and the hash, as `get` does.
//!
//! `cargo run --release -p objstash-experiments --bin one_descent -- [ROWS] [READS]
//!  [ROUNDS] [DIR]` (default 10,000,000 rows, 300,000 reads a round, 2 rounds, a
//! temporary directory). Prints rows/s per million of each build, bytes per row, and
//! reads/s of each design per round with their ratio.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use flate2::Decompress;
use objstash_experiments::{BATCH, POOL, key, prefix};
use rusqlite::{Connection, OptionalExtension, params};

#[derive(Clone, Copy, PartialEq)]
enum Design {
    /// A prefix index, then the table (today's read path).
    Two,
    /// The prefix is the row id.
    One,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::Two => "two descents (index, table)",
            Design::One => "one descent (prefix as row id)",
        }
    }
}

fn main() -> Result<()> {
    // Bound whole: its temporary directory lives as long as `args`.
    let args = objstash_experiments::ReadArgs::parse()?;
    let (rows, reads, rounds, dir) = (args.rows, args.reads, args.rounds, &args.dir);
    let pool = objstash_experiments::gzipped_pool(POOL);
    let mean = pool.iter().map(|(_, d)| d.len() as u64).sum::<u64>() / POOL;
    println!("{rows} rows of {mean} B on average, batches of {BATCH}, {reads} reads a round");
    let mut files = Vec::new();
    for design in [Design::Two, Design::One] {
        let path =
            dir.join(format!("{}-{rows}.db", if design == Design::One { "one" } else { "two" }));
        if path.exists() {
            println!("{}: reusing {}", design.name(), path.display());
        } else {
            let rates = build(&path, design, rows, &pool)?;
            let line: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
            let per_row = std::fs::metadata(&path)?.len() as f64 / rows as f64;
            println!(
                "{}: rows/s per million {}; last/first {:.2}; {:.0} B/row beyond the stored bytes",
                design.name(),
                line.join(" "),
                rates.last().copied().unwrap_or(0.0) / rates[0],
                per_row - mean as f64
            );
        }
        files.push((design, path));
    }
    // The same random keys for both designs.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let sample = objstash_experiments::sample(&mut x, reads, rows);
    let readers: Vec<(Design, Connection)> =
        files.iter().map(|(d, p)| Ok((*d, reader(p)?))).collect::<Result<_>>()?;
    for (design, conn) in &readers {
        let (rate, _) = read(conn, *design, &sample)?;
        println!("warm-up, {}: {rate:.0} reads/s", design.name());
    }
    for round in 1..=rounds {
        let mut rates = Vec::new();
        for (design, conn) in &readers {
            let (rate, bytes) = read(conn, *design, &sample)?;
            println!("round {round}, {}: {rate:.0} reads/s ({bytes} B inflated)", design.name());
            rates.push(rate);
        }
        println!("round {round}: one descent / two = {:.2}x", rates[1] / rates[0]);
    }
    Ok(())
}

fn open(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", 8192)?;
    conn.pragma_update(None, "journal_mode", "wal")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -16 * 1024)?;
    conn.pragma_update(None, "journal_size_limit", -1)?;
    Ok(conn)
}

fn build(path: &Path, design: Design, rows: u64, pool: &[(i64, Vec<u8>)]) -> Result<Vec<f64>> {
    let conn = open(path)?;
    conn.execute_batch(
        "CREATE TABLE objects(id INTEGER PRIMARY KEY, key BLOB NOT NULL, \
         raw_len INTEGER NOT NULL, data BLOB NOT NULL, used INTEGER NOT NULL);",
    )?;
    if design == Design::Two {
        conn.execute_batch(
            "CREATE TABLE keys(prefix INTEGER, id INTEGER, PRIMARY KEY(prefix, id)) WITHOUT ROWID;",
        )?;
    }
    let mut millions = objstash_experiments::PerMillion::new();
    objstash_experiments::fill_in_batches(
        &conn,
        rows,
        pool,
        |tx, key, i, (raw_len, data)| {
            let p = prefix(key);
            match design {
                Design::Two => {
                    tx.prepare_cached(
                        "INSERT INTO objects(key, raw_len, data, used) VALUES (?, ?, ?, ?)",
                    )?
                    .execute(params![&key[..], raw_len, data, i as i64])?;
                    let id = tx.last_insert_rowid();
                    tx.prepare_cached("INSERT INTO keys(prefix, id) VALUES (?, ?)")?
                        .execute(params![p, id])?;
                }
                Design::One => {
                    // A taken id (another key's prefix, or a collision's) moves to the next.
                    let mut id = p;
                    loop {
                        let inserted = tx
                            .prepare_cached(
                                "INSERT OR IGNORE INTO objects(id, key, raw_len, data, used) \
                                 VALUES (?, ?, ?, ?, ?)",
                            )?
                            .execute(params![id, &key[..], raw_len, data, i as i64])?;
                        if inserted == 1 {
                            break;
                        }
                        id = id.wrapping_add(1);
                    }
                }
            }
            Ok(())
        },
        |done| millions.after(done, rows, design.name()),
    )?;
    Ok(millions.rates)
}

fn reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "cache_size", -8 * 1024)?;
    conn.pragma_update(None, "mmap_size", 0)?;
    Ok(conn)
}

/// Reads every key of `sample` in one read transaction: reads/s and the bytes inflated.
fn read(conn: &Connection, design: Design, sample: &[u64]) -> Result<(f64, u64)> {
    let tx = conn.unchecked_transaction()?;
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut raw = Vec::new();
    let mut inflate = Decompress::new(false);
    for &i in sample {
        let key = key(i);
        let p = prefix(&key);
        let row: Option<(i64, Vec<u8>)> = match design {
            Design::Two => {
                // As `get` does: the ids of the prefix, then each row by id.
                let ids: Vec<i64> = tx
                    .prepare_cached("SELECT id FROM keys WHERE prefix = ?1")?
                    .query_map([p], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                let mut row =
                    tx.prepare_cached("SELECT key, raw_len, data FROM objects WHERE id = ?1")?;
                let mut found = None;
                for id in ids {
                    let (k, raw_len, data): (Vec<u8>, i64, Vec<u8>) =
                        row.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                    if k == key {
                        found = Some((raw_len, data));
                        break;
                    }
                }
                found
            }
            Design::One => {
                let mut find =
                    tx.prepare_cached("SELECT key, raw_len, data FROM objects WHERE id = ?1")?;
                let exact = find
                    .query_row([p], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                match exact {
                    Some((k, raw_len, data)) if k == key => Some((raw_len, data)),
                    // Moved by a collision: the ids after it.
                    _ => tx
                        .prepare_cached(
                            "SELECT raw_len, data FROM objects WHERE id > ?1 AND key = ?2 \
                             ORDER BY id LIMIT 1",
                        )?
                        .query_row(params![p, &key[..]], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?,
                }
            }
        };
        let Some((raw_len, data)) = row else { bail!("row {i} not found") };
        objstash_experiments::inflate_and_hash(&data, raw_len, &mut inflate, &mut raw)
            .with_context(|| format!("row {i}"))?;
        bytes += raw.len() as u64;
    }
    let rate = sample.len() as f64 / start.elapsed().as_secs_f64();
    tx.commit()?;
    Ok((rate, bytes))
}
