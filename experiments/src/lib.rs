//! What the experiments share: the rows they write and the arguments they read.

use flate2::Compression;
use flate2::write::GzEncoder;
use rayon::prelude::*;

/// `count` generated objects gzipped at level 1 (as a writer would store them), each with
/// its raw length: rows already compressed, reused under many keys.
pub fn gzipped_pool(count: u64) -> Vec<(i64, Vec<u8>)> {
    (0..count)
        .into_par_iter()
        .map(|i| {
            let raw = speckle_gen::object(1, i);
            let mut gz = GzEncoder::new(Vec::new(), Compression::new(1));
            std::io::Write::write_all(&mut gz, &raw).expect("in memory");
            (raw.len() as i64, gz.finish().expect("in memory"))
        })
        .collect()
}

/// The objects of the peers benchmark's file (each a 4-byte little-endian length and its
/// bytes) at `path`, or without one 50,000 generated Speckle objects.
pub fn objects_of_file(path: Option<String>) -> anyhow::Result<Vec<Vec<u8>>> {
    let Some(path) = path else {
        return Ok((0..50_000).map(|i| speckle_gen::object(1, i)).collect());
    };
    let bytes = std::fs::read(path)?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into()?) as usize;
        anyhow::ensure!(at + 4 + len <= bytes.len(), "a truncated objects file");
        out.push(bytes[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    Ok(out)
}

/// The key of row `i` in the experiments' SQLite files: `blake3(i)`.
pub fn key(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

/// A key's first 8 bytes as an integer: what the key indexes of format 5 hold.
pub fn prefix(key: &[u8; 32]) -> i64 {
    i64::from_be_bytes(key[..8].try_into().expect("8 bytes"))
}

/// Inflates a gzip row as the library's codec does (the header skipped: this writer's has
/// no optional fields; one reused decompressor with spare room) into `raw`, then hashes it,
/// as `get` checks a read.
pub fn inflate_and_hash(
    data: &[u8],
    raw_len: i64,
    inflate: &mut flate2::Decompress,
    raw: &mut Vec<u8>,
) -> anyhow::Result<()> {
    use flate2::{FlushDecompress, Status};
    anyhow::ensure!(data.len() >= 18 && data[3] == 0, "not a plain gzip member");
    raw.clear();
    raw.reserve(raw_len as usize + 260);
    inflate.reset(false);
    let status = inflate.decompress_vec(&data[10..], raw, FlushDecompress::Finish)?;
    anyhow::ensure!(
        status == Status::StreamEnd && raw.len() as i64 == raw_len,
        "did not inflate to its {raw_len} bytes"
    );
    std::hint::black_box(blake3::hash(raw));
    Ok(())
}

/// The positional arguments the read experiments share: `ROWS READS ROUNDS [DIR]` (defaults
/// 10,000,000, 300,000 and 2; the directory a temporary one unless given, or given empty,
/// so that a file built once can be read again).
pub struct ReadArgs {
    pub rows: u64,
    pub reads: u64,
    pub rounds: u32,
    pub dir: std::path::PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl ReadArgs {
    pub fn parse() -> anyhow::Result<ReadArgs> {
        let arg = |n: usize| std::env::args().nth(n);
        let rows = arg(1).map(|s| s.parse()).transpose()?.unwrap_or(10_000_000);
        let reads = arg(2).map(|s| s.parse()).transpose()?.unwrap_or(300_000);
        let rounds = arg(3).map(|s| s.parse()).transpose()?.unwrap_or(2);
        // An empty directory is none given, so that later arguments can follow it.
        let (dir, temp) = match arg(4).filter(|d| !d.is_empty()) {
            Some(dir) => (dir.into(), None),
            None => {
                let temp = tempfile::tempdir()?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        Ok(ReadArgs { rows, reads, rounds, dir, _temp: temp })
    }
}

/// `count` row numbers below `rows` from a xorshift generator whose state is `seed`, which
/// moves on: the same seed gives the same sample, the next call a fresh one.
pub fn sample(seed: &mut u64, count: u64, rows: u64) -> Vec<u64> {
    (0..count)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed % rows
        })
        .collect()
}

/// The keys of rows `start..start + count` with their row numbers, in the order of their
/// prefixes (as a writer inserts a batch).
pub fn sorted_batch(start: u64, count: u64) -> Vec<([u8; 32], u64)> {
    let mut batch: Vec<([u8; 32], u64)> = (start..start + count).map(|i| (key(i), i)).collect();
    batch.sort_unstable_by_key(|(k, _)| prefix(k));
    batch
}

/// How many generated rows the SQLite experiments reuse under their many keys.
pub const POOL: u64 = 100_000;
/// How many keys [`fill_in_batches`] puts in one transaction, as the writer's batches do.
pub const BATCH: u64 = 50_000;

/// Fills `conn` with `rows` rows as the writer lays them out: batches of [`BATCH`] keys in
/// prefix order, one transaction each. `row(tx, key, i, (raw_len, data))` inserts row `i`
/// (its data one of `pool`'s); `committed(done)` runs after each batch. Ends with the log
/// checkpointed into the file.
pub fn fill_in_batches(
    conn: &rusqlite::Connection,
    rows: u64,
    pool: &[(i64, Vec<u8>)],
    mut row: impl FnMut(&rusqlite::Transaction, &[u8; 32], u64, &(i64, Vec<u8>)) -> anyhow::Result<()>,
    mut committed: impl FnMut(u64),
) -> anyhow::Result<()> {
    let mut done = 0;
    while done < rows {
        let n = BATCH.min(rows - done);
        let tx = conn.unchecked_transaction()?;
        for (key, i) in &sorted_batch(done, n) {
            row(&tx, key, *i, &pool[(i % pool.len() as u64) as usize])?;
        }
        tx.commit()?;
        done += n;
        committed(done);
    }
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(())
}

/// The objects table of the SQLite experiments, its row id column named `id`. With
/// `logged`, a value log's: the row holds where its bytes are, `data` their offset in a file
/// of values and `len` their length.
pub fn objects_table(id: &str, logged: bool) -> String {
    let data =
        if logged { "data INTEGER NOT NULL, len INTEGER NOT NULL" } else { "data BLOB NOT NULL" };
    format!(
        "CREATE TABLE objects({id} INTEGER PRIMARY KEY, key BLOB NOT NULL, \
         raw_len INTEGER NOT NULL, {data}, used INTEGER NOT NULL);"
    )
}

/// The file of values of a value log's design, beside the database of a table made by
/// [`objects_table`] with `logged`: each value appended once, its row holding its offset
/// and length. Values reach the OS at [`ValueLog::flush`] (or when a MiB is buffered).
pub struct ValueLog {
    pub path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    end: u64,
}

impl ValueLog {
    pub fn create(path: &std::path::Path) -> anyhow::Result<ValueLog> {
        let file = std::fs::File::create(path)?;
        Ok(ValueLog {
            path: path.to_path_buf(),
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            end: 0,
        })
    }

    /// Appends `data` to the file and its row (offset and length) to the table; its rowid.
    pub fn append(
        &mut self,
        tx: &rusqlite::Connection,
        key: &[u8; 32],
        raw_len: i64,
        data: &[u8],
        used: u64,
    ) -> anyhow::Result<i64> {
        use std::io::Write;
        self.file.write_all(data)?;
        tx.prepare_cached(
            "INSERT INTO objects(key, raw_len, data, len, used) VALUES (?, ?, ?, ?, ?)",
        )?
        .execute(rusqlite::params![
            &key[..],
            raw_len,
            self.end as i64,
            data.len() as i64,
            used as i64
        ])?;
        self.end += data.len() as u64;
        Ok(tx.last_insert_rowid())
    }

    pub fn flush(&mut self) -> anyhow::Result<()> {
        use std::io::Write;
        Ok(self.file.flush()?)
    }
}

/// Bytes this process has passed to `write` and its kind so far (`wchar` of
/// `/proc/self/io`).
pub fn written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Rows/s of each million rows written, as a fill goes, and the bytes written a row.
pub struct PerMillion {
    pub rates: Vec<f64>,
    since: std::time::Instant,
    written: u64,
}

impl PerMillion {
    pub fn new() -> PerMillion {
        PerMillion { rates: Vec::new(), since: std::time::Instant::now(), written: written() }
    }

    /// Called with the rows `done` of `rows` after each batch: at each million (and at the
    /// end) records and prints the rate of the rows since the last one and the bytes
    /// written a row, under `name`.
    pub fn after(&mut self, done: u64, rows: u64, name: &str) {
        if done.is_multiple_of(1_000_000) || done == rows {
            let in_million =
                if done.is_multiple_of(1_000_000) { 1_000_000 } else { done % 1_000_000 };
            let rate = in_million as f64 / self.since.elapsed().as_secs_f64();
            let now = written();
            let per_row = (now - self.written) / in_million;
            self.rates.push(rate);
            eprintln!("{name} {done}: {rate:.0} rows/s, {per_row} B written a row");
            self.since = std::time::Instant::now();
            self.written = now;
        }
    }
}

impl Default for PerMillion {
    fn default() -> Self {
        PerMillion::new()
    }
}
