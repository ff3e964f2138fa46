//! Rows handed to the writer but not yet committed: what makes reads see their writes.
//!
//! `save` puts a row here before it sends it to the writer, and the writer takes it out
//! only after the transaction holding it has committed, so at every moment a saved object
//! is here, in the database, or both. The map is sharded by a key byte so that many
//! producer threads do not queue on one lock; its size is bounded by the channel capacity
//! plus one batch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::key::Key;

const SHARDS: usize = 64;

/// A compressed object on its way to the database.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub key: Key,
    pub raw_len: u64,
    pub data: Arc<Vec<u8>>,
}

#[derive(Debug)]
pub(crate) struct Pending {
    shards: Vec<Mutex<HashMap<Key, Row>>>,
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn shard(&self, key: &Key) -> MutexGuard<'_, HashMap<Key, Row>> {
        // A panic while holding a shard cannot leave a half-updated map entry, so the data
        // behind a poisoned lock is still consistent.
        let shard = usize::from(key.as_bytes()[1]) % SHARDS;
        self.shards[shard].lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn insert(&self, row: Row) {
        self.shard(&row.key).insert(row.key, row);
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Row> {
        self.shard(key).get(key).cloned()
    }

    pub(crate) fn contains(&self, key: &Key) -> bool {
        self.shard(key).contains_key(key)
    }

    /// Forgets `row` once it is committed, unless a newer save replaced it meanwhile.
    pub(crate) fn settle(&self, row: &Row) {
        let mut shard = self.shard(&row.key);
        if shard.get(&row.key).is_some_and(|r| Arc::ptr_eq(&r.data, &row.data)) {
            shard.remove(&row.key);
        }
    }

    /// Forgets every row: used when the writer stops and they will never be committed.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            shard.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(object: &[u8]) -> Row {
        Row { key: Key::of(object), raw_len: object.len() as u64, data: Arc::new(object.to_vec()) }
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
    }
}
