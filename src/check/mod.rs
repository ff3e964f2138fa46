//! Checking a stash: every row decoded and hashed, every intact key looked up through the
//! key index, the recorded totals against a recount, the names against their objects, and
//! SQLite's integrity check. One check serves [`Stash::verify`](crate::Stash::verify) (a
//! live stash: each chunk read in a read transaction of its own, so the writer is never
//! kept waiting for long, and checked in parallel) and [`repair`](crate::repair) (a closed
//! file). What it reads with is a function that hands out a connection.

mod chunked;
pub(crate) mod header_mend;
pub(crate) mod pagescan;
pub(crate) mod salvage;
pub(crate) mod totals;

use std::collections::HashSet;
use std::ops::Deref;

use rayon::prelude::*;
use rusqlite::Connection;

use crate::codec;
use crate::codec::zstd_dict::Dictionaries;
use crate::db::first_generation::Generation;
use crate::db::meta;
use crate::db::models;
use crate::db::names;
use crate::db::readers::in_read_transaction;
use crate::db::row::Lenient;
use crate::db::row::Place;
use crate::db::scan;
use crate::db::schema::{Schema, TableSql};
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::large::manifest::{self, Manifest};
use crate::report::recovery;
use crate::report::stats::VerifyReport;
use crate::values::value_log::ValueLog;

/// Rows read per query: each query holds a read lock only briefly.
const CHUNK: usize = 1_024;

/// A check of one stash.
pub(crate) struct Check<'a, F> {
    /// Hands out a connection for each read transaction.
    pub connect: F,
    pub schema: &'a Schema,
    pub dicts: &'a Dictionaries,
    /// The stash's file of values, if it keeps its values in one (`value_log.rs`).
    pub log: Option<&'a ValueLog>,
    /// Threads to decode on; `None` decodes on the calling thread.
    pub pool: Option<&'a rayon::ThreadPool>,
}

impl<C: Deref<Target = Connection>, F: Fn() -> Result<C>> Check<'_, F> {
    /// Runs every check. Damage that stops a table's scan is a problem of the report, and
    /// the other tables are still checked.
    pub(crate) fn run(&self) -> VerifyReport {
        let mut report = VerifyReport::default();
        for table in &self.schema.tables {
            if let Err(problem) = self.table(table, &mut report) {
                report.problems.push(problem);
            }
        }
        // Rows the table scan cannot see (a truncated file) or keys the index has lost
        // (damage to index pages) do not show up above; the recorded count and SQLite's
        // own check find them.
        self.totals(&mut report);
        self.names(&mut report);
        self.chunks(&mut report);
        match (self.connect)() {
            Ok(conn) => report.problems.extend(recovery::check(&conn)),
            Err(e) => report.problems.push(format!("the integrity check could not run: {e}")),
        }
        report
    }

    /// Checks one table chunk by chunk; `Err` describes damage that stopped the scan.
    fn table(&self, table: &TableSql, report: &mut VerifyReport) -> Result<(), String> {
        let mut after = 0i64;
        loop {
            // Each chunk is read and its keys looked up in one read transaction, so that a
            // concurrent eviction or remove cannot pass for a lost index entry.
            let read = |conn: &Connection| -> Result<(Vec<Lenient>, Vec<bool>)> {
                let mut chunk = scan::chunk(conn, &table.scan, after, CHUNK)
                    .map_err(|e| e.into_error("reading its rows".to_string()))?;
                // Values in the file are read inside the snapshot that names their places
                // (compaction gives a segment back only once no snapshot points into it); a
                // place the file cannot give stays, and is reported below.
                for row in &mut chunk {
                    if let Some(bytes) = row.place.and_then(|place| self.log?.read(place).ok()) {
                        (row.data, row.place) = (bytes, None);
                    }
                }
                let mut exists =
                    conn.prepare_cached(&table.exists).context(|| table.name.clone())?;
                let indexed = chunk
                    .iter()
                    .map(|row| {
                        row.key()
                            .is_some_and(|key| matches!(exists.exists([key.as_bytes()]), Ok(true)))
                    })
                    .collect();
                Ok((chunk, indexed))
            };
            let (chunk, indexed) = (self.connect)()
                .and_then(|conn| in_read_transaction(&conn, read))
                .map_err(|e| format!("{}: the scan stopped after row {after}: {e}", table.name))?;
            let Some(last) = chunk.last().map(|row| row.rowid) else { return Ok(()) };
            report.checked += chunk.len() as u64;
            for ((key, intact), indexed) in self.decode_all(&chunk).into_iter().zip(indexed) {
                if !intact {
                    report.corrupt.push(key);
                } else if !indexed && !self.readable(table, &key) {
                    // On a damaged file a lookup that failed once can succeed on another
                    // connection (seen with flipped bytes): a key is only listed if a read
                    // cannot find it either.
                    report.unreachable.push(key);
                }
            }
            after = last;
        }
    }

    /// Each row's key and whether it decodes to bytes that hash to it. A key blob of the
    /// wrong length cannot address anything; it is reported under the hash of what it holds.
    fn decode_all(&self, chunk: &[Lenient]) -> Vec<(Key, bool)> {
        let (log, dicts) = (self.log, self.dicts);
        let decode = |row: &Lenient| match row.key() {
            Some(key) => (key, intact_row(log, dicts, &key, row.raw_len, &row.data, row.place)),
            None => (Key::of(&row.key), false),
        };
        match self.pool {
            Some(pool) => pool.install(|| chunk.par_iter().map(decode).collect()),
            None => chunk.iter().map(decode).collect(),
        }
    }

    /// Whether a read by key finds the row of `key` in `table` and it checks.
    fn readable(&self, table: &TableSql, key: &Key) -> bool {
        let found = (self.connect)().and_then(|conn| {
            let select = table.select(Generation::Young, false);
            let mut stmt = conn.prepare_cached(select).context(|| table.name.clone())?;
            stmt.query_row([&key.as_bytes()[..]], |r| {
                let row = select.columns.read(r);
                // Checked inside the snapshot, as above.
                Ok(intact_row(self.log, self.dicts, key, row.raw_len()?, row.data()?, row.place()?))
            })
            .context(|| format!("reading {key}"))
        });
        matches!(found, Ok(true))
    }

    /// Recounts the totals from the rows and compares them with the recorded ones, in one
    /// read transaction, so that concurrent saves, removes and evictions (by this or other
    /// processes) cannot pass for damage.
    fn totals(&self, report: &mut VerifyReport) {
        let counted = (self.connect)().and_then(|conn| {
            in_read_transaction(&conn, |conn| {
                Ok((
                    meta::read_totals(conn)?,
                    crate::check::totals::count_totals(conn, self.schema)?,
                ))
            })
        });
        match counted {
            Ok((recorded, counted)) => {
                for (what, recorded, counted) in [
                    ("objects", recorded.objects, counted.objects),
                    ("raw bytes", recorded.raw_bytes, counted.raw_bytes),
                    ("stored bytes", recorded.stored_bytes, counted.stored_bytes),
                    ("pinned objects", recorded.pinned, counted.pinned),
                    ("pinned bytes", recorded.pinned_bytes, counted.pinned_bytes),
                    ("chunks", recorded.chunks, counted.chunks),
                    ("chunk bytes", recorded.chunk_bytes, counted.chunk_bytes),
                ] {
                    if recorded != counted {
                        report.problems.push(format!(
                            "the stash records {recorded} {what} but its rows hold {counted}"
                        ));
                    }
                }
            }
            Err(e) => report.problems.push(format!("the totals cannot be read and recounted: {e}")),
        }
    }

    /// Counts the names against the recorded total and looks for names whose object is
    /// missing (which only damage to the file can make).
    fn names(&self, report: &mut VerifyReport) {
        let counted = (self.connect)().and_then(|conn| {
            in_read_transaction(&conn, |conn| {
                let recorded = meta::read_count(conn, "names")?;
                let (mut names, mut dangling) = (0, 0);
                // A root an incomplete model keeps aside keeps its names.
                let kept: HashSet<Key> =
                    models::hidden_roots(conn)?.into_iter().map(|(key, _)| key).collect();
                names::each_key(conn, |key| {
                    names += 1;
                    let stored = key.is_some_and(|key| {
                        if kept.contains(&key) {
                            return true;
                        }
                        let table = self.schema.table(&key);
                        conn.prepare_cached(&table.exists)
                            .and_then(|mut stmt| stmt.exists([&key.as_bytes()[..]]))
                            .unwrap_or(false)
                    });
                    dangling += u64::from(!stored);
                })?;
                Ok((recorded, names, dangling))
            })
        });
        match counted {
            Ok((recorded, names, dangling)) => {
                report.names = names;
                if names != recorded {
                    report
                        .problems
                        .push(format!("the stash records {recorded} names but {names} were found"));
                }
                if dangling > 0 {
                    report.problems.push(format!("{dangling} names point to no stored object"));
                }
            }
            Err(e) => report.problems.push(format!("the names cannot be checked: {e}")),
        }
    }
}

/// Whether a stored row decodes to bytes that hash to `key`; for a chunked object's
/// manifest, whether it is whole (its chunks are checked by the chunk pass,
/// `check/chunked.rs`).
pub(crate) fn intact(key: &Key, raw_len: i64, stored: &[u8], dicts: &Dictionaries) -> bool {
    if manifest::is_manifest(stored) {
        return Manifest::decode(stored, raw_len).is_ok();
    }
    codec::decode_checked(key, raw_len, stored, dicts).is_ok()
}

/// Whether a row's value, in the row (`data`) or in the file of values `log` (`place`),
/// decodes to bytes that hash to `key`.
pub(crate) fn intact_row(
    log: Option<&ValueLog>,
    dicts: &Dictionaries,
    key: &Key,
    raw_len: i64,
    data: &[u8],
    place: Option<Place>,
) -> bool {
    match place {
        None => intact(key, raw_len, data, dicts),
        Some(place) => log
            .and_then(|log| log.read(place).ok())
            .is_some_and(|data| intact(key, raw_len, &data, dicts)),
    }
}

/// What a report that is not sound says is wrong, in one line (a repair's reason).
pub(crate) fn summary(report: &VerifyReport) -> String {
    let mut parts = Vec::new();
    if !report.corrupt.is_empty() {
        parts.push(format!("{} of {} objects are corrupt", report.corrupt.len(), report.checked));
    }
    if !report.unreachable.is_empty() {
        parts.push(format!("{} objects are not in the key index", report.unreachable.len()));
    }
    parts.extend(report.problems.iter().cloned());
    parts.join("; ")
}
