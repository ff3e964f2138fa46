//! What the writer thread owns: its connection, what it knows of the stash, and the work it
//! owes between batches (moves of the young key index, one-off evictions). The loop is
//! `run.rs`; each kind of work between batches adds its methods in a file of its own
//! (`upkeep.rs`, `generations.rs`, `compact.rs`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::Connection;

use super::{Shared, Trim};
use crate::db::key_filter::KeyFilter;
use crate::report::stats::Evicted;
use crate::writer::model_memory::Models;

/// What the writer thread owns.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) shared: Arc<Shared>,
    pub(super) batch_size: usize,
    /// Objects stored (by this handle's estimate: other processes add theirs), kept
    /// current by each commit; it only sizes batches.
    pub(super) objects: u64,
    pub(super) page_size: u64,
    /// Whether every sender is gone (the handle is closing).
    pub(super) senders_gone: bool,
    /// Milliseconds after its last use during which an object is not evicted.
    pub(super) grace: i64,
    /// The size cap the stash records, read after every commit (another handle may set it).
    pub(super) cap: Option<u64>,
    /// Whether the database gives free pages back (`auto_vacuum = INCREMENTAL`).
    pub(super) incremental: bool,
    /// One-off evictions waiting or under way, in order.
    pub(super) jobs: VecDeque<Job>,
    /// Whether an eviction down to the cap is under way: the stash went over its
    /// high-water mark and is not yet down to its low-water mark.
    pub(super) evicting: bool,
    /// Whether upkeep changed the file since the last checkpoint it ran.
    pub(super) checkpoint_owed: bool,
    /// Moves of young key indexes owed (`writer/generations.rs`).
    pub(super) moves: Moves,
    /// When the writer last opened a transaction for a batch: it is idle once nothing has
    /// written for [`uses::RECORD_EVERY`] (flushes alone do not count).
    pub(super) last_write: Instant,
    /// Whether the object tables are known to have the index of uses eviction reads
    /// (built at the first eviction or cap, `schema.rs`).
    pub(super) removals_indexed: bool,
    /// The filter of stored key prefixes (`key_filter.rs`), while it holds.
    pub(super) filter: Option<KeyFilter>,
    /// SQLite's `data_version` at the start of the last write transaction: it changes when
    /// another connection commits.
    pub(super) data_version: i64,
    /// New rows this writer has written since another connection last committed: a filter
    /// is built (again) once they are enough to pay for reading the indexes.
    pub(super) quiet_rows: u64,
    /// Whether the writer said that upkeep is deferred for want of disk space.
    pub(super) told_disk_full: bool,
    /// Commits since the writer last made sure of the reserve of disk space.
    pub(super) commits_since_reserve: u32,
    /// A trim under way found the disk full: it goes in small steps, each folded back into
    /// the file (`upkeep.rs`).
    pub(super) tight: bool,
    /// What the writer knows of the stash's models (`writer/models.rs`).
    pub(super) models: Models,
    /// SQLite's `data_version` when the writer last read the models' state: another
    /// connection's commit changes it.
    pub(super) models_seen: Option<i64>,
    /// When the writer last looked for assemblies whose owners are gone (`upkeep.rs`).
    pub(super) orphans_checked: Option<std::time::Instant>,
}

/// The moves the writer owes.
#[derive(Debug, Default)]
pub(super) struct Moves {
    /// Keys the young index may hold before it is moved.
    pub(super) young_keys: u64,
    /// Rows added (by this writer's estimate) when the young index was last counted.
    pub(super) counted_at: u64,
    /// Slices left to move, in order: prefixes from the first (inclusive) to the second
    /// (exclusive; the end of the key space when `None`), as big-endian 8-byte blobs.
    pub(super) slices: VecDeque<(u64, Option<u64>)>,
}

impl Moves {
    pub(super) fn new(young_keys: u64) -> Self {
        Moves { young_keys: young_keys.max(1), ..Moves::default() }
    }
}

/// A one-off eviction under way.
pub(crate) struct Job {
    pub(super) trim: Trim,
    pub(super) done: Evicted,
    /// Whether the objects unused since the job's time are all evicted.
    pub(super) aged_out: bool,
}

impl Job {
    pub(super) fn new(trim: Trim) -> Self {
        Job { trim, done: Evicted::default(), aged_out: false }
    }
}
