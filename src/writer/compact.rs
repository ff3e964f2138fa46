//! The writer's upkeep of the file of values (`value_space.rs`): compacting a segment that
//! is mostly dead, and giving compacted segments back once no reader can still hold a row
//! that points into them.

use std::time::Duration;

use rusqlite::params;

use super::state::Writer;
use super::stop::{Failure, StopContext};
use crate::cache::evict::Marks;
use crate::db::row::Place;
use crate::values::value_space::{self, Appender, SEGMENT, Usage};

/// Without a cap, a segment is compacted once half of it is dead: the file is at most about
/// twice what it holds, and a byte is copied at most once per byte freed.
const UNCAPPED_DEAD: u64 = SEGMENT / 2;
/// Under a cap, once the dead bytes of all segments exceed their share
/// ([`Marks::dead_values`]), the segment with the most is compacted if it holds at least
/// this many (a byte copied frees at least a seventh of a byte); at twice their share, it
/// is compacted whatever it holds, so that the files stay within the cap (with dead bytes
/// spread evenly, a byte copied then frees at least a fifteenth of a byte).
const CAPPED_DEAD: u64 = SEGMENT / 8;
/// Rows one step of compaction moves at most: a segment of values of 256 bytes.
const COMPACTION_ROWS: usize = (SEGMENT / 256) as usize;
/// Rows one step of compaction moves at least, under the smallest cap.
const MIN_COMPACTION_ROWS: usize = 16;

impl Writer {
    /// One step of the file of values' upkeep, if the stash has one: gives compacted
    /// segments back, or compacts one segment. Returns whether more may be owed.
    pub(super) fn values_upkeep(&mut self) -> Result<bool, Failure> {
        if self.shared.values.is_none() {
            return Ok(false);
        }
        let usage = Usage::read(&self.conn).stop(|| "reading the values file's space".into())?;
        if usage.unpunched > 0 && self.punch()? {
            return Ok(true);
        }
        let least = match self.cap {
            None => UNCAPPED_DEAD,
            Some(cap) if usage.dead > 2 * Marks::dead_values(cap) => 1,
            Some(cap) if usage.dead > Marks::dead_values(cap) => CAPPED_DEAD,
            Some(_) => return Ok(false),
        };
        self.compact(least)
    }

    /// Gives the compacted segments back, once a barrier shows that every reader reads a
    /// snapshot taken after they were compacted. Returns whether it did.
    fn punch(&mut self) -> Result<bool, Failure> {
        // Listed before the barrier: a segment compacted after it (by another process's
        // writer) waits for the next one.
        let listed =
            value_space::unpunched(&self.conn).stop(|| "listing compacted segments".into())?;
        if listed.is_empty() || !self.readers_caught_up() {
            return Ok(false);
        }
        let punched = self.transaction(|writer| {
            let log = writer.shared.values.as_ref().expect("a stash with a file of values");
            Ok(value_space::punch(&writer.conn, log, &listed)?)
        })?;
        Ok(punched > 0)
    }

    /// Whether every reader, of any process, reads the newest snapshot: a full checkpoint
    /// that succeeds without waiting. (Without a write-ahead log, a commit waits for every
    /// reader to end, and the checkpoint is a no-op that succeeds.)
    fn readers_caught_up(&self) -> bool {
        let checkpoint = self.conn.busy_timeout(Duration::ZERO).and_then(|()| {
            self.conn.query_row("PRAGMA wal_checkpoint(FULL)", [], |r| r.get::<_, i64>(0))
        });
        if let Err(e) = self.conn.busy_timeout(self.shared.busy) {
            log::warn!("objstash: restoring the busy timeout: {e}");
        }
        matches!(checkpoint, Ok(0))
    }

    /// Compacts the segment with the most dead bytes, if it has at least `least`: moves up
    /// to a step's rows of its live values (appended anew, their rows pointed at them) in
    /// one transaction, which lists the segment compacted once none is left. A step is
    /// bounded so that its transaction fits the write-ahead log's share of a cap (a segment
    /// of small values in the bucketed layout dirties a leaf of each of 256 tables).
    /// Returns whether it did.
    fn compact(&mut self, least: u64) -> Result<bool, Failure> {
        self.index_removals()?;
        let step = self.compaction_rows();
        let compacted = self.transaction(|writer| {
            let conn = &writer.conn;
            let log = writer.shared.values.as_ref().expect("a stash with a file of values");
            let mut appender = Appender::begin(conn)?;
            let worst = value_space::worst_segment(conn, least)
                .stop(|| "choosing a segment to compact".into())?;
            let Some(segment) = worst else { return Ok(false) };
            let what = || format!("compacting segment {segment} of the values file");
            appender.leave(conn, segment)?;
            let (first, past) = value_space::packed_range(segment);
            let mut left = step;
            // Whether the segment may still hold live values once the step is done.
            let mut more = false;
            for table in &writer.shared.schema.tables {
                if left == 0 {
                    more = true;
                    break;
                }
                // One more than the step allows: whether the table has more.
                let mut rows: Vec<(i64, Option<Place>)> = conn
                    .prepare_cached(&table.places_in)
                    .and_then(|mut stmt| {
                        stmt.query_map(params![first, past, left as i64 + 1], |r| {
                            let row = table.places_in.columns.read(r);
                            Ok((row.rowid()?, row.place()?))
                        })?
                        .collect()
                    })
                    .stop(what)?;
                if rows.len() > left {
                    more = true;
                    rows.truncate(left);
                }
                left -= rows.len();
                let mut update = conn.prepare_cached(&table.move_place).stop(what)?;
                for (rowid, place) in rows {
                    let Some(old) = place else { continue };
                    // A value the file cannot give is copied as zeros: its row reads as
                    // damaged, as it did before (verify reports it).
                    let value = log.read(old).unwrap_or_else(|_| vec![0; old.len]);
                    let new = appender.place(conn, &value)?;
                    update.execute(params![rowid, new.pack()]).stop(what)?;
                    value_space::free(conn, old).stop(what)?;
                }
                if more {
                    break;
                }
            }
            appender.write(log)?;
            writer.sync_values()?;
            appender.record(conn)?;
            if !more {
                value_space::compacted(conn, segment).stop(what)?;
            }
            Ok(true)
        })?;
        if compacted {
            self.checkpoint_owed = true;
        }
        Ok(compacted)
    }

    /// Rows one step of compaction moves: under a cap, about what the write-ahead log's
    /// share holds at three pages dirtied a row (its table's leaf, the index of places and
    /// of uses); without one, a segment's worth of small values.
    fn compaction_rows(&self) -> usize {
        self.marks().map_or(COMPACTION_ROWS, |marks| {
            let pages = marks.log / self.page_size.max(512);
            (pages as usize / 3).clamp(MIN_COMPACTION_ROWS, COMPACTION_ROWS)
        })
    }
}
