//! Verifying: read and check every object, then look for damage beyond single rows.
//!
//! Rows are read a chunk at a time (`scan.rs`) and checked in parallel with the same
//! checked decode `get` uses. Every intact key is then looked up through the key index,
//! the object count is compared with the recorded total, and SQLite's integrity check
//! runs. Only when something is wrong are the file's pages read directly (`pagescan.rs`),
//! as salvage does, to name the keys `get` cannot serve.

use std::collections::HashSet;

use rayon::prelude::*;
use rusqlite::Connection;

use crate::codec;
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::names;
use crate::pagescan;
use crate::recovery;
use crate::scan;
use crate::schema::{self, TableSql};
use crate::stats::VerifyReport;

use super::Stash;

/// Rows read per query: each query holds a read lock only briefly, so the writer is never
/// kept waiting by a long scan.
const SCAN_CHUNK: usize = 1_024;

impl Stash {
    /// Reads every object, decompresses it and checks its hash, and looks every intact
    /// key up through the key index: lists every corrupt key and every key `get` cannot
    /// find. Also compares the count with the recorded total and runs SQLite's integrity
    /// check, which holds a read lock for its duration (the writer waits). Damage that
    /// stops a table's scan is reported as a problem and the other tables are still
    /// checked. Waits for pending writes to commit.
    ///
    /// # Errors
    /// As [`Stash::flush`], or [`Error::Database`](crate::Error::Database) if no read
    /// connection can be opened.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.flush()?;
        let mut report = VerifyReport::default();
        for table in &self.shared.schema.tables {
            if let Err(problem) = self.verify_table(table, &mut report) {
                report.problems.push(problem);
            }
        }
        // Rows the table scan cannot see (a truncated file) or keys the index has lost
        // (damage to index pages) do not show up above; the recorded count and SQLite's
        // own check find them. Already flushed above: read the totals without a flush.
        match schema::read_totals(&*self.readers.checkout()?) {
            Ok(totals) => {
                if totals.objects != report.checked {
                    report.problems.push(format!(
                        "the stash records {} objects but {} were found",
                        totals.objects, report.checked
                    ));
                } else {
                    self.verify_totals(&mut report);
                }
                self.verify_names(totals.names, &mut report);
            }
            Err(e) => report.problems.push(format!("the recorded totals cannot be read: {e}")),
        }
        if let Some(problem) = recovery::check(&*self.readers.checkout()?) {
            report.problems.push(problem);
        }
        if !report.problems.is_empty() {
            self.verify_pages(&mut report);
        }
        Ok(report)
    }

    /// Recounts the byte and pin totals from the rows (in one read transaction) and
    /// compares them with the recorded ones.
    fn verify_totals(&self, report: &mut VerifyReport) {
        let schema = &self.shared.schema;
        let counted = self.readers.checkout().and_then(|r| {
            r.in_transaction(|conn| {
                Ok((schema::read_totals(conn)?, schema::count_totals(conn, schema)?))
            })
        });
        match counted {
            Ok((recorded, counted)) => {
                for (what, recorded, counted) in [
                    ("raw bytes", recorded.raw_bytes, counted.raw_bytes),
                    ("stored bytes", recorded.stored_bytes, counted.stored_bytes),
                    ("pinned objects", recorded.pinned, counted.pinned),
                    ("pinned bytes", recorded.pinned_bytes, counted.pinned_bytes),
                ] {
                    if recorded != counted {
                        report.problems.push(format!(
                            "the stash records {recorded} {what} but its rows hold {counted}"
                        ));
                    }
                }
            }
            Err(e) => report.problems.push(format!("the totals cannot be recounted: {e}")),
        }
    }

    /// Counts the names against the recorded total and looks for names whose object is
    /// missing (which only damage to the file can make).
    fn verify_names(&self, recorded: u64, report: &mut VerifyReport) {
        let counted = self.readers.checkout().and_then(|r| {
            r.in_transaction(|conn| {
                let mut names = 0;
                let mut dangling = 0;
                names::each_key(conn, |key| {
                    names += 1;
                    if !key.is_some_and(|key| matches!(self.stored(conn, &key), Ok(true))) {
                        dangling += 1;
                    }
                })?;
                Ok((names, dangling))
            })
        });
        match counted {
            Ok((names, dangling)) => {
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

    /// The file is damaged: SQLite may not reach every row, so read the table leaf pages
    /// directly (as salvage does) and look every key found there up as `get` would, to
    /// name the keys `get` cannot serve.
    fn verify_pages(&self, report: &mut VerifyReport) {
        // Bring committed pages from the write-ahead log into the file the scanner reads;
        // PASSIVE never waits for a writer. Whatever it leaves in the log is only newer
        // than what the scan sees, and every key is checked through SQLite.
        if let Ok(reader) = self.readers.checkout() {
            let _ = reader.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
        let mut listed: HashSet<Key> =
            report.corrupt.iter().chain(&report.unreachable).copied().collect();
        let mut untrusted = HashSet::new();
        let scanned = pagescan::scan(&self.path, |(key, raw_len, data)| {
            if listed.contains(&key) {
                return;
            }
            let intact = codec::decode_checked(&key, raw_len, &data, &self.dicts).is_ok();
            match self.get(&key) {
                Ok(Some(_)) => {}
                Ok(None) if intact => {
                    report.unreachable.push(key);
                    listed.insert(key);
                }
                // A damaged row the index does not know: its key may itself be damaged,
                // so it is counted, not named.
                Ok(None) => {
                    untrusted.insert(key);
                }
                Err(_) => {
                    report.corrupt.push(key);
                    listed.insert(key);
                }
            }
        });
        // The key indexes name rows whose cells are too damaged to be read at all.
        let indexed = pagescan::scan_index_keys(&self.path, |key| {
            if !listed.contains(&key) && !untrusted.contains(&key) && self.get(&key).is_err() {
                report.corrupt.push(key);
                listed.insert(key);
            }
        });
        if let Err(e) = scanned.and(indexed) {
            report.problems.push(format!("reading the pages of the file stopped: {e}"));
        }
        report.unnamed = untrusted.len() as u64;
    }

    /// Checks one table chunk by chunk; `Err` describes damage that stopped the scan.
    fn verify_table(&self, table: &TableSql, report: &mut VerifyReport) -> Result<(), String> {
        let mut after = 0i64;
        loop {
            let chunk = self
                .readers
                .checkout()
                .map_err(|e| e.to_string())
                .and_then(|reader| {
                    scan::chunk(&reader, &table.scan, after, SCAN_CHUNK).map_err(|e| e.to_string())
                })
                .map_err(|e| format!("{}: the scan stopped after row {after}: {e}", table.name))?;
            let Some(last) = chunk.last().map(|row| row.rowid) else { return Ok(()) };
            report.checked += chunk.len() as u64;
            let checked: Vec<(Key, bool)> = self.pool.install(|| {
                chunk
                    .par_iter()
                    .map(|row| match row.key() {
                        Some(key) => (
                            key,
                            codec::decode_checked(&key, row.raw_len, &row.data, &self.dicts)
                                .is_ok(),
                        ),
                        // A key blob of the wrong length cannot address anything; it is
                        // reported under the hash of what it holds.
                        None => (Key::of(&row.key), false),
                    })
                    .collect()
            });
            let mut intact = Vec::with_capacity(checked.len());
            for (key, ok) in checked {
                if ok { intact.push(key) } else { report.corrupt.push(key) }
            }
            report.unreachable.extend(self.unreachable(table, &intact));
            after = last;
        }
    }

    /// Those of `keys` (read from `table`'s rows) that the key index does not find.
    fn unreachable(&self, table: &TableSql, keys: &[Key]) -> Vec<Key> {
        let lookup = |conn: &Connection| -> Result<Vec<Key>> {
            let mut stmt = conn.prepare_cached(&table.exists).context(|| table.name.clone())?;
            Ok(keys
                .iter()
                .filter(|key| !matches!(stmt.exists([key.as_bytes()]), Ok(true)))
                .copied()
                .collect())
        };
        let candidates = match self.readers.checkout().and_then(|r| r.in_transaction(lookup)) {
            Ok(lost) => lost,
            Err(_) => keys.to_vec(),
        };
        // On a damaged file a lookup that failed once can succeed on another connection
        // (seen with flipped bytes): a key is only listed if `get` cannot find it either.
        candidates.into_iter().filter(|key| !matches!(self.get(key), Ok(Some(_)))).collect()
    }
}
