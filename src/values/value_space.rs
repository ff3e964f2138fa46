//! The space of the file of values (`value_log.rs`): segments, what is dead in each, and
//! giving a segment back.
//!
//! The file is a row of segments of [`SEGMENT`] bytes. The writer appends values into one
//! segment at a time, and a value never straddles two: the rest of a segment that the next
//! value does not fit in is padding, dead from the start. So each segment is freed on its
//! own. A row deleted (removed, evicted) adds its length to its segment's dead bytes
//! (`objstash_values_dead`). A segment mostly dead is compacted: its live values are
//! appended anew and their rows pointed at the new places, and the same transaction lists
//! the segment as free but not yet punched (`objstash_values_free`). Punching waits for a
//! barrier: a `wal_checkpoint(FULL)` that succeeds after that commit, which SQLite grants
//! only once every reader, of any process, reads the newest snapshot, so no reader still
//! holds a row that points into the segment. (A reader reads a value inside the read
//! transaction that found its row.) Under the write lock the segment's blocks are then
//! given back to the file system (`fallocate` punching a hole), and it is free: the writer
//! fills free segments, lowest first, before it grows the file.
//!
//! The append position (current segment and offset), the first segment never used, and
//! the two tables are all written in the writer's transactions, so a kill leaves them as
//! the last commit did: bytes written past the position and not committed are no one's.

use std::collections::HashMap;
use std::os::fd::AsFd;

use rusqlite::{Connection, OptionalExtension, params};

use crate::db::meta::META;
use crate::db::row::Place;
use crate::error::{DbContext, Error, Result};
use crate::settings::values::Values;
use crate::values::value_log::ValueLog;

/// Bytes of one segment.
pub(crate) const SEGMENT: u64 = 1 << 20;
/// Values this long or longer stay in their row: at most a sixteenth of a segment is lost
/// to padding before a value that does not fit.
pub(crate) const FILE_MAX: usize = 64 << 10;
/// Dead bytes per segment.
const DEAD: &str = "objstash_values_dead";
/// Segments compacted (`punched = 0`) or given back and free for reuse (`punched = 1`).
const FREE: &str = "objstash_values_free";
/// Meta rows: the segment appended into, the offset in it, the first segment never used.
const SEGMENT_ROW: &str = "values_segment";
const OFFSET_ROW: &str = "values_offset";
const HIGH_ROW: &str = "values_high";

/// The tables a new stash needs from the start: the accounting of its file of values, if it
/// keeps its values in one.
pub(crate) fn tables(values: Values) -> String {
    match values {
        Values::InRows => String::new(),
        Values::InFile => create_sql(),
    }
}

/// The tables of the accounting of a file of values.
fn create_sql() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {DEAD}(segment INTEGER PRIMARY KEY, dead INTEGER NOT NULL);\n\
         CREATE TABLE IF NOT EXISTS {FREE}(segment INTEGER PRIMARY KEY, \
         punched INTEGER NOT NULL);\n"
    )
}

/// The segment a value starts in.
fn segment_of(place: Place) -> u64 {
    place.at / SEGMENT
}

/// Counts a deleted row's value as dead, in the transaction on `conn`.
pub(crate) fn free(conn: &Connection, place: Place) -> rusqlite::Result<()> {
    add_dead(conn, segment_of(place), place.len as u64)
}

fn add_dead(conn: &Connection, segment: u64, bytes: u64) -> rusqlite::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    conn.prepare_cached(&format!(
        "INSERT INTO {DEAD}(segment, dead) VALUES (?1, ?2) \
         ON CONFLICT(segment) DO UPDATE SET dead = dead + excluded.dead"
    ))?
    .execute(params![segment as i64, bytes as i64])?;
    Ok(())
}

/// Places values in the file for one write transaction: where the last commit left the
/// append position, then segment after segment. Read and recorded under the write lock.
#[derive(Debug)]
pub(crate) struct Appender {
    segment: u64,
    offset: u64,
    /// The first segment never used.
    high: u64,
    /// Bytes placed and not yet written: runs of contiguous bytes at their offsets.
    runs: Vec<(u64, Vec<u8>)>,
    /// Padding left dead, by segment.
    padding: HashMap<u64, u64>,
}

impl Appender {
    /// The append position the transaction on `conn` sees.
    pub(crate) fn begin(conn: &Connection) -> Result<Self> {
        let read = |name: &str| -> Result<Option<u64>> {
            conn.query_row(&format!("SELECT value FROM {META} WHERE name = ?1"), [name], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
            .map(|v| v.map(|v| v.max(0) as u64))
            .context(|| format!("reading {name}"))
        };
        let segment = read(SEGMENT_ROW)?.unwrap_or(0);
        let offset = read(OFFSET_ROW)?.unwrap_or(0).min(SEGMENT);
        let high = read(HIGH_ROW)?.unwrap_or(segment + 1).max(segment + 1);
        Ok(Appender { segment, offset, high, runs: Vec::new(), padding: HashMap::new() })
    }

    /// Leaves `segment` if it is the one being appended into, so that it can be compacted:
    /// its rest is padding, and the next value goes into another segment.
    pub(crate) fn leave(&mut self, conn: &Connection, segment: u64) -> Result<()> {
        if segment == self.segment {
            *self.padding.entry(self.segment).or_default() += SEGMENT - self.offset;
            self.next_segment(conn)?;
        }
        Ok(())
    }

    /// Places `value` (shorter than [`FILE_MAX`]): its bytes wait in memory for
    /// [`Appender::write`].
    pub(crate) fn place(&mut self, conn: &Connection, value: &[u8]) -> Result<Place> {
        debug_assert!(value.len() < FILE_MAX);
        let len = value.len() as u64;
        if self.offset + len > SEGMENT {
            *self.padding.entry(self.segment).or_default() += SEGMENT - self.offset;
            self.next_segment(conn)?;
        }
        let at = self.segment * SEGMENT + self.offset;
        match self.runs.last_mut() {
            Some((start, bytes)) if *start + bytes.len() as u64 == at => {
                bytes.extend_from_slice(value);
            }
            _ => self.runs.push((at, value.to_vec())),
        }
        self.offset += len;
        Ok(Place { at, len: value.len() })
    }

    /// Takes back `place`, the last value placed (its row was not added: the key was
    /// stored already).
    pub(crate) fn unplace(&mut self, place: Place) {
        if let Some((start, bytes)) = self.runs.last_mut()
            && *start + bytes.len() as u64 == place.end()
            && place.at / SEGMENT == self.segment
        {
            bytes.truncate(bytes.len() - place.len);
            if bytes.is_empty() {
                self.runs.pop();
            }
            self.offset -= place.len as u64;
        }
    }

    /// Moves on to the lowest free segment that has been given back, or the first never
    /// used.
    fn next_segment(&mut self, conn: &Connection) -> Result<()> {
        let reused: Option<i64> = conn
            .query_row(
                &format!(
                    "DELETE FROM {FREE} WHERE segment = \
                     (SELECT min(segment) FROM {FREE} WHERE punched = 1) RETURNING segment"
                ),
                [],
                |r| r.get(0),
            )
            .optional()
            .context(|| "taking a free segment of the values file".into())?;
        self.segment = match reused {
            Some(segment) => segment as u64,
            None => {
                self.high += 1;
                self.high - 1
            }
        };
        self.offset = 0;
        // A segment taken again starts with nothing dead.
        conn.execute(&format!("DELETE FROM {DEAD} WHERE segment = ?1"), [self.segment as i64])
            .context(|| "starting a segment of the values file".into())?;
        Ok(())
    }

    /// Writes the bytes placed so far.
    pub(crate) fn write(&mut self, log: &ValueLog) -> Result<()> {
        for (at, bytes) in self.runs.drain(..) {
            log.write(at, &bytes)?;
        }
        Ok(())
    }

    /// Records the append position and the padding, in the transaction on `conn`.
    pub(crate) fn record(&mut self, conn: &Connection) -> Result<()> {
        debug_assert!(self.runs.is_empty(), "bytes placed and not written");
        for (segment, bytes) in self.padding.drain() {
            add_dead(conn, segment, bytes).context(|| "counting padding".into())?;
        }
        let mut stmt = conn
            .prepare_cached(&format!("INSERT OR REPLACE INTO {META}(name, value) VALUES (?1, ?2)"))
            .context(|| "recording the values file's position".into())?;
        for (name, value) in
            [(SEGMENT_ROW, self.segment), (OFFSET_ROW, self.offset), (HIGH_ROW, self.high)]
        {
            stmt.execute(params![name, value as i64])
                .context(|| "recording the values file's position".into())?;
        }
        Ok(())
    }
}

/// What the file of values holds, as the transaction on `conn` sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Bytes of values deleted (and padding) in segments not yet compacted.
    pub dead: u64,
    /// Segments compacted and waiting to be punched, and free ones.
    pub unpunched: u64,
    pub free: u64,
}

impl Usage {
    pub(crate) fn read(conn: &Connection) -> rusqlite::Result<Usage> {
        conn.query_row(
            &format!(
                "SELECT (SELECT coalesce(sum(dead), 0) FROM {DEAD}), \
                 (SELECT count(*) FROM {FREE} WHERE punched = 0), \
                 (SELECT count(*) FROM {FREE} WHERE punched = 1)"
            ),
            [],
            |r| {
                Ok(Usage {
                    dead: r.get::<_, i64>(0)?.max(0) as u64,
                    unpunched: r.get::<_, i64>(1)?.max(0) as u64,
                    free: r.get::<_, i64>(2)?.max(0) as u64,
                })
            },
        )
    }
}

/// Bytes of live values in the file, as the transaction on `conn` sees it: what the file
/// would hold with every dead byte given back. Eviction counts them toward the cap.
pub(crate) fn live_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let meta = |name: &str| {
        format!("coalesce((SELECT max(value, 0) FROM {META} WHERE name = '{name}'), 0)")
    };
    conn.query_row(
        &format!(
            "SELECT {high}, {offset}, (SELECT coalesce(sum(dead), 0) FROM {DEAD}), \
             (SELECT count(*) FROM {FREE})",
            high = meta(HIGH_ROW),
            offset = meta(OFFSET_ROW),
        ),
        [],
        |r| {
            let get = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
            let (high, offset, dead, free) = (get(0)?, get(1)?, get(2)?, get(3)?);
            // Every segment ever used, less the dead, the free, and the current segment's
            // rest past the append position.
            let used = high.saturating_sub(free) * SEGMENT;
            Ok(used.saturating_sub(dead).saturating_sub(SEGMENT - offset.min(SEGMENT)))
        },
    )
}

/// The segment most worth compacting: the one with the most dead bytes, if it holds at
/// least `least`.
pub(crate) fn worst_segment(conn: &Connection, least: u64) -> rusqlite::Result<Option<u64>> {
    conn.query_row(
        &format!("SELECT segment FROM {DEAD} WHERE dead >= ?1 ORDER BY dead DESC LIMIT 1"),
        [least as i64],
        |r| Ok(r.get::<_, i64>(0)? as u64),
    )
    .optional()
}

/// The range of packed places of values that start in `segment`.
pub(crate) fn packed_range(segment: u64) -> (i64, i64) {
    let first = Place { at: segment * SEGMENT, len: 0 }.pack();
    let past = Place { at: (segment + 1) * SEGMENT, len: 0 }.pack();
    (first, past)
}

/// Lists `segment`, whose live values have all moved, as free and not yet punched.
pub(crate) fn compacted(conn: &Connection, segment: u64) -> rusqlite::Result<()> {
    conn.execute(&format!("DELETE FROM {DEAD} WHERE segment = ?1"), [segment as i64])?;
    conn.execute(
        &format!("INSERT OR REPLACE INTO {FREE}(segment, punched) VALUES (?1, 0)"),
        [segment as i64],
    )?;
    Ok(())
}

/// The segments compacted and not yet given back.
pub(crate) fn unpunched(conn: &Connection) -> rusqlite::Result<Vec<u64>> {
    conn.prepare_cached(&format!("SELECT segment FROM {FREE} WHERE punched = 0"))?
        .query_map([], |r| Ok(r.get::<_, i64>(0)? as u64))?
        .collect()
}

/// Gives back the blocks of those of `segments` still compacted and not given back, and
/// lists them free: in the transaction on `conn`, which holds the write lock, and only
/// after the caller's barrier (see the module's documentation). Returns how many.
pub(crate) fn punch(conn: &Connection, log: &ValueLog, segments: &[u64]) -> Result<u64> {
    let mut punched = 0;
    for &segment in segments {
        let listed = conn
            .execute(
                &format!("UPDATE {FREE} SET punched = 1 WHERE segment = ?1 AND punched = 0"),
                [segment as i64],
            )
            .context(|| "listing a segment of the values file free".into())?;
        if listed == 1 {
            log.punch(segment * SEGMENT, SEGMENT)?;
            punched += 1;
        }
    }
    Ok(punched)
}

impl ValueLog {
    /// Gives the blocks of `len` bytes at `at` back to the file system; the file keeps its
    /// length, and the range reads as zeros.
    pub(crate) fn punch(&self, at: u64, len: u64) -> Result<()> {
        use rustix::fs::{FallocateFlags, fallocate};
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match fallocate(self.file().as_fd(), flags, at, len) {
            Ok(()) => Ok(()),
            // A file system that cannot punch keeps the blocks; the segment is still
            // written over when it is taken again.
            Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
            Err(e) => Err(Error::io("giving a segment of the values file back", e.into())),
        }
    }
}

/// The values a salvage keeps in the file, from which it rebuilds the file's accounting:
/// every segment below the last one used is dead but for what is kept, and appending
/// starts at a segment never used.
#[derive(Debug, Default)]
pub(crate) struct LiveValues {
    /// Length by offset: a row met twice (by SQLite and by the page scan) counts once.
    places: HashMap<u64, usize>,
}

impl LiveValues {
    pub(crate) fn add(&mut self, place: Place) {
        self.places.insert(place.at, place.len);
    }

    /// Writes the accounting into the new database on `conn`.
    pub(crate) fn restore(&self, conn: &Connection) -> Result<()> {
        let mut live: HashMap<u64, u64> = HashMap::new();
        for (&at, &len) in &self.places {
            *live.entry(at / SEGMENT).or_default() += len as u64;
        }
        let high = live.keys().max().map_or(0, |last| last + 1);
        conn.execute_batch(&create_sql()).context(|| "creating the values file's tables".into())?;
        for segment in 0..high {
            let dead = SEGMENT.saturating_sub(live.get(&segment).copied().unwrap_or(0));
            add_dead(conn, segment, dead).context(|| "counting the values file's dead".into())?;
        }
        let mut appender = Appender {
            segment: high,
            offset: 0,
            high: high + 1,
            runs: Vec::new(),
            padding: HashMap::new(),
        };
        appender.record(conn)
    }
}
