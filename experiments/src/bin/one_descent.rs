//! Read designs at a size where no tree fits a cache (#27, target 2: `get` at ten million
//! objects): one B-tree descent per read instead of two, and the values kept outside the
//! B-trees.
//!
//! Today (format 5) a read descends a prefix index (`prefix -> rowid`, the first 8 key bytes
//! as an integer) and then the table by rowid: two leaf pages copied in from the OS page
//! cache per read, where the leaves are far beyond SQLite's cache. The design measured
//! here makes the prefix the row id itself, so one descent of the table reaches the row;
//! the full key is in the row and compared (a collision takes the next free id). The cost
//! is on the writer's side: rows go to random places in the table instead of its end.
//!
//! The third design, a value log, keeps today's two descents but moves each row's bytes
//! into a file of values appended beside the database, the row holding their offset and
//! length: the database is then a tenth of the size, small enough for SQLite's largest map
//! (2 GiB in the bundled build), so its descents copy no pages, and a read copies only
//! the value's own bytes (`pread` of about 900 bytes rather than an 8 KiB leaf).
//!
//! Both files get the same rows (a pool of 100,000 gzipped generated objects reused under
//! the keys `blake3(i)`), in the writer's shape: batches of 50,000 sorted by key, the
//! project's tuning (write-ahead log, `synchronous=OFF`, 8 KiB pages, a 16 MiB cache). Then
//! one connection per file, with a reader's 8 MiB cache, reads the same random keys from
//! each, alternating by rounds after a warm-up pass; a read is the row's lookup, the copy
//! of its bytes, the inflate and the hash, as `get` does.
//!
//! `cargo run --release -p objstash-experiments --bin one_descent -- [ROWS] [READS]
//!  [ROUNDS] [DIR] [DESIGNS]` (default 10,000,000 rows, 300,000 reads a round, 2 rounds, a
//! temporary directory, the designs `two,one,log`, or `log-pread` for the log's database
//! read without a map; the first is the baseline). Prints rows/s per million of each
//! build, bytes per row, reads/s of each design per round with their ratio to the first,
//! and the file pages resident in the process at the end.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use flate2::Decompress;
use objstash_experiments::{BATCH, POOL, ValueLog, key, prefix};
use rusqlite::{Connection, OptionalExtension, params};

#[derive(Clone, Copy, PartialEq)]
enum Design {
    /// A prefix index, then the table (today's read path).
    Two,
    /// The prefix is the row id.
    One,
    /// Two descents of a mapped database whose rows point into a file of values.
    Log,
    /// The same file read with `pread`, not mapped.
    LogUnmapped,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::Two => "two descents (index, table)",
            Design::One => "one descent (prefix as row id)",
            Design::Log => "a value log (index, mapped table, value)",
            Design::LogUnmapped => "a value log, not mapped",
        }
    }

    /// The design's name on the command line.
    fn arg(self) -> &'static str {
        match self {
            Design::LogUnmapped => "log-pread",
            _ => self.file(),
        }
    }

    fn file(self) -> &'static str {
        match self {
            Design::Two => "two",
            Design::One => "one",
            Design::Log | Design::LogUnmapped => "log",
        }
    }

    /// Whether rows point into a file of values.
    fn logged(self) -> bool {
        matches!(self, Design::Log | Design::LogUnmapped)
    }

    fn parse(name: &str) -> Result<Design> {
        [Design::Two, Design::One, Design::Log, Design::LogUnmapped]
            .into_iter()
            .find(|d| d.arg() == name)
            .with_context(|| format!("a design is two, one, log or log-pread, not {name}"))
    }
}

/// The file of values beside a database of the `log` design.
fn values_of(path: &Path) -> PathBuf {
    path.with_extension("values")
}

fn main() -> Result<()> {
    // Bound whole: its temporary directory lives as long as `args`.
    let args = objstash_experiments::ReadArgs::parse()?;
    let (rows, reads, rounds, dir) = (args.rows, args.reads, args.rounds, &args.dir);
    let pool = objstash_experiments::gzipped_pool(POOL);
    let mean = pool.iter().map(|(_, d)| d.len() as u64).sum::<u64>() / POOL;
    println!("{rows} rows of {mean} B on average, batches of {BATCH}, {reads} reads a round");
    let designs: Vec<Design> = std::env::args()
        .nth(5)
        .unwrap_or_else(|| "two,one,log".to_string())
        .split(',')
        .map(Design::parse)
        .collect::<Result<_>>()?;
    let mut files = Vec::new();
    for design in designs {
        let path = dir.join(format!("{}-{rows}.db", design.file()));
        if path.exists() {
            println!("{}: reusing {}", design.name(), path.display());
        } else {
            let rates = build(&path, design, rows, &pool)?;
            let line: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
            let values = std::fs::metadata(values_of(&path)).map_or(0, |m| m.len());
            let per_row = (std::fs::metadata(&path)?.len() + values) as f64 / rows as f64;
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
    let readers: Vec<Reader> =
        files.iter().map(|(d, p)| Reader::open(*d, p)).collect::<Result<_>>()?;
    for reader in &readers {
        let (rate, _) = reader.read(&sample)?;
        println!("warm-up, {}: {rate:.0} reads/s", reader.design.name());
    }
    for round in 1..=rounds {
        let mut rates = Vec::new();
        for reader in &readers {
            let (rate, bytes) = reader.read(&sample)?;
            let name = reader.design.name();
            println!("round {round}, {name}: {rate:.0} reads/s ({bytes} B inflated)");
            rates.push(rate);
        }
        for (reader, rate) in readers.iter().zip(&rates).skip(1) {
            let (name, base) = (reader.design.name(), readers[0].design.name());
            println!("round {round}: {name} / {base} = {:.2}x", rate / rates[0]);
        }
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    for line in status.lines().filter(|l| l.starts_with("RssFile") || l.starts_with("VmHWM")) {
        println!("{line}");
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
    conn.execute_batch(&objstash_experiments::objects_table("id", design.logged()))?;
    let mut values = design.logged().then(|| ValueLog::create(&values_of(path))).transpose()?;
    if design != Design::One {
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
                Design::Log | Design::LogUnmapped => {
                    let values = values.as_mut().expect("a log has its file");
                    let id = values.append(tx, key, *raw_len, data, i)?;
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
    // These files are built to be read (`key_index` times a value log's writer, flushing
    // before each commit): the values reach the OS as the buffer fills, the rest here.
    if let Some(values) = &mut values {
        values.flush()?;
    }
    Ok(millions.rates)
}

/// The row ids of a prefix in the prefix index.
fn ids_of(tx: &Connection, prefix: i64) -> Result<Vec<i64>> {
    let mut stmt = tx.prepare_cached("SELECT id FROM keys WHERE prefix = ?1")?;
    let ids = stmt.query_map([prefix], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

/// One connection, with a reader's 8 MiB cache, and for a value log its file of values.
struct Reader {
    design: Design,
    conn: Connection,
    values: Option<std::fs::File>,
}

impl Reader {
    fn open(design: Design, path: &Path) -> Result<Reader> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "cache_size", -8 * 1024)?;
        // The log's database is mapped whole (the bundled SQLite maps at most 2 GiB); the
        // others are read as `get` reads a file of this size, with `pread`.
        let map: i64 = if design == Design::Log { 0x7fff_0000 } else { 0 };
        conn.pragma_update(None, "mmap_size", map)?;
        let values = design.logged().then(|| std::fs::File::open(values_of(path))).transpose()?;
        Ok(Reader { design, conn, values })
    }

    /// Reads every key of `sample` in one read transaction: reads/s and the bytes inflated.
    fn read(&self, sample: &[u64]) -> Result<(f64, u64)> {
        let tx = self.conn.unchecked_transaction()?;
        let start = Instant::now();
        let mut bytes = 0u64;
        let mut raw = Vec::new();
        let mut data = Vec::new();
        let mut inflate = Decompress::new(false);
        for &i in sample {
            let key = key(i);
            let Some(raw_len) = self.find(&tx, &key, &mut data)? else {
                bail!("row {i} not found")
            };
            objstash_experiments::inflate_and_hash(&data, raw_len, &mut inflate, &mut raw)
                .with_context(|| format!("row {i}"))?;
            bytes += raw.len() as u64;
        }
        let rate = sample.len() as f64 / start.elapsed().as_secs_f64();
        tx.commit()?;
        Ok((rate, bytes))
    }

    /// Looks `key` up; its raw length, its stored bytes copied into `data`.
    fn find(&self, tx: &Connection, key: &[u8; 32], data: &mut Vec<u8>) -> Result<Option<i64>> {
        let p = prefix(key);
        let row: Option<(i64, Vec<u8>)> = match self.design {
            Design::Two => {
                // As `get` does: the ids of the prefix, then each row by id.
                let ids = ids_of(tx, p)?;
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
            Design::Log | Design::LogUnmapped => {
                let ids = ids_of(tx, p)?;
                let mut row =
                    tx.prepare_cached("SELECT key, raw_len, data, len FROM objects WHERE id = ?1")?;
                for id in ids {
                    let (found, raw_len, at, len): (bool, i64, i64, i64) = row
                        .query_row([id], |r| {
                            Ok((r.get_ref(0)?.as_blob()? == key, r.get(1)?, r.get(2)?, r.get(3)?))
                        })?;
                    if found {
                        let values = self.values.as_ref().expect("a log has its file");
                        data.resize(usize::try_from(len)?, 0);
                        values.read_exact_at(data, u64::try_from(at)?)?;
                        return Ok(Some(raw_len));
                    }
                }
                None
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
        Ok(row.map(|(raw_len, bytes)| {
            *data = bytes;
            raw_len
        }))
    }
}
