//! The writer adds what its handle counted (`cache/counts.rs`) to the stash's counters
//! (`db/counts.rs`): in each transaction it commits anyway, and in the one that records
//! uses when idle, so counting costs no transaction of its own while reads come.
//!
//! What it has added is the handle's counts as they were at its last commit; a transaction
//! rolled back adds nothing, so its counts go with the next one.

use std::time::UNIX_EPOCH;

use super::state::Writer;
use super::stop::{Failure, Stop};
use super::tx;
use crate::cache::counts::{Count, Snapshot};
use crate::db::counts;

impl Writer {
    /// Adds what the handle counted since `from` to the stash's counters, in the open
    /// transaction; the handle's counts as added, to be recorded once the transaction
    /// commits.
    pub(super) fn write_counts(&self, from: &Snapshot) -> Result<Snapshot, Stop> {
        let now = self.shared.counts.snapshot();
        let counted = now.since(from);
        if !counted.is_zero() {
            // A difference of counts as a signed number: a count can go down (a save the
            // writer finds stored already moves from saved to saved again).
            let entries: Vec<(&str, i64)> =
                Count::ALL.iter().map(|&c| (c.name(), counted.get(c) as i64)).collect();
            let opened = self.shared.counts.opened.duration_since(UNIX_EPOCH).unwrap_or_default();
            counts::add(&self.conn, &entries, opened.as_millis() as i64)?;
        }
        Ok(now)
    }

    /// Records the uses held in memory and what the handle counted, in a transaction of
    /// their own (when idle, and at close).
    pub(super) fn record_uses_and_counts(&mut self) -> Result<(), Failure> {
        let from = self.shared.counts.recorded();
        let counted = self.transaction(|writer| {
            tx::write_uses(&writer.conn, &writer.shared, writer.uses_apart());
            writer.write_counts(&from)
        })?;
        self.shared.counts.set_recorded(counted);
        Ok(())
    }
}
