//! When each object was last used: the clock, pins, and reads recorded in memory until
//! the writer writes them.
//!
//! Every object row has a `used` column, milliseconds since the Unix epoch of its last
//! save or read; eviction (`evict.rs`) takes the smallest first. A pinned object's `used`
//! is [`PINNED`], above every time, so eviction never reaches it and no later use
//! overwrites it.
//!
//! Recording a read waits for no write: `get` puts the key and the time into [`Uses`], a
//! sharded map, and the writer writes the latest time of each key once per batch (or once
//! per [`RECORD_EVERY`] when no batch comes), in key order, in one transaction: into the
//! rows, or, in a stash without a cap of format 8, into narrow tables beside them
//! (`use_table.rs`). An object read a thousand times between two batches costs one update.
//!
//! Nor does every read record a use: a read sees the row's `used`, and one less than the
//! stash's resolution old ([`DEFAULT_RESOLUTION`], `StashBuilder::use_resolution`) is
//! left as it is; so is one whose use this handle holds within the resolution (a use
//! written apart from the rows stays held for it, since the row does not show it).
//! Reading back what was just saved, or an object read again within
//! seconds, then writes nothing: without it the writer rewrote a page of the object table
//! and two of the use index for nearly every object `get_many` read, which cost reading a
//! quarter of its rate on two cores (notes/experiments.md). The order of last use that
//! eviction follows is exact to within the resolution.
//!
//! Eviction spares what a save call under way on this handle saved, until the call
//! returns, and anything used within the grace period. A save's use is exact; a read
//! within the resolution of the object's recorded use protects it only as far as that use
//! does. Protection is for the length of a call and a moment after, not for seconds: a
//! capped stash that receives a burst of saves stays near its cap.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::db::row::PINNED;
use crate::key::Key;
/// How often an idle writer writes the uses recorded in memory.
pub(crate) const RECORD_EVERY: Duration = Duration::from_millis(500);
/// How old an object's recorded use must be for a read to record a new one, by default.
pub(crate) const DEFAULT_RESOLUTION: Duration = Duration::from_secs(5);
/// Keys held in memory at most; uses beyond it are not recorded until the writer has
/// written the others (the writer drains the map at least every [`RECORD_EVERY`]).
const MAX_KEYS: usize = 1 << 20;
/// Keys whose uses were written apart held in memory at most (about 15 MiB); beyond it
/// a shard lets go of them, and their next reads record their uses again.
const HELD_KEYS: usize = 1 << 18;
const SHARDS: usize = 16;

/// Milliseconds since the Unix epoch: the unit of `used`.
pub(crate) fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A duration in milliseconds, the unit of `used`.
pub(crate) fn millis(duration: Duration) -> i64 {
    duration.as_millis().min(i64::MAX as u128) as i64
}

/// A `used` value as a time; `None` for [`PINNED`].
pub(crate) fn to_time(used: i64) -> Option<SystemTime> {
    (used != PINNED).then(|| UNIX_EPOCH + Duration::from_millis(used.max(0) as u64))
}

/// One key's use in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Use {
    at: i64,
    /// Written by the writer; kept for the resolution when written apart from the rows,
    /// whose `used` a read cannot see (`use_table.rs`).
    written: bool,
}

/// One shard of the uses in memory.
#[derive(Debug, Default)]
struct Shard {
    uses: HashMap<Key, Use>,
    /// How many of `uses` are not written.
    unwritten: usize,
}

/// Uses recorded in memory, not yet written, and the save calls under way.
#[derive(Debug)]
pub(crate) struct Uses {
    shards: Vec<Mutex<Shard>>,
    /// When each save call under way on this handle started: nothing it saved is evicted
    /// until it returns.
    saving: Mutex<Vec<i64>>,
    /// Uses of models (`db/models.rs`): a read of a member, or of the whole model, is a
    /// use of its model; the latest of each, until the writer writes them.
    models: Mutex<HashMap<i64, i64>>,
    /// Whether this handle records uses (it has a writer, and the tables a use column).
    on: bool,
    /// A read records a use only when the row's is at least this old (milliseconds).
    resolution: i64,
}

impl Uses {
    pub(crate) fn new(on: bool, resolution: Duration) -> Self {
        Uses {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            saving: Mutex::new(Vec::new()),
            models: Mutex::new(HashMap::new()),
            on,
            resolution: millis(resolution),
        }
    }

    /// Whether this handle records uses: reads then select the row's `used` too.
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    fn shard(&self, key: &Key) -> MutexGuard<'_, Shard> {
        let shard = usize::from(key.as_bytes()[2]) % SHARDS;
        self.shards[shard].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `key` was used now.
    pub(crate) fn record(&self, key: &Key) {
        if self.on {
            self.record_at(key, now());
        }
    }

    /// Records a read of `key`, whose row says it was last used at `used` (`None`: not
    /// known): unless that, or a use of it this handle holds, is less than the resolution
    /// ago, or the object is pinned.
    pub(crate) fn record_read(&self, key: &Key, used: Option<i64>) {
        if self.on {
            let now = now();
            if used.is_none_or(|used| used != PINNED && now - used >= self.resolution) {
                self.shard(key).record(key, now, self.resolution);
            }
        }
    }

    /// Records that model `id` was used now.
    pub(crate) fn record_model(&self, id: i64) {
        if self.on {
            let now = now();
            let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
            let at = models.entry(id).or_insert(now);
            *at = (*at).max(now);
        }
    }

    /// The uses of models recorded since the last call, for the writer to write.
    pub(crate) fn take_models(&self) -> Vec<(i64, i64)> {
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        models.drain().collect()
    }

    /// Records that each of `keys` was used now.
    pub(crate) fn record_all<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) {
        if self.on {
            let now = now();
            keys.into_iter().for_each(|key| self.record_at(key, now));
        }
    }

    fn record_at(&self, key: &Key, at: i64) {
        self.shard(key).record(key, at, 0);
    }

    /// The latest use of `key` this handle holds in memory (written or not), if any.
    pub(crate) fn recorded(&self, key: &Key) -> Option<i64> {
        self.shard(key).uses.get(key).map(|u| u.at)
    }

    /// Takes every use not yet written, sorted by key. With `keep`, the uses are written
    /// where reads cannot see them (`use_table.rs`): they stay in memory, written, for
    /// the resolution, so that reads within it do not record them again.
    pub(crate) fn take(&self, keep: bool) -> Vec<(Key, i64)> {
        let mut taken = Vec::new();
        let since = now().saturating_sub(self.resolution);
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            if keep {
                shard.uses.retain(|key, u| {
                    if !u.written {
                        taken.push((*key, u.at));
                        u.written = true;
                    }
                    u.at >= since
                });
                if shard.uses.len() > HELD_KEYS / SHARDS {
                    shard.uses.clear();
                }
            } else {
                taken
                    .extend(shard.uses.drain().filter(|(_, u)| !u.written).map(|(k, u)| (k, u.at)));
            }
            shard.unwritten = 0;
        }
        taken.sort_unstable_by_key(|(key, _)| *key);
        taken
    }

    /// Marks a save call under way until the guard is dropped.
    pub(crate) fn saving(&self) -> SaveCall<'_> {
        let started = now();
        self.saving.lock().unwrap_or_else(|p| p.into_inner()).push(started);
        SaveCall { uses: self, started }
    }

    /// When the oldest save call under way started, if one is.
    pub(crate) fn oldest_save(&self) -> Option<i64> {
        self.saving.lock().unwrap_or_else(|p| p.into_inner()).iter().min().copied()
    }

    /// Whether no use waits to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.lock().unwrap_or_else(|p| p.into_inner()).unwritten == 0)
            && self.models.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

impl Shard {
    /// Holds a use of `key` at `at` to be written, unless one held is later or less than
    /// `resolution` earlier. A full shard first lets go of the uses already written; one
    /// still full of unwritten uses records no new key until the writer has written them.
    /// The key is hashed once: a read that records its use looks it up here only.
    fn record(&mut self, key: &Key, at: i64, resolution: i64) {
        let full = self.uses.len() >= MAX_KEYS / SHARDS;
        match self.uses.entry(*key) {
            Entry::Occupied(mut held) => {
                let held = held.get_mut();
                if at - held.at < resolution {
                    return;
                }
                if held.written {
                    self.unwritten += 1;
                }
                *held = Use { at, written: false };
            }
            Entry::Vacant(vacant) if !full => {
                vacant.insert(Use { at, written: false });
                self.unwritten += 1;
            }
            Entry::Vacant(_) => {
                self.uses.retain(|_, u| !u.written);
                if self.uses.len() < MAX_KEYS / SHARDS {
                    self.uses.insert(*key, Use { at, written: false });
                    self.unwritten += 1;
                }
            }
        }
    }
}

/// A save call under way (see [`Uses::saving`]).
pub(crate) struct SaveCall<'a> {
    uses: &'a Uses,
    started: i64,
}

impl Drop for SaveCall<'_> {
    fn drop(&mut self) {
        let mut saving = self.uses.saving.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = saving.iter().position(|&s| s == self.started) {
            saving.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_calls_under_way_are_tracked_until_they_return() {
        let uses = Uses::new(true, Duration::ZERO);
        assert_eq!(uses.oldest_save(), None);
        let first = uses.saving();
        let second = uses.saving();
        assert_eq!(uses.oldest_save(), Some(first.started.min(second.started)));
        drop(first);
        assert_eq!(uses.oldest_save(), Some(second.started));
        drop(second);
        assert_eq!(uses.oldest_save(), None);
    }

    #[test]
    fn keeps_the_latest_use_of_each_key() {
        let uses = Uses::new(true, Duration::ZERO);
        let (a, b) = (Key::of(b"a"), Key::of(b"b"));
        uses.record_at(&a, 10);
        uses.record_at(&a, 5);
        uses.record_at(&b, 7);
        assert_eq!(uses.recorded(&a), Some(10));
        let mut expected = vec![(a, 10), (b, 7)];
        expected.sort();
        assert_eq!(uses.take(false), expected);
        assert!(uses.is_empty());
    }

    #[test]
    fn a_handle_without_a_writer_records_nothing() {
        let uses = Uses::new(false, Duration::ZERO);
        uses.record(&Key::of(b"a"));
        uses.record_read(&Key::of(b"a"), None);
        assert!(uses.is_empty());
    }

    #[test]
    fn a_read_records_a_use_only_past_the_resolution() {
        let uses = Uses::new(true, Duration::from_secs(5));
        let (fresh, old, pinned, unknown) =
            (Key::of(b"fresh"), Key::of(b"old"), Key::of(b"pinned"), Key::of(b"unknown"));
        uses.record_read(&fresh, Some(now() - 1_000));
        uses.record_read(&old, Some(now() - 6_000));
        uses.record_read(&pinned, Some(PINNED));
        uses.record_read(&unknown, None);
        let recorded: Vec<Key> = uses.take(false).into_iter().map(|(key, _)| key).collect();
        let mut expected = vec![old, unknown];
        expected.sort();
        assert_eq!(recorded, expected);
    }

    #[test]
    fn uses_written_apart_are_held_for_the_resolution_so_reads_within_it_record_nothing() {
        let uses = Uses::new(true, Duration::from_secs(5));
        let (a, b) = (Key::of(b"a"), Key::of(b"b"));
        let saved_long_ago = Some(now() - 60_000);
        uses.record_read(&a, saved_long_ago);
        assert_eq!(uses.take(true).len(), 1);
        assert!(uses.is_empty());
        // Written apart, the row still says it was used long ago: the held use answers.
        uses.record_read(&a, saved_long_ago);
        assert!(uses.is_empty());
        assert!(uses.recorded(&a).is_some());
        // Written into the rows, nothing is held: the row answers.
        uses.record_read(&b, saved_long_ago);
        assert_eq!(uses.take(false).len(), 1);
        assert_eq!(uses.recorded(&b), None);
        // A held use older than the resolution lets the next read record again.
        let held = Uses::new(true, Duration::from_secs(5));
        held.record_at(&a, now() - 6_000);
        assert_eq!(held.take(true).len(), 1);
        assert_eq!(held.recorded(&a), None, "older than the resolution: not held");
        held.record_read(&a, saved_long_ago);
        assert_eq!(held.take(true).len(), 1);
    }
}
