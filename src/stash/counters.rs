//! The hit and miss report of a stash and of a handle, and its reset.

use std::time::{Duration, UNIX_EPOCH};

use rusqlite::Connection;

use super::Stash;
use crate::cache::counts::{Count, Snapshot};
use crate::db::counts;
use crate::error::Result;
use crate::report::counters::Counters;
use crate::writer::{RecordCounts, ResetCounters, asked};

impl Stash {
    /// What the stash served since counting began, every handle's and every process's
    /// calls: hits and misses of reads, lookups, saves of new objects and of stored ones,
    /// reads through the remote, evictions. This handle's counts are recorded first;
    /// another handle's are recorded with its writer's next commit, within about a second
    /// when it is idle, and when it closes. A read-only handle's calls are not recorded.
    ///
    /// # Errors
    /// As [`Stash::flush`] (this handle's counts are committed), or
    /// [`Error::Database`](crate::Error::Database) if they cannot be read.
    pub fn counters(&self) -> Result<Counters> {
        self.record_counts()?;
        let reader = self.readers.checkout()?;
        self.recorded_counters(&reader)
    }

    /// What this handle's calls served since it opened. Costs no read.
    #[must_use]
    pub fn handle_counters(&self) -> Counters {
        let mut counters = counters_of(&self.shared.counts.snapshot());
        counters.since = Some(self.shared.counts.opened);
        counters
    }

    /// Sets the stash's counters to 0, counting from now (`objstash stats --zero`). What
    /// this handle counted before is not added; other handles' counts not yet recorded
    /// are, when they are. [`Stash::handle_counters`] is not reset.
    ///
    /// # Errors
    /// [`Error::ReadOnly`](crate::Error::ReadOnly), [`Error::WriterStopped`](crate::Error::WriterStopped)
    /// or [`Error::Busy`](crate::Error::Busy) as for a save.
    pub fn reset_counters(&self) -> Result<()> {
        self.ask(|answer| asked(ResetCounters, answer))
    }

    /// Commits what this handle counted and the stash has not recorded, if anything.
    pub(super) fn record_counts(&self) -> Result<()> {
        if self.writer.is_some() && self.shared.counts.owed() {
            self.ask(|answer| asked(RecordCounts, answer))?;
        }
        Ok(())
    }

    /// The stash's counters as recorded, read on `conn`.
    pub(super) fn recorded_counters(&self, conn: &Connection) -> Result<Counters> {
        let recorded = counts::read(conn, &Count::names())?;
        let mut counters = counters_of(&Snapshot(
            recorded.counts.try_into().expect("a count for every name asked"),
        ));
        counters.since =
            recorded.since.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
        counters.evicted = recorded.evicted;
        counters.evicted_bytes = recorded.evicted_bytes;
        Ok(counters)
    }
}

/// The report of `counts`, with no time and no evictions.
fn counters_of(counts: &Snapshot) -> Counters {
    Counters {
        since: None,
        hits: counts.get(Count::Hits),
        misses: counts.get(Count::Misses),
        read_throughs: counts.get(Count::ReadThroughs),
        read_through_bytes: counts.get(Count::ReadThroughBytes),
        found: counts.get(Count::Found),
        absent: counts.get(Count::Absent),
        saved: counts.get(Count::Saved),
        saved_again: counts.get(Count::SavedAgain),
        evicted: 0,
        evicted_bytes: 0,
    }
}
