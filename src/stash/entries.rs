//! Listing what a stash holds: keys with their raw and stored sizes, table by table.
//!
//! The iterator reads a chunk of rows per query and holds no connection between chunks,
//! so listing a large stash neither keeps the writer waiting nor loads every key at once.
//! It owns what it reads with, so it may outlive the borrow of the handle that made it
//! (a Python iterator does).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::db::readers::Readers;
use crate::db::scan;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::writer::Shared;

/// Rows read per query.
const CHUNK: usize = 1_024;

/// One stored object, as listed by [`Stash::entries`](crate::Stash::entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The object's key.
    pub key: Key,
    /// Its size before compression.
    pub raw_bytes: u64,
    /// Its size as stored.
    pub stored_bytes: u64,
}

/// Iterator over every stored object, in storage order, table by table.
pub struct Entries {
    readers: Arc<Readers>,
    shared: Arc<Shared>,
    table: usize,
    after: i64,
    buffer: VecDeque<Entry>,
    failed: bool,
}

impl Entries {
    pub(crate) fn new(readers: Arc<Readers>, shared: Arc<Shared>) -> Self {
        Entries { readers, shared, table: 0, after: 0, buffer: VecDeque::new(), failed: false }
    }

    /// Reads the next chunk into the buffer; false when every table is done.
    fn fill(&mut self) -> Result<bool> {
        let tables = &self.shared.schema.tables;
        while self.table < tables.len() {
            let table = &tables[self.table];
            let reader = self.readers.checkout()?;
            let rows = scan::chunk(&reader, &table.list, self.after, CHUNK).map_err(|e| {
                e.into_error(format!("listing {} after row {}", table.name, self.after))
            })?;
            for row in rows {
                self.after = row.rowid;
                let key = row.key().ok_or_else(|| {
                    Error::corrupt(
                        Key::of(&row.key),
                        format!(
                            "row {} of {} has a {}-byte key",
                            row.rowid,
                            table.name,
                            row.key.len()
                        ),
                    )
                })?;
                self.buffer.push_back(Entry {
                    key,
                    raw_bytes: row.raw_len.max(0) as u64,
                    stored_bytes: row.stored_len,
                });
            }
            if !self.buffer.is_empty() {
                return Ok(true);
            }
            self.table += 1;
            self.after = 0;
        }
        Ok(false)
    }
}

impl Iterator for Entries {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        if self.buffer.is_empty() {
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        self.buffer.pop_front().map(Ok)
    }
}
