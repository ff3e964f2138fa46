//! Listing what a stash holds: keys with their raw and stored sizes, table by table.
//!
//! The iterator reads a chunk of rows per query and holds no connection between chunks,
//! so listing a large stash neither keeps the writer waiting nor loads every key at once.

use std::collections::VecDeque;

use rusqlite::params;

use crate::error::{DbContext, Error, Result};
use crate::key::Key;
use crate::readers::Readers;
use crate::schema::Schema;

/// Rows read per query.
const CHUNK: i64 = 1_024;

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
pub struct Entries<'a> {
    readers: &'a Readers,
    schema: &'a Schema,
    table: usize,
    after: i64,
    buffer: VecDeque<Entry>,
    failed: bool,
}

impl<'a> Entries<'a> {
    pub(crate) fn new(readers: &'a Readers, schema: &'a Schema) -> Self {
        Entries { readers, schema, table: 0, after: 0, buffer: VecDeque::new(), failed: false }
    }

    /// Reads the next chunk into the buffer; false when every table is done.
    fn fill(&mut self) -> Result<bool> {
        while self.table < self.schema.tables.len() {
            let table = &self.schema.tables[self.table];
            let reader = self.readers.checkout()?;
            let mut stmt =
                reader.prepare_cached(&table.list).context(|| format!("listing {}", table.name))?;
            let rows = stmt
                .query_map(params![self.after, CHUNK], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .context(|| format!("listing {}", table.name))?;
            for row in rows {
                let (rowid, key, raw, stored) =
                    row.context(|| format!("listing {}", table.name))?;
                if rowid <= self.after {
                    // A damaged b-tree led the cursor back; going on would loop forever.
                    return Err(Error::db(
                        format!(
                            "listing {}: row {rowid} came after row {}",
                            table.name, self.after
                        ),
                        rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                            None,
                        ),
                    ));
                }
                self.after = rowid;
                let key = Key::from_slice(&key).ok_or_else(|| {
                    Error::corrupt(
                        Key::of(&key),
                        format!("row {rowid} of {} has a {}-byte key", table.name, key.len()),
                    )
                })?;
                self.buffer.push_back(Entry {
                    key,
                    raw_bytes: raw.max(0) as u64,
                    stored_bytes: stored.max(0) as u64,
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

impl Iterator for Entries<'_> {
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
