//! Names handed to the writer but not yet committed: what makes a named save visible to
//! every read at once, as the pending map (`pending.rs`) does for rows.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rusqlite::Connection;

use crate::db::names::{self, NameForm};
use crate::error::Result;
use crate::key::Key;
use crate::writer::pending::Row;

/// A name on its way to the database.
#[derive(Clone, Debug)]
pub(crate) struct NameRow {
    pub name: Arc<[u8]>,
    pub key: Key,
    /// Which save put it in the pending map, so that committing an older save of the same
    /// name does not forget a newer one.
    pub seq: u64,
    /// The object's row while it is pending: the writer stores it (if it is not stored
    /// yet) before the name, whichever of the two messages reached it first.
    pub row: Option<Row>,
}

const SHARDS: usize = 16;

/// One shard of the pending names: name -> (key, seq).
type Shard = HashMap<Arc<[u8]>, (Key, u64)>;

/// Names handed to the writer but not yet committed.
#[derive(Debug)]
pub(crate) struct PendingNames {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    seq: AtomicU64,
    /// Whether the names table is known to exist (it is never dropped).
    table: AtomicBool,
    /// How the names table stores names, once read (it never changes).
    form: OnceLock<NameForm>,
}

impl PendingNames {
    pub(crate) fn new(table: bool) -> Self {
        PendingNames {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            seq: AtomicU64::new(0),
            table: AtomicBool::new(table),
            form: OnceLock::new(),
        }
    }

    fn shard(&self, name: &[u8]) -> MutexGuard<'_, Shard> {
        let shard = self.hasher.hash_one(name) as usize % SHARDS;
        self.shards[shard].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `name -> key` as pending; the name row to send to the writer, carrying the
    /// object's pending `row` if it has one.
    pub(crate) fn insert(&self, name: &[u8], key: Key, row: Option<Row>) -> NameRow {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let name: Arc<[u8]> = Arc::from(name);
        self.shard(&name).insert(Arc::clone(&name), (key, seq));
        NameRow { name, key, seq, row }
    }

    pub(crate) fn get(&self, name: &[u8]) -> Option<Key> {
        self.shard(name).get(name).map(|(key, _)| *key)
    }

    /// Forgets `row` once committed, unless a newer save of its name replaced it.
    pub(crate) fn settle(&self, row: &NameRow) {
        let mut shard = self.shard(&row.name);
        if shard.get(&row.name).is_some_and(|(_, seq)| *seq == row.seq) {
            shard.remove(&row.name);
        }
    }

    /// Forgets every pending name: the writer stopped and they will never be committed.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            shard.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Whether the names table is known to exist, checking `conn` if not known yet.
    pub(crate) fn table_exists(&self, conn: &Connection) -> Result<bool> {
        if self.table.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let exists = names::table_exists(conn)?;
        if exists {
            self.table.store(true, Ordering::Relaxed);
        }
        Ok(exists)
    }

    /// How the names table on `conn`, which must exist, stores names.
    pub(crate) fn form(&self, conn: &Connection) -> Result<NameForm> {
        if let Some(form) = self.form.get() {
            return Ok(*form);
        }
        let form = NameForm::read(conn)?;
        Ok(*self.form.get_or_init(|| form))
    }

    /// Notes that the names table exists (the writer made it).
    pub(crate) fn table_made(&self) {
        self.table.store(true, Ordering::Relaxed);
    }

    /// Whether the names table is known to exist, without asking the database.
    pub(crate) fn table_known(&self) -> bool {
        self.table.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_keeps_a_newer_name() {
        let pending = PendingNames::new(false);
        let first = pending.insert(b"wall", Key::of(b"1"), None);
        let second = pending.insert(b"wall", Key::of(b"2"), None);
        pending.settle(&first);
        assert_eq!(pending.get(b"wall"), Some(Key::of(b"2")));
        pending.settle(&second);
        assert_eq!(pending.get(b"wall"), None);
    }
}
