//! Names: the caller's own ids for objects (Speckle's ids, paths, anything up to
//! [`MAX_NAME_LEN`] bytes), each mapping to one content key; several names may share one
//! object.
//!
//! Names live in one `objstash_names(name, key)` table, whatever the layout, and an index
//! on the key lets removing an object drop its names in the same transaction. The table is
//! made by the first named save, which marks the stash format 3 (older versions, which
//! would remove objects and leave their names behind, refuse it). The index by key is half
//! of what a name costs (78 of 157 bytes for a name of 32 characters,
//! `experiments/name_bytes`) and only removals read it, so it is built with the other
//! indexes removals read, at the stash's first cap, eviction or removal
//! (`Schema::index_removals`); a names table made without it marks the stash format 6
//! (older versions would read the whole table for every object they removed).
//!
//! A name is only ever committed in a transaction where its object exists: the writer
//! inserts it with `WHERE EXISTS` on the object's row, after the run of rows that may
//! hold it. After a crash, in either mode, a name never points to an absent object.
//! Until then, the pending-names map makes a named save visible to every read at once,
//! as the pending map does for rows.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension};

use crate::error::{DbContext, Error, Result};
use crate::format;
use crate::key::Key;
use crate::key_index::KeyIndex;
use crate::pending::Row;

/// The longest name, in bytes. Names are keys of a B-tree: beyond a few hundred bytes they
/// spill onto overflow pages and every lookup reads more.
pub const MAX_NAME_LEN: usize = 1024;

/// The names table.
pub(crate) const TABLE: &str = "objstash_names";

/// Format version of a stash with names indexed by key.
pub(crate) const FORMAT_VERSION: i64 = 3;
/// Format version of a stash whose names are not (yet) indexed by key.
pub(crate) const UNINDEXED_FORMAT_VERSION: i64 = 6;

/// Checks a caller's name: not empty, at most [`MAX_NAME_LEN`] bytes.
pub(crate) fn check(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::BadName { len: name.len(), limit: MAX_NAME_LEN });
    }
    Ok(())
}

/// Whether the stash on `conn` has a names table.
pub(crate) fn table_exists(conn: &Connection) -> Result<bool> {
    format::has_table(conn, TABLE)
}

/// Makes the names table and its total inside the writer's open transaction, if it is not
/// there, with its index by key if `by_key` (the stash has the indexes removals read), and
/// raises the format.
pub(crate) fn create(conn: &Connection, by_key: bool) -> Result<()> {
    let mut sql = format!(
        "CREATE TABLE IF NOT EXISTS {TABLE}(name BLOB PRIMARY KEY, key BLOB NOT NULL) WITHOUT ROWID;\n\
         INSERT OR IGNORE INTO {META}(name, value) VALUES ('names', 0);\n",
        META = crate::meta::META
    );
    if by_key {
        sql += &index_by_key();
    }
    conn.execute_batch(&sql).context(|| "making the names table".to_string())?;
    let indexed = by_key || indexed_by_key(conn)?;
    format::raise(conn, if indexed { FORMAT_VERSION } else { UNINDEXED_FORMAT_VERSION })
}

/// The statement that indexes the names by key, unless they are.
pub(crate) fn index_by_key() -> String {
    format!("CREATE INDEX IF NOT EXISTS {TABLE}_key ON {TABLE}(key);\n")
}

/// Whether the names are indexed by key.
pub(crate) fn indexed_by_key(conn: &Connection) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = ?1",
        [format!("{TABLE}_key")],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .context(|| "looking for the names' index by key".to_string())
}

/// The key `name` maps to in the database.
pub(crate) fn lookup(conn: &Connection, name: &[u8]) -> Result<Option<Key>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT key FROM {TABLE} WHERE name = ?1"))
        .context(|| "preparing a name lookup".to_string())?;
    let key: Option<Vec<u8>> = stmt
        .query_row([name], |r| r.get(0))
        .optional()
        .context(|| "looking up a name".to_string())?;
    Ok(key.and_then(|bytes| Key::from_slice(&bytes)))
}

/// Statements the writer runs on names.
pub(crate) struct NameSql;

impl NameSql {
    /// Adds a name for an object of `table` if that object exists; 1 change if added.
    pub(crate) fn insert(table: &str, key_index: KeyIndex) -> String {
        format!(
            "INSERT OR IGNORE INTO {TABLE}(name, key) SELECT ?1, ?2 \
             WHERE EXISTS (SELECT 1 FROM {table} WHERE {})",
            key_index.matches("?2")
        )
    }

    /// Points an existing name at another object of `table`, if that object exists.
    pub(crate) fn repoint(table: &str, key_index: KeyIndex) -> String {
        format!(
            "UPDATE {TABLE} SET key = ?2 WHERE name = ?1 AND key != ?2 \
             AND EXISTS (SELECT 1 FROM {table} WHERE {})",
            key_index.matches("?2")
        )
    }

    /// Adds a name for an object the transaction has just written or found.
    pub(crate) const INSERT_KNOWN: &str =
        "INSERT OR IGNORE INTO objstash_names(name, key) VALUES (?1, ?2)";
    /// Points an existing name at an object the transaction has just written or found.
    pub(crate) const REPOINT_KNOWN: &str =
        "UPDATE objstash_names SET key = ?2 WHERE name = ?1 AND key != ?2";

    pub(crate) const DELETE_BY_KEY: &str = "DELETE FROM objstash_names WHERE key = ?1";
    pub(crate) const DELETE: &str = "DELETE FROM objstash_names WHERE name = ?1";
}

/// How many names the stash holds, counted (0 without a names table).
pub(crate) fn count(conn: &Connection) -> Result<u64> {
    if !table_exists(conn)? {
        return Ok(0);
    }
    let names: i64 = conn
        .query_row(&format!("SELECT count(*) FROM {TABLE}"), [], |r| r.get(0))
        .context(|| "counting names".to_string())?;
    Ok(names as u64)
}

/// Calls `f` with every name and its key (names whose key has the wrong length are left
/// out).
#[cfg(feature = "remote")]
pub(crate) fn each(conn: &Connection, mut f: impl FnMut(&[u8], Key)) -> Result<()> {
    if !table_exists(conn)? {
        return Ok(());
    }
    let mut stmt = conn
        .prepare(&format!("SELECT name, key FROM {TABLE}"))
        .context(|| "preparing a scan of the names".to_string())?;
    let mut rows = stmt.query([]).context(|| "scanning the names".to_string())?;
    while let Some(row) = rows.next().context(|| "scanning the names".to_string())? {
        let name = row.get_ref(0).ok().and_then(|v| v.as_blob().ok());
        let key = row.get_ref(1).ok().and_then(|v| v.as_blob().ok()).and_then(Key::from_slice);
        if let (Some(name), Some(key)) = (name, key) {
            f(name, key);
        }
    }
    Ok(())
}

/// Calls `f` with the key of every name (`None` for a key of the wrong length).
pub(crate) fn each_key(conn: &Connection, mut f: impl FnMut(Option<Key>)) -> Result<()> {
    if !table_exists(conn)? {
        return Ok(());
    }
    let mut stmt = conn
        .prepare(&format!("SELECT key FROM {TABLE}"))
        .context(|| "preparing a scan of the names".to_string())?;
    let mut rows = stmt.query([]).context(|| "scanning the names".to_string())?;
    while let Some(row) = rows.next().context(|| "scanning the names".to_string())? {
        let key = row.get_ref(0).ok().and_then(|v| v.as_blob().ok()).and_then(Key::from_slice);
        f(key);
    }
    Ok(())
}

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
}

impl PendingNames {
    pub(crate) fn new(table: bool) -> Self {
        PendingNames {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            seq: AtomicU64::new(0),
            table: AtomicBool::new(table),
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
        let exists = table_exists(conn)?;
        if exists {
            self.table.store(true, Ordering::Relaxed);
        }
        Ok(exists)
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

    #[test]
    fn names_are_checked() {
        assert!(check(b"").is_err());
        assert!(check(&[b'a'; MAX_NAME_LEN]).is_ok());
        assert!(check(&[b'a'; MAX_NAME_LEN + 1]).is_err());
    }
}
