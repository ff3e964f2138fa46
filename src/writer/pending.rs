//! Rows handed to the writer but not yet committed: what makes reads see their writes.
//!
//! `save` puts a row here before it sends it to the writer, and the writer takes it out
//! only after the transaction holding it has committed, so at every moment a saved object
//! is here, in the database, or both. The map is sharded by a key byte so that many
//! producer threads do not queue on one lock; its size is bounded by the channel capacity
//! plus one batch.
//!
//! A count of the rows held lets a read skip the map while it is empty, as it is in a
//! stash that is only read: taking a shard's lock and hashing the key was 4% of a `get`
//! at ten million objects. The count is changed under the shard's lock, after the map,
//! and a row leaves only after its commit: a read that finds the count at zero either
//! comes before the `save` (which it need not see) or after the commit (which its
//! snapshot, taken after the look here, holds).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::key::Key;

const SHARDS: usize = 64;

/// A compressed object on its way to the database.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub key: Key,
    pub raw_len: u64,
    pub data: Arc<Vec<u8>>,
    /// The assembly it is saved into, if any (`writer/models.rs`).
    pub model: Option<i64>,
}

#[derive(Debug)]
pub(crate) struct Pending {
    shards: Vec<Mutex<HashMap<Key, Row>>>,
    /// Rows in all the shards.
    rows: AtomicUsize,
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            rows: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &Key) -> MutexGuard<'_, HashMap<Key, Row>> {
        // A panic while holding a shard cannot leave a half-updated map entry, so the data
        // behind a poisoned lock is still consistent.
        let shard = usize::from(key.as_bytes()[1]) % SHARDS;
        self.shards[shard].lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn insert(&self, row: Row) {
        let mut shard = self.shard(&row.key);
        if shard.insert(row.key, row).is_none() {
            self.rows.fetch_add(1, Ordering::Release);
        }
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Row> {
        if self.is_empty() {
            return None;
        }
        self.shard(key).get(key).cloned()
    }

    pub(crate) fn contains(&self, key: &Key) -> bool {
        !self.is_empty() && self.shard(key).contains_key(key)
    }

    /// Whether no row is held.
    fn is_empty(&self) -> bool {
        self.rows.load(Ordering::Acquire) == 0
    }

    /// Forgets `row` once it is committed, unless a newer save replaced it meanwhile.
    pub(crate) fn settle(&self, row: &Row) {
        let mut shard = self.shard(&row.key);
        if shard.get(&row.key).is_some_and(|r| Arc::ptr_eq(&r.data, &row.data)) {
            shard.remove(&row.key);
            self.rows.fetch_sub(1, Ordering::Release);
        }
    }

    /// Forgets the row of `key`, whichever save put it here: the root of a model that must
    /// not be read leaves the map before the transaction that hides it commits.
    pub(crate) fn forget(&self, key: &Key) {
        let mut shard = self.shard(key);
        if shard.remove(key).is_some() {
            self.rows.fetch_sub(1, Ordering::Release);
        }
    }

    /// Forgets every row: used when the writer stops and they will never be committed.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            self.rows.fetch_sub(shard.len(), Ordering::Release);
            shard.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(object: &[u8]) -> Row {
        Row {
            key: Key::of(object),
            raw_len: object.len() as u64,
            data: Arc::new(object.to_vec()),
            model: None,
        }
    }

    #[test]
    fn settle_keeps_a_newer_row() {
        let pending = Pending::new();
        let first = row(b"a");
        pending.insert(first.clone());
        let second = row(b"a");
        pending.insert(second.clone());
        pending.settle(&first);
        assert!(pending.contains(&first.key), "a stale settle removed the newer row");
        pending.settle(&second);
        assert!(pending.get(&first.key).is_none());
        assert!(pending.is_empty());
    }

    #[test]
    fn the_count_follows_the_rows() {
        let pending = Pending::new();
        let (a, b) = (row(b"a"), row(b"b"));
        pending.insert(a.clone());
        pending.insert(a.clone());
        pending.insert(b.clone());
        assert_eq!(pending.rows.load(Ordering::Acquire), 2, "a key saved twice is one row");
        pending.settle(&a);
        assert!(pending.get(&b.key).is_some() && !pending.contains(&a.key));
        pending.clear();
        assert!(pending.is_empty() && pending.get(&b.key).is_none());
    }
}
