//! Verifying: the stash's check (`check.rs`: every row decoded and hashed, every intact key
//! looked up, the totals recounted, the names, SQLite's integrity check), on this handle's
//! read connections and threads. Only when something is wrong are the file's pages read
//! directly (`pagescan.rs`), as salvage does, to name the keys `get` cannot serve.

use std::collections::HashSet;

use crate::check::{self, Check};
use crate::codec;
use rusqlite::OptionalExtension;

use crate::check::pagescan::{self, Indexed};
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::report::stats::VerifyReport;

use super::Stash;

impl Stash {
    /// Reads every object, decompresses it and checks its hash, and looks every intact
    /// key up through the key index: lists every corrupt key and every key `get` cannot
    /// find. Also compares the count with the recorded total and runs SQLite's integrity
    /// check, which holds a read lock for its duration (the writer waits). Damage that
    /// stops a table's scan is reported as a problem and the other tables are still
    /// checked. Waits for pending writes to commit (a writer that stopped leaves what was
    /// committed, which is checked).
    ///
    /// # Errors
    /// [`Error::Busy`](crate::Error::Busy) as [`Stash::flush`], or
    /// [`Error::Database`](crate::Error::Database) if no read connection can be opened.
    pub fn verify(&self) -> Result<VerifyReport> {
        match self.flush() {
            // A writer that stopped (on damage, say) leaves what was committed to check.
            Ok(()) | Err(crate::error::Error::WriterStopped { .. }) => {}
            Err(e) => return Err(e),
        }
        let check = Check {
            connect: || self.readers.checkout(),
            schema: &self.shared.schema,
            dicts: &self.dicts,
            log: self.shared.values.as_ref(),
            pool: Some(&self.pool),
        };
        let mut report = check.run();
        if !report.problems.is_empty() {
            self.verify_pages(&mut report);
        }
        self.drop_damaged_members(&mut report)?;
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
        let log = self.shared.values.as_ref();
        let scanned = pagescan::scan(
            self.path(),
            self.shared.schema.stored(),
            |_, (key, raw_len, data, place)| {
                // A key the check listed as corrupt may be a damaged key over whole bytes.
                let known = listed.contains(&key);
                let intact =
                    !known && check::intact_row(log, &self.dicts, &key, raw_len, &data, place);
                // Bytes that are whole under a damaged key: their own key is the one lost.
                if !intact
                    && let Some(lost) = codec::key_of_intact_gzip(raw_len, &data)
                    && lost != key
                {
                    if !listed.contains(&lost) && !matches!(self.get_uncounted(&lost), Ok(Some(_)))
                    {
                        report.unreachable.push(lost);
                        listed.insert(lost);
                    }
                    return;
                }
                if known {
                    return;
                }
                match self.get_uncounted(&key) {
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
            },
        );
        // The key indexes point at rows whose cells are too damaged to be read at all: a
        // full key index names them; a prefix index gives their rowids, and a row that
        // cannot be read there is counted (its key is lost with its cell).
        let reported: HashSet<[u8; 8]> = listed.iter().chain(&untrusted).map(prefix_of).collect();
        let mut seen = HashSet::new();
        let mut lost = 0;
        let indexed = pagescan::scan_index(self.path(), |entry| match entry {
            Indexed::Key(key) => {
                if !listed.contains(&key)
                    && !untrusted.contains(&key)
                    && self.get_uncounted(&key).is_err()
                {
                    report.corrupt.push(key);
                    listed.insert(key);
                }
            }
            Indexed::Prefix(prefix, rowid) => {
                if reported.contains(&prefix) || !seen.insert((prefix, rowid)) {
                    return;
                }
                match self.key_at(&prefix, rowid) {
                    Ok(Some(key)) if prefix_of(&key) == prefix => {
                        if !listed.contains(&key) && self.get_uncounted(&key).is_err() {
                            report.corrupt.push(key);
                            listed.insert(key);
                        }
                    }
                    _ => lost += 1,
                }
            }
        });
        if let Err(e) = scanned.and(indexed) {
            report.problems.push(format!("reading the pages of the file stopped: {e}"));
        }
        report.unnamed = untrusted.len() as u64 + lost;
    }

    /// The key in the row `rowid` of the table of keys starting with `prefix`, read through
    /// SQLite.
    fn key_at(&self, prefix: &[u8; 8], rowid: i64) -> Result<Option<Key>> {
        let table = self.table(&Indexed::table_key(*prefix));
        let conn = self.readers.checkout()?;
        let sql = format!("SELECT key FROM {} WHERE rowid = ?1", table.name);
        let key: Option<Vec<u8>> = conn
            .prepare_cached(&sql)
            .and_then(|mut stmt| stmt.query_row([rowid], |r| r.get(0)).optional())
            .context(|| format!("reading row {rowid} of {}", table.name))?;
        Ok(key.as_deref().and_then(Key::from_slice))
    }
}

/// The first 8 bytes of `key`, what a prefix index holds.
fn prefix_of(key: &Key) -> [u8; 8] {
    key.as_bytes()[..8].try_into().expect("32 bytes")
}
