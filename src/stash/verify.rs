//! Verifying: the stash's check (`check.rs`: every row decoded and hashed, every intact key
//! looked up, the totals recounted, the names, SQLite's integrity check), on this handle's
//! read connections and threads. Only when something is wrong are the file's pages read
//! directly (`pagescan.rs`), as salvage does, to name the keys `get` cannot serve.

use std::collections::HashSet;

use crate::check::{self, Check};
use crate::error::Result;
use crate::key::Key;
use crate::pagescan;
use crate::stats::VerifyReport;

use super::Stash;

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
        let check = Check {
            connect: || self.readers.checkout(),
            schema: &self.shared.schema,
            dicts: &self.dicts,
            pool: Some(&self.pool),
        };
        let mut report = check.run();
        if !report.problems.is_empty() {
            self.verify_pages(&mut report);
        }
        Ok(report)
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
            let intact = check::intact(&key, raw_len, &data, &self.dicts);
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
}
