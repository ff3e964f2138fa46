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
        // own check find them. Each is recounted in one read transaction with the
        // recorded totals, so that concurrent saves, removes and evictions (by this or
        // other processes) cannot pass for damage.
        self.verify_totals(&mut report);
        self.verify_names(&mut report);
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
                    ("objects", recorded.objects, counted.objects),
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
            Err(e) => report.problems.push(format!("the totals cannot be read and recounted: {e}")),
        }
    }

    /// Counts the names against the recorded total and looks for names whose object is
    /// missing (which only damage to the file can make).
    fn verify_names(&self, report: &mut VerifyReport) {
        let counted = self.readers.checkout().and_then(|r| {
            r.in_transaction(|conn| {
                let recorded = schema::read_count(conn, "names")?;
                let mut names = 0;
                let mut dangling = 0;
                names::each_key(conn, |key| {
                    names += 1;
                    if !key.is_some_and(|key| matches!(self.stored(conn, &key), Ok(true))) {
                        dangling += 1;
                    }
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
        let scanned = pagescan::scan(self.path(), |(key, raw_len, data)| {
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
        let indexed = pagescan::scan_index_keys(self.path(), |key| {
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
            // Each chunk is read and its keys looked up in one read transaction, so that a
            // concurrent eviction or remove cannot pass for a lost index entry.
            let read = |conn: &Connection| -> Result<(Vec<scan::ScannedRow>, Vec<bool>)> {
                let chunk = scan::chunk(conn, &table.scan, after, SCAN_CHUNK)
                    .map_err(|e| e.into_error(String::new()))?;
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
            let (chunk, indexed) =
                self.readers.checkout().and_then(|reader| reader.in_transaction(read)).map_err(
                    |e| format!("{}: the scan stopped after row {after}: {e}", table.name),
                )?;
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
            for ((key, ok), indexed) in checked.into_iter().zip(indexed) {
                if !ok {
                    report.corrupt.push(key);
                } else if !indexed && !self.readable(&key) {
                    // On a damaged file a lookup that failed once can succeed on another
                    // connection (seen with flipped bytes): a key is only listed if a read
                    // cannot find it either.
                    report.unreachable.push(key);
                }
            }
            after = last;
        }
    }

    /// Whether a read by key finds and checks the object (without counting as a use).
    fn readable(&self, key: &Key) -> bool {
        let found = self.readers.checkout().and_then(|reader| self.select_row(&reader, key));
        matches!(found, Ok(Some((raw_len, data, _)))
            if codec::decode_checked(key, raw_len, &data, &self.dicts).is_ok())
    }
}
