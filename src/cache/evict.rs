//! Keeping a stash within its size cap: what counts, the water marks, which rows go first,
//! and giving freed pages back to the file system.
//!
//! **What counts** is the database's pages in use (`page_count - freelist_count`), which is
//! the main file's size once free pages are given back, plus room kept for the write-ahead
//! log. The writer checks after every commit; above the high-water mark it evicts, in
//! transactions of at most [`EVICT_ROWS`] rows between its batches of saves, down to the
//! low-water mark. A capped stash's batches are smaller (a sixty-fourth of the cap, at
//! most 16 MiB), and the log is truncated back to three times that after each checkpoint
//! (`journal_size_limit`), so the log's share of the cap is bounded too. A stash with a
//! file of values counts its live values, and keeps a share for what compaction leaves in
//! the file (`value_space.rs`): the dead bytes it tolerates and one segment under
//! compaction.
//!
//! **Which rows go**: unpinned rows least recently used first (`uses.rs`), across all
//! tables of the layout (a merge of one index cursor per table), never one a save call under
//! way on this handle saved, nor one used within the grace period (default
//! [`DEFAULT_GRACE`]) in the database or in this handle's unwritten uses, so a caller's
//! `save` then `get` never races an eviction. An object larger than
//! the cap is stored, then evicted first once its grace period is over. When nothing can be
//! evicted (everything is pinned or recent), saving goes on over the cap and `stats` says
//! so.
//!
//! **Space given back**: deleted rows' pages go to SQLite's free list and are reused by
//! the next saves at once. A stash made by this version has `auto_vacuum = INCREMENTAL`, and
//! free pages beyond what the next batches will reuse are given back with
//! `incremental_vacuum`, at most [`VACUUM_PAGES`] per transaction, so the file shrinks
//! toward the cap when it is lowered. (A stash made before keeps its high-water size until
//! vacuumed; its free pages are still reused.)

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Rows, params};

use crate::large::chunks;

use crate::db::meta::Delta;
use crate::db::names::NameSql;
use crate::db::row::Columns;
use crate::db::schema::Schema;
use crate::key::Key;
use crate::values::value_space;

/// Rows evicted in one transaction at most: what bounds how long eviction keeps saves
/// waiting (about as long as one batch of saves).
pub(crate) const EVICT_ROWS: usize = 20_000;
/// Pages one incremental vacuum transaction gives back at most (32 MiB of 8 KiB pages).
pub(crate) const VACUUM_PAGES: u64 = 4_096;
/// How long after its last use an object cannot be evicted, unless the builder says
/// otherwise: the moment between a save call's return and the caller's next call (a `save`
/// then a `get`), short beside the rate at which a burst of saves grows a capped stash
/// (at 40 MB/s, 100 ms is 4 MB over the cap).
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_millis(100);
/// Free bytes an uncapped stash keeps for its next saves before giving pages back.
const UNCAPPED_RESERVE: u64 = 64 << 20;
/// The largest batch of saves, in stored bytes (the writer's bound without a cap). Rows
/// wait in memory until their batch commits, so this is most of the writer's memory: 16
/// MiB against 32 took the million example's peak from 128-132 to 101-104 MiB at the same
/// speed, for 19% more bytes written a row (notes/experiments.md).
pub(crate) const MAX_BATCH_BYTES: usize = 16 << 20;
/// The smallest batch of saves a cap can ask for.
const MIN_BATCH_BYTES: usize = 64 << 10;

/// What a cap means for the writer, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marks {
    /// Stored bytes of one batch of saves.
    pub batch_bytes: usize,
    /// The write-ahead log's share: it is truncated back to this after a checkpoint.
    pub log: u64,
    /// The file of values' share beyond its live bytes: dead bytes not yet compacted, and
    /// the segment being compacted (its live values are copied before it is given back).
    pub values: u64,
    /// Pages in use above this start an eviction...
    pub high: u64,
    /// ...which goes on down to this.
    pub low: u64,
    /// Free bytes kept for the next saves; beyond this they are given back.
    pub reserve: u64,
}

impl Marks {
    /// The marks of a cap. The file holds the pages in use plus the free pages kept for
    /// the next batch, and grows by at most one batch between two checks; the log holds
    /// one transaction's pages before its checkpoint, which for rows of a few hundred
    /// bytes are about 1.3 times their stored bytes, and up to 3 times for rows just over
    /// a page. With `values_in_file`, the file of values holds its live bytes plus at most
    /// twice [`Marks::dead_values`] and one segment. So the files stay within
    /// `high + batch + log + values`, which is the cap.
    pub(crate) fn of(cap: u64, values_in_file: bool) -> Marks {
        let batch_bytes = ((cap / 64) as usize).clamp(MIN_BATCH_BYTES, MAX_BATCH_BYTES);
        let batch = batch_bytes as u64;
        let log = 3 * batch;
        let values =
            if values_in_file { 2 * Self::dead_values(cap) + value_space::SEGMENT } else { 0 };
        let high = cap.saturating_sub(log + batch + values);
        let low = high.saturating_sub((cap / 50).max(batch));
        Marks { batch_bytes, log, values, high, low, reserve: high - low + batch }
    }

    /// Dead bytes the file of values may hold before a mostly dead segment is compacted;
    /// at twice this, the segment with the most is compacted however little it holds.
    pub(crate) fn dead_values(cap: u64) -> u64 {
        cap / 32
    }

    /// Free bytes kept without a cap.
    pub(crate) fn uncapped_reserve() -> u64 {
        UNCAPPED_RESERVE
    }
}

/// The database's pages, as its header says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Space {
    pub pages: u64,
    pub free: u64,
    pub page_size: u64,
    /// Bytes of live values in the file of values, if the stash has one.
    pub values: u64,
}

impl Space {
    /// The database's pages, and the live bytes of its file of values if `values`.
    pub(crate) fn read(conn: &Connection, values: bool) -> rusqlite::Result<Space> {
        let get = |pragma: &str| -> rusqlite::Result<u64> {
            conn.pragma_query_value(None, pragma, |r| r.get::<_, i64>(0)).map(|v| v.max(0) as u64)
        };
        Ok(Space {
            pages: get("page_count")?,
            free: get("freelist_count")?,
            page_size: get("page_size")?,
            values: if values { value_space::live_bytes(conn)? } else { 0 },
        })
    }

    /// Bytes of pages holding something, and of live values: the files' size once free
    /// pages and dead values are given back.
    pub(crate) fn in_use(&self) -> u64 {
        self.pages.saturating_sub(self.free) * self.page_size + self.values
    }

    pub(crate) fn free_bytes(&self) -> u64 {
        self.free * self.page_size
    }
}

/// A row chosen for eviction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Victim {
    pub used: i64,
    pub table: usize,
    pub rowid: i64,
    pub key: Key,
    pub raw: i64,
    pub stored: i64,
    /// Whether the row is a chunked object's manifest (its chunks go with it).
    pub chunked: bool,
}

impl Victim {
    /// The bytes evicting it is expected to free: a chunked object's are its chunks',
    /// taken at its length (chunks it shares with other objects stay, so this is an upper
    /// bound, and eviction goes on in its next round if it freed less).
    fn weight(&self) -> u64 {
        if self.chunked { self.raw.max(0) as u64 } else { self.stored.max(0) as u64 }
    }
}

/// The unpinned rows used before `before`, least recently used first across every table,
/// until `rows` rows or `stored_bytes` stored bytes are chosen; rows `skip` names are
/// passed over (used in memory since).
pub(crate) fn oldest(
    conn: &Connection,
    schema: &Schema,
    before: i64,
    rows: usize,
    stored_bytes: u64,
    skip: impl Fn(&Key) -> bool,
) -> rusqlite::Result<Vec<Victim>> {
    let mut statements = schema
        .tables
        .iter()
        .map(|table| conn.prepare_cached(&table.oldest))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut cursors = statements
        .iter_mut()
        .map(|stmt| stmt.query(params![before, rows as i64]))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // Every table's statement reads the same columns.
    let read = &schema.tables[0].oldest.columns;
    let mut heads = BinaryHeap::with_capacity(cursors.len());
    for (table, cursor) in cursors.iter_mut().enumerate() {
        if let Some(victim) = next(cursor, read, table)? {
            heads.push(Reverse(victim));
        }
    }
    let mut chosen = Vec::new();
    let mut bytes = 0;
    while let Some(Reverse(victim)) = heads.pop() {
        if let Some(following) = next(&mut cursors[victim.table], read, victim.table)? {
            heads.push(Reverse(following));
        }
        if skip(&victim.key) {
            continue;
        }
        bytes += victim.weight();
        chosen.push(victim);
        if chosen.len() >= rows || bytes >= stored_bytes {
            break;
        }
    }
    Ok(chosen)
}

fn next(cursor: &mut Rows<'_>, read: &Columns, table: usize) -> rusqlite::Result<Option<Victim>> {
    let Some(row) = cursor.next()? else { return Ok(None) };
    let row = read.read(row);
    // A key of the wrong length is damage; eviction deletes it like any other row.
    let key = row.key()?.unwrap_or(Key::from_bytes([0; 32]));
    Ok(Some(Victim {
        rowid: row.rowid()?,
        key,
        raw: row.raw_len()?,
        stored: row.stored_len()?,
        used: row.used()?,
        chunked: row.is_manifest()?,
        table,
    }))
}

/// Deletes the chosen rows and, if the stash has names, their names; counts them in
/// `delta` as removed and evicted.
pub(crate) fn delete(
    conn: &Connection,
    schema: &Schema,
    victims: &[Victim],
    names: bool,
    delta: &mut Delta,
) -> rusqlite::Result<()> {
    for victim in victims {
        let table = &schema.tables[victim.table];
        let gone = conn
            .prepare_cached(&table.evict)?
            .query_row([victim.rowid], |r| {
                let row = table.evict.columns.read(r);
                Ok((row.manifest()?, row.place()?))
            })
            .optional()?;
        let Some((manifest, place)) = gone else { continue };
        if let Some(place) = place {
            value_space::free(conn, place)?;
        }
        table.unindex(conn, &victim.key, victim.rowid)?;
        delta.objects -= 1;
        delta.raw_bytes -= victim.raw;
        delta.stored_bytes -= victim.stored;
        delta.evicted += 1;
        delta.evicted_bytes += victim.stored;
        if let Some(manifest) = manifest {
            delta.evicted_bytes +=
                chunks::release_stored(conn, &victim.key, victim.raw, &manifest, delta)? as i64;
        }
        if names {
            let unnamed = conn
                .prepare_cached(NameSql::DELETE_BY_KEY)?
                .execute([&victim.key.as_bytes()[..]])?;
            delta.names -= unnamed as i64;
        }
    }
    Ok(())
}

/// Gives up to `pages` free pages back to the file system (the file shrinks); a no-op
/// for a stash without incremental vacuum.
pub(crate) fn vacuum(conn: &Connection, pages: u64) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    Ok(())
}

/// Whether the database gives free pages back (`auto_vacuum = INCREMENTAL`).
pub(crate) fn incremental(conn: &Connection) -> rusqlite::Result<bool> {
    conn.pragma_query_value(None, "auto_vacuum", |r| r.get::<_, i64>(0)).map(|mode| mode == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_leave_room_for_the_log_and_one_batch() {
        let gib = Marks::of(1 << 30, false);
        assert_eq!(gib.batch_bytes, 16 << 20);
        assert_eq!(gib.high + gib.batch_bytes as u64 + gib.log, 1 << 30);
        let file = Marks::of(1 << 30, true);
        assert_eq!(file.high + file.batch_bytes as u64 + file.log + file.values, 1 << 30);
        assert_eq!(file.values, (1 << 30) / 16 + value_space::SEGMENT);
        assert!(gib.low < gib.high && gib.high - gib.low >= gib.batch_bytes as u64);
        let small = Marks::of(1 << 20, false);
        assert_eq!(small.batch_bytes, MIN_BATCH_BYTES);
        assert!(small.low < small.high && small.high < 1 << 20);
        // A cap too small for anything evicts everything it can.
        assert_eq!(Marks::of(1, false).high, 0);
        assert_eq!(Marks::of(1 << 20, true).high, 0);
    }
}
