//! Where a read's use is recorded, while one thread reads (#27, target 2: `get` at ten
//! million objects on a writable handle, `get_many` past the use resolution).
//!
//! Today every object row carries `used`, and the writer rewrites the row for each use it
//! records (every half second, the uses of that half second in one transaction): each use
//! rewrites an 8 KiB leaf of the object table at a random place, which at ten million rows
//! is a page per use, written to the log and checkpointed into the file again. Measured
//! here, on one file of the same rows, against two designs that record uses apart from the
//! rows:
//! - **A narrow table** `uses(id PRIMARY KEY, used)`: a use rewrites a leaf of 16-byte
//!   rows, a few hundred rows a page instead of nine.
//! - **An appended log** `use_log(id, used)`: a use appends 10-odd bytes at the end; the
//!   log is folded into the narrow table in id order (here once, at the end of the round,
//!   counted in the writer's time and bytes).
//! - And reading with nothing recorded, as a read-only handle does: the ceiling.
//!
//! Threads read random keys as `get` does (the prefix index, the row, the copy, the
//! inflate, the hash) and hands each row id to a map; a writer thread drains the map every
//! half second and records the uses in one transaction, in id order, as the stash's writer
//! does. The reader starts a new read transaction every 64 reads (so it sees the writer's
//! commits, as a kept snapshot restarted on a commit does). The project's tuning: a
//! write-ahead log, `synchronous=OFF`, 8 KiB pages, the writer's cache 16 MiB, the
//! reader's 8 MiB.
//!
//! `cargo run --release -p objstash-experiments --bin use_log -- [ROWS] [READS] [ROUNDS]
//!  [DIR] [THREADS]` (default 10,000,000 rows, 300,000 reads a round, 2 rounds, a
//! temporary directory, 1 reading thread; a file of the same ROWS in DIR is reused;
//! `get_many` reads on as many threads as cores). Prints, per design and round, the
//! reads/s, the writer's busy seconds and the bytes the process wrote.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use flate2::Decompress;
use objstash_experiments::{POOL, key, prefix};
use rusqlite::{Connection, params};

const RECORD_EVERY: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, PartialEq, Debug)]
enum Design {
    /// `used` in the object row (today).
    InRow,
    /// A narrow table of `(id, used)`.
    Narrow,
    /// An appended log of `(id, used)`, folded into the narrow table.
    Log,
    /// Nothing recorded (a read-only handle).
    None,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::InRow => "used in the row (today)",
            Design::Narrow => "a narrow table of uses",
            Design::Log => "an appended log, folded",
            Design::None => "nothing recorded (read-only)",
        }
    }
}

fn main() -> Result<()> {
    // Bound whole: its temporary directory lives as long as `args`.
    let args = objstash_experiments::ReadArgs::parse()?;
    let (rows, reads, rounds, dir) = (args.rows, args.reads, args.rounds, &args.dir);
    let threads: usize = std::env::args().nth(5).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let path = dir.join(format!("uses-{rows}.db"));
    if path.exists() {
        println!("reusing {}", path.display());
    } else {
        build(&path, rows)?;
    }
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let designs = [Design::InRow, Design::Narrow, Design::Log, Design::None];
    println!("{rows} rows, {reads} random reads a round on {threads} threads");
    for round in 1..=rounds {
        let mut base = 0.0;
        for design in designs {
            // Fresh keys each round and design, so that every read is a use to record.
            let sample = objstash_experiments::sample(&mut seed, reads, rows);
            let r = round_of(&path, design, &sample, threads)?;
            if design == Design::InRow {
                base = r.rate;
            }
            println!(
                "round {round}, {}: {:.0} reads/s ({:.2}x today), writer busy {:.1} s, \
                 {:.0} MB written",
                design.name(),
                r.rate,
                r.rate / base,
                r.busy.as_secs_f64(),
                r.written as f64 / 1e6
            );
        }
    }
    Ok(())
}

fn open(path: &Path, cache_kib: i64) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "wal")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -cache_kib)?;
    conn.pragma_update(None, "mmap_size", 0)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    Ok(conn)
}

fn build(path: &Path, rows: u64) -> Result<()> {
    let pool = objstash_experiments::gzipped_pool(POOL);
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", 8192)?;
    drop(conn);
    let conn = open(path, 16 * 1024)?;
    conn.execute_batch(
        "CREATE TABLE objects(id INTEGER PRIMARY KEY, key BLOB NOT NULL, \
         raw_len INTEGER NOT NULL, data BLOB NOT NULL, used INTEGER NOT NULL);
         CREATE TABLE keys(prefix INTEGER, id INTEGER, PRIMARY KEY(prefix, id)) WITHOUT ROWID;
         CREATE TABLE uses(id INTEGER PRIMARY KEY, used INTEGER NOT NULL);
         CREATE TABLE use_log(id INTEGER NOT NULL, used INTEGER NOT NULL);",
    )?;
    let start = Instant::now();
    objstash_experiments::fill_in_batches(
        &conn,
        rows,
        &pool,
        |tx, key, _, (raw_len, data)| {
            // A save time well in the past, so that every later use is newer.
            tx.prepare_cached("INSERT INTO objects(key, raw_len, data, used) VALUES (?, ?, ?, 1)")?
                .execute(params![&key[..], raw_len, data])?;
            let id = tx.last_insert_rowid();
            tx.prepare_cached("INSERT INTO keys(prefix, id) VALUES (?, ?)")?
                .execute(params![prefix(key), id])?;
            // The narrow table holds every row's use, as it would once it replaced the column.
            tx.prepare_cached("INSERT INTO uses(id, used) VALUES (?, 1)")?.execute([id])?;
            Ok(())
        },
        |done| {
            if done.is_multiple_of(1_000_000) {
                eprintln!("{done} rows, {:.0} s", start.elapsed().as_secs_f64());
            }
        },
    )
}

struct Round {
    rate: f64,
    busy: Duration,
    written: u64,
}

fn round_of(path: &Path, design: Design, sample: &[u64], threads: usize) -> Result<Round> {
    let pending: Arc<Mutex<HashMap<i64, i64>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (pending, done, path) = (pending.clone(), done.clone(), path.to_path_buf());
        std::thread::spawn(move || -> Result<Duration> {
            let conn = open(&path, 16 * 1024)?;
            let mut busy = Duration::ZERO;
            loop {
                let last = done.load(Ordering::Acquire);
                let uses = std::mem::take(&mut *pending.lock().expect("not poisoned"));
                let start = Instant::now();
                record(&conn, design, uses)?;
                if last {
                    if design == Design::Log {
                        fold(&conn)?;
                    }
                    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
                    busy += start.elapsed();
                    return Ok(busy);
                }
                busy += start.elapsed();
                std::thread::sleep(RECORD_EVERY);
            }
        })
    };
    let before = objstash_experiments::written();
    // Each thread reads its share of the keys; the rate is of all of them.
    let start = Instant::now();
    let share = sample.len().div_ceil(threads);
    let read_all = std::thread::scope(|scope| {
        let handles: Vec<_> = sample
            .chunks(share)
            .map(|part| scope.spawn(|| read(path, design, part, &pending)))
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("a reader does not panic").map(drop))
    });
    let rate = read_all.map(|()| sample.len() as f64 / start.elapsed().as_secs_f64());
    done.store(true, Ordering::Release);
    let busy = writer.join().expect("the writer does not panic")?;
    Ok(Round { rate: rate?, busy, written: objstash_experiments::written() - before })
}

/// Writes the uses drained from the map in one transaction, in id order.
fn record(conn: &Connection, design: Design, uses: HashMap<i64, i64>) -> Result<()> {
    if uses.is_empty() {
        return Ok(());
    }
    let mut uses: Vec<(i64, i64)> = uses.into_iter().collect();
    uses.sort_unstable();
    let sql = match design {
        Design::InRow => "UPDATE objects SET used = ?2 WHERE id = ?1 AND used < ?2",
        Design::Narrow => "UPDATE uses SET used = ?2 WHERE id = ?1 AND used < ?2",
        Design::Log => "INSERT INTO use_log(id, used) VALUES (?1, ?2)",
        Design::None => return Ok(()),
    };
    let tx = conn.unchecked_transaction()?;
    {
        let mut stmt = tx.prepare_cached(sql)?;
        for (id, used) in uses {
            stmt.execute([id, used])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The log's latest use of each id into the narrow table, in id order, then the log emptied.
fn fold(conn: &Connection) -> Result<()> {
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "UPDATE uses SET used = l.used FROM \
         (SELECT id, max(used) AS used FROM use_log GROUP BY id ORDER BY id) AS l \
         WHERE uses.id = l.id AND uses.used < l.used",
        [],
    )?;
    tx.execute("DELETE FROM use_log", [])?;
    tx.commit()?;
    Ok(())
}

/// Reads every key of `sample` as `get` does and records each use in `pending`: reads/s.
fn read(
    path: &Path,
    design: Design,
    sample: &[u64],
    pending: &Mutex<HashMap<i64, i64>>,
) -> Result<f64> {
    let conn = open(path, 8 * 1024)?;
    let start = Instant::now();
    let mut raw = Vec::new();
    let mut inflate = Decompress::new(false);
    let mut tx = Some(conn.unchecked_transaction()?);
    for (n, &i) in sample.iter().enumerate() {
        if n % 64 == 0 {
            tx.take().expect("open").commit()?;
            tx = Some(conn.unchecked_transaction()?);
        }
        let tx = tx.as_ref().expect("open");
        let key = key(i);
        let ids: Vec<i64> = tx
            .prepare_cached("SELECT id FROM keys WHERE prefix = ?1")?
            .query_map([prefix(&key)], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut row = tx.prepare_cached("SELECT key, raw_len, data FROM objects WHERE id = ?1")?;
        let mut found = None;
        for id in ids {
            let (k, raw_len, data): (Vec<u8>, i64, Vec<u8>) =
                row.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            if k == key {
                found = Some((id, raw_len, data));
                break;
            }
        }
        let Some((id, raw_len, data)) = found else { bail!("row {i} not found") };
        objstash_experiments::inflate_and_hash(&data, raw_len, &mut inflate, &mut raw)
            .with_context(|| format!("row {i}"))?;
        if design != Design::None {
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
            pending.lock().expect("not poisoned").insert(id, now);
        }
    }
    let rate = sample.len() as f64 / start.elapsed().as_secs_f64();
    tx.take().expect("open").commit()?;
    Ok(rate)
}
