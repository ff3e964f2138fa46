//! A batch: the messages one transaction commits, in arrival order, and how large it may
//! grow.
//!
//! Rows are bounded by a budget of the pages one transaction may change (each page a batch
//! touches is written to the write-ahead log, and other processes wait for the write lock
//! as long as writing them takes), bytes by the stash's cap (`evict.rs`).

use std::time::Duration;

use super::op::{Message, Op};
use super::tx::Written;
use crate::writer::pending::Row;

/// Saves written into the open transaction at a time, each run sorted by key, so SQLite works
/// while producers still compress. One sorted run per batch visits each key-index page once
/// per batch and raised the writer's ceiling 1.06x-1.19x, but left the insert of the last
/// batch after compression had ended: a save of 100,000 objects and its flush ran at
/// 0.88x-0.90x (notes/experiments.md).
pub(super) const RUN_ROWS: usize = 2_048;
/// How long the writer waits for more rows before committing a batch that is not full.
/// Each commit rewrites every index page the batch touched, so a commit per handful of rows
/// costs far more than waiting; readers do not wait, they read the pending rows.
pub(super) const LINGER: Duration = Duration::from_millis(20);
/// The longest a row waits for its commit when rows keep trickling in.
pub(super) const MAX_BATCH_AGE: Duration = Duration::from_millis(500);
/// Bytes of pages one transaction may change. Random keys spread a batch over the whole key
/// index, and every page a transaction changes goes into the write-ahead log: left
/// unbounded, a batch of 100,000 rows into a 10-million-object stash would log ~500 MB
/// and hold the write lock (which other processes wait for) for as long as that takes.
/// The more rows share a logged index page, the fewer pages each row costs: 128 MiB let the
/// writer take 1.4x-1.7x the rows/s of 32 MiB at its second and third million
/// (notes/experiments.md), for a log of up to ~160 MiB between checkpoints.
pub(super) const JOURNAL_BUDGET: f64 = 128.0 * 1024.0 * 1024.0;
/// Bytes one entry of a key index of whole keys takes (32-byte key, rowid, cell overhead).
pub(super) const KEY_ENTRY_BYTES: f64 = 48.0;
/// Bytes one entry of a young index of key prefixes takes (8-byte prefix, rowid, record
/// and cell overhead).
pub(super) const PREFIX_ENTRY_BYTES: f64 = 24.0;
/// How full index pages are after random inserts (B-trees settle near ln 2).
const INDEX_PAGE_FILL: f64 = 0.7;

/// How large the next batch may grow.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limit {
    pub rows: usize,
    pub bytes: usize,
}

/// One message of a batch.
pub(super) enum Entry {
    Save(Row),
    Op(Box<dyn Op>),
}

/// The messages of one transaction, in arrival order.
#[derive(Default)]
pub(super) struct Batch {
    pub entries: Vec<Entry>,
    /// How many entries are written into the open transaction.
    pub written: usize,
    /// Whether the batch's transaction is open.
    pub open: bool,
    /// What the open transaction wrote.
    pub tx: Written,
    rows: usize,
    bytes: usize,
    /// Whether an operation a caller waits for asks for a commit now.
    urgent: bool,
}

impl Batch {
    /// Adds a message.
    pub(super) fn push(&mut self, message: Message) {
        match message {
            Message::Save(row) => {
                self.rows += 1;
                self.bytes += row.data.len();
                self.entries.push(Entry::Save(row));
            }
            Message::Op(op) => {
                self.rows += op.rows();
                self.bytes += op.bytes();
                self.urgent |= op.urgent();
                self.entries.push(Entry::Op(op));
            }
        }
    }

    /// Whether the batch should be committed now.
    pub(super) fn ready(&self, limit: Limit) -> bool {
        self.urgent || self.rows >= limit.rows || self.bytes >= limit.bytes
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries not yet written into the transaction.
    pub(super) fn unwritten(&self) -> usize {
        self.entries.len() - self.written
    }

    /// Whether any entry not yet written writes something (else no transaction is needed).
    pub(super) fn writes(&self) -> bool {
        self.entries[self.written..].iter().any(|entry| match entry {
            Entry::Save(_) => true,
            Entry::Op(op) => op.writes(),
        })
    }

    /// Saves in the batch.
    pub(super) fn rows(&self) -> usize {
        self.rows
    }
}

/// The most rows a batch may hold so that the pages it is expected to change in a key
/// index of `entries` entries of `entry_bytes` each fit `budget` bytes.
///
/// `b` random keys touch `P(1 - e^(-b/P))` of `P` index pages; solving for the budget gives
/// the row count. Small stashes fit the budget whatever the batch.
pub(super) fn journal_bounded_rows(
    batch_size: usize,
    entries: u64,
    entry_bytes: f64,
    page_size: u64,
    budget: f64,
) -> usize {
    let page = page_size as f64;
    let pages = entries as f64 * entry_bytes / (page * INDEX_PAGE_FILL) + 1.0;
    let budget = budget / page;
    if pages <= budget {
        return batch_size;
    }
    let rows = -pages * (1.0 - budget / pages).ln();
    (rows as usize).clamp(1, batch_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_bound_shrinks_batches_only_for_large_stashes() {
        assert_eq!(
            journal_bounded_rows(100_000, 0, KEY_ENTRY_BYTES, 8192, JOURNAL_BUDGET),
            100_000
        );
        assert_eq!(
            journal_bounded_rows(100_000, 200_000, KEY_ENTRY_BYTES, 8192, JOURNAL_BUDGET),
            100_000
        );
        let at_10m =
            journal_bounded_rows(100_000, 10_000_000, KEY_ENTRY_BYTES, 8192, JOURNAL_BUDGET);
        assert!((10_000..30_000).contains(&at_10m), "{at_10m}");
        let at_100m =
            journal_bounded_rows(100_000, 100_000_000, KEY_ENTRY_BYTES, 8192, JOURNAL_BUDGET);
        assert!(at_100m < at_10m && at_100m > 10_000, "{at_100m}");
        // The bound never exceeds the configured batch.
        assert_eq!(journal_bounded_rows(10, 10_000_000, KEY_ENTRY_BYTES, 8192, JOURNAL_BUDGET), 10);
    }
}
