//! What a handle counts of its calls: reads that found their object and reads that did
//! not, lookups, saves of new objects and of objects already stored, reads through the
//! remote.
//!
//! A call adds to an atomic counter of its handle, once per call (a `get_many` of a
//! thousand keys adds once), so counting costs a few nanoseconds and no lock. The writer
//! adds what its handle counted since its last commit to the stash's counters in the meta
//! table (`db/counts.rs`) in the transactions it commits anyway, and once per
//! [`RECORD_EVERY`](crate::cache::uses::RECORD_EVERY) when idle: every process's calls
//! count in the stash without a write per read, as uses are recorded.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// One thing a handle counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    /// Keys read (`get`, `get_many`, `get_named`, `read_model`, `open_reader`) and served.
    Hits,
    /// Keys read and found nowhere.
    Misses,
    /// Of the hits, keys served through the remote.
    ReadThroughs,
    /// The bytes of those objects.
    ReadThroughBytes,
    /// Keys asked by `contains` and `missing` that are stored.
    Found,
    /// Keys asked by `contains` and `missing` that are not.
    Absent,
    /// Objects a save stored new.
    Saved,
    /// Objects a save found stored already (nothing written).
    SavedAgain,
}

impl Count {
    /// Every count, in the order of [`Snapshot`]'s entries.
    pub(crate) const ALL: [Count; 8] = [
        Count::Hits,
        Count::Misses,
        Count::ReadThroughs,
        Count::ReadThroughBytes,
        Count::Found,
        Count::Absent,
        Count::Saved,
        Count::SavedAgain,
    ];

    /// The names of every count, in [`Count::ALL`]'s order.
    pub(crate) fn names() -> Vec<&'static str> {
        Count::ALL.iter().map(|c| c.name()).collect()
    }

    /// Its name in the meta table (after `count_`) and in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Count::Hits => "hits",
            Count::Misses => "misses",
            Count::ReadThroughs => "read_throughs",
            Count::ReadThroughBytes => "read_through_bytes",
            Count::Found => "found",
            Count::Absent => "absent",
            Count::Saved => "saved",
            Count::SavedAgain => "saved_again",
        }
    }
}

/// The counts at one moment, by [`Count`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot(pub [u64; Count::ALL.len()]);

impl Snapshot {
    pub(crate) fn get(&self, count: Count) -> u64 {
        self.0[count as usize]
    }

    /// What was counted between `earlier` and this, each count modulo 2^64: read as an
    /// `i64`, a count that went down is negative.
    pub(crate) fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot(std::array::from_fn(|i| self.0[i].wrapping_sub(earlier.0[i])))
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.0.iter().all(|&n| n == 0)
    }
}

/// A handle's counters, since it opened.
#[derive(Debug)]
pub(crate) struct Counts {
    counts: [AtomicU64; Count::ALL.len()],
    /// When the handle opened: when its counting began.
    pub opened: SystemTime,
    /// The counts as the stash has recorded them, set by the writer after each commit
    /// that added them.
    recorded: Mutex<Snapshot>,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            opened: SystemTime::now(),
            recorded: Mutex::new(Snapshot::default()),
        }
    }
}

impl Counts {
    /// Adds `n` to `count`.
    pub(crate) fn add(&self, count: Count, n: u64) {
        if n > 0 {
            self.counts[count as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds the hits and misses of a read of many keys: `hits` of `asked` were served.
    pub(crate) fn read(&self, asked: usize, hits: usize) {
        self.add(Count::Hits, hits as u64);
        self.add(Count::Misses, asked.saturating_sub(hits) as u64);
    }

    /// Adds a lookup of many keys: `found` of `asked` are stored.
    pub(crate) fn looked_up(&self, asked: usize, found: usize) {
        self.add(Count::Found, found as u64);
        self.add(Count::Absent, asked.saturating_sub(found) as u64);
    }

    /// A row the writer found stored already, which the handle had counted as saved new
    /// (two handles saved it at once, or a save took it for new without looking).
    /// Rows a read through the remote stores are not counted as saves; a handle that has
    /// counted none has none to move.
    pub(crate) fn saved_already(&self) {
        let saved = &self.counts[Count::Saved as usize];
        if saved.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            self.counts[Count::SavedAgain as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts as the stash has recorded them.
    pub(crate) fn recorded(&self) -> Snapshot {
        *self.recorded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer committed these counts.
    pub(crate) fn set_recorded(&self, counts: Snapshot) {
        *self.recorded.lock().unwrap_or_else(|p| p.into_inner()) = counts;
    }

    /// Whether anything counted is not recorded in the stash yet.
    pub(crate) fn owed(&self) -> bool {
        self.snapshot() != self.recorded()
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot(std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_since_an_earlier_one_is_what_was_counted_between() {
        let counts = Counts::default();
        counts.read(10, 7);
        let earlier = counts.snapshot();
        counts.read(5, 5);
        counts.looked_up(4, 1);
        counts.add(Count::Saved, 2);
        counts.saved_already();
        let between = counts.snapshot().since(&earlier);
        assert_eq!(between.get(Count::Hits), 5);
        assert_eq!(between.get(Count::Misses), 0);
        assert_eq!(between.get(Count::Found), 1);
        assert_eq!(between.get(Count::Absent), 3);
        assert_eq!(between.get(Count::Saved), 1);
        assert_eq!(between.get(Count::SavedAgain), 1);
        assert!(counts.snapshot().since(&counts.snapshot()).is_zero());
    }
}
