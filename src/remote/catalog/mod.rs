//! The local copy of the remote's pack indexes: which keys the remote holds, and where.
//!
//! It lives in a SQLite file beside the stash (`<stash>-remote`), apart from the stash's
//! own tables: it is a cache of what the remote says, rebuilt from the remote at any time
//! (delete the file and the next refresh lists and reads every index again), written by
//! whichever handle refreshes or pushes, never by the stash's writer. Every process that
//! has the stash open shares it; SQLite's locks take the turns.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::pack::{Entry, Index, Kind};
use super::shard::Manifest;

mod shards;
use crate::error::{DbContext, Result};
use crate::files;
use crate::key::Key;

/// Suffix of the catalog's file beside the stash.
pub(crate) const SUFFIX: &str = "-remote";

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value ANY) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS packs(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
        objects INTEGER NOT NULL, body_len INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS keys(key BLOB NOT NULL, pack INTEGER NOT NULL,
        offset INTEGER NOT NULL, len INTEGER NOT NULL, raw_len INTEGER NOT NULL,
        kind INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(key, pack)) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS keys_pack ON keys(pack, offset);
    CREATE TABLE IF NOT EXISTS unread(name TEXT PRIMARY KEY) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS shard_headers(shard INTEGER PRIMARY KEY, header BLOB NOT NULL);
    CREATE TABLE IF NOT EXISTS shard_blocks(shard INTEGER NOT NULL, block INTEGER NOT NULL,
        data BLOB NOT NULL, PRIMARY KEY(shard, block)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS gone(name TEXT PRIMARY KEY) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS covered(name TEXT PRIMARY KEY) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS gone_covered(name TEXT PRIMARY KEY, body_len INTEGER NOT NULL)
        WITHOUT ROWID;
";

/// The setting that holds the manifest of the compacted index this catalog reads parts of
/// (`shard.rs`); without it the catalog holds every index it knows whole.
const MANIFEST: &str = "shards_manifest";
/// The most bytes of shard blocks kept; beyond it the oldest half goes.
const BLOCKS_KEPT: i64 = 64 << 20;

/// Key rows a removal sorts and deletes at once (~100 MiB at most).
const REMOVED_A_RUN: usize = 1 << 20;

/// The setting that holds the pack log's cursor (`pack_log.rs`); without it the next refresh
/// lists the whole log.
const CURSOR: &str = "log_cursor";
/// The setting that holds when the whole log was last listed.
const LISTED_WHOLE: &str = "log_listed_whole";

/// Where the remote holds one object.
#[derive(Clone, Debug)]
pub(crate) struct Location {
    pub pack: String,
    pub entry: Entry,
}

pub(crate) struct Catalog {
    path: PathBuf,
    conn: std::sync::Mutex<Connection>,
    /// The compacted index's manifest as last read or written here (`None`: not read yet).
    manifest: std::sync::Mutex<Option<Option<Manifest>>>,
}

impl Catalog {
    /// Opens the catalog beside `stash`, for the remote at `url`; a catalog of another
    /// remote is emptied.
    pub(crate) fn open(stash: &Path, url: &str, busy: Duration) -> Result<Catalog> {
        let path = files::sibling(stash, SUFFIX);
        let conn = Connection::open(&path).context(|| format!("opening {}", path.display()))?;
        conn.busy_timeout(busy).context(|| format!("opening {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .context(|| format!("opening {}", path.display()))?;
        // A cache of the remote: rebuilt by the next refresh if a crash loses its tail.
        conn.pragma_update(None, "synchronous", "OFF")
            .context(|| format!("opening {}", path.display()))?;
        // The key table of a million remote objects is ~100 MiB: a page cache of 64 MiB
        // keeps its inner pages while a refresh inserts.
        conn.pragma_update(None, "cache_size", -65_536)
            .context(|| format!("opening {}", path.display()))?;
        // A catalog made before it recorded every pack of a key (a key of two packs kept
        // only the first, and forgot it with that pack) is rebuilt by the next refresh.
        let current = conn
            .query_row(
                "SELECT sql LIKE '%PRIMARY KEY(key, pack)%' FROM sqlite_master WHERE name = 'keys'",
                [],
                |r| r.get::<_, bool>(0),
            )
            .optional()
            .context(|| format!("opening {}", path.display()))?;
        if current == Some(false) {
            conn.execute_batch(
                "DROP TABLE IF EXISTS keys; DROP TABLE IF EXISTS packs; DROP TABLE IF EXISTS \
                 unread; DELETE FROM settings WHERE name IN ('log_cursor', 'log_listed_whole');",
            )
            .context(|| format!("rebuilding {}", path.display()))?;
        }
        conn.execute_batch(SCHEMA).context(|| format!("creating {}", path.display()))?;
        let catalog = Catalog {
            path,
            conn: std::sync::Mutex::new(conn),
            manifest: std::sync::Mutex::new(None),
        };
        catalog.write(|tx| {
            let recorded: Option<String> = tx
                .query_row("SELECT value FROM settings WHERE name = 'url'", [], |r| r.get(0))
                .optional()?;
            if recorded.as_deref() != Some(url) {
                tx.execute_batch(
                    "DELETE FROM keys; DELETE FROM packs; DELETE FROM unread; \
                     DELETE FROM shard_headers; DELETE FROM shard_blocks; DELETE FROM gone; \
                     DELETE FROM covered;",
                )?;
                tx.execute(
                    "DELETE FROM settings WHERE name IN (?1, ?2, ?3)",
                    [CURSOR, LISTED_WHOLE, MANIFEST],
                )?;
                tx.execute("INSERT OR REPLACE INTO settings VALUES ('url', ?1)", [url])?;
            }
            Ok(())
        })?;
        Ok(catalog)
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn.lock().expect("catalog lock");
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .context(|| format!("writing {}", self.path.display()))?;
        let value = f(&tx).context(|| format!("writing {}", self.path.display()))?;
        tx.commit().context(|| format!("writing {}", self.path.display()))?;
        Ok(value)
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let mut conn = self.conn.lock().expect("catalog lock");
        let tx = conn.transaction().context(|| format!("reading {}", self.path.display()))?;
        let value = f(&tx).context(|| format!("reading {}", self.path.display()))?;
        Ok(value)
    }

    /// Where the last refresh left the pack log and when the whole log was last listed
    /// (ms since 1970), `None` before the first refresh.
    pub(crate) fn cursor(&self) -> Result<Option<(u64, u64)>> {
        self.read(|conn| {
            let get = |name: &str| -> rusqlite::Result<Option<i64>> {
                conn.query_row("SELECT value FROM settings WHERE name = ?1", [name], |r| r.get(0))
                    .optional()
            };
            Ok(get(CURSOR)?.zip(get(LISTED_WHOLE)?).map(|(c, w)| (c as u64, w as u64)))
        })
    }

    /// Moves the cursor to `ms` (and records a listing of the whole log, with `whole`),
    /// never back: two refreshes may end in either order.
    pub(crate) fn advance_cursor(&self, ms: u64, whole: bool) -> Result<()> {
        self.write(|tx| {
            let mut stmt = tx.prepare(
                "INSERT INTO settings VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE \
                 SET value = max(value, excluded.value)",
            )?;
            stmt.execute(params![CURSOR, ms as i64])?;
            if whole {
                stmt.execute(params![LISTED_WHOLE, ms as i64])?;
            }
            Ok(())
        })
    }

    /// Packs the log announced whose index could not be read yet.
    pub(crate) fn unread(&self) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT name FROM unread")?;
            stmt.query_map([], |r| r.get(0))?.collect()
        })
    }

    /// Records which packs are still to be read (`unread`) and which no longer are.
    pub(crate) fn mark_unread(&self, unread: &[String], settled: &[String]) -> Result<()> {
        self.write(|tx| {
            for name in settled {
                tx.execute("DELETE FROM unread WHERE name = ?1", [name])?;
            }
            for name in unread {
                tx.execute("INSERT OR IGNORE INTO unread VALUES (?1)", [name])?;
            }
            Ok(())
        })
    }

    /// Names of the packs known.
    pub(crate) fn packs(&self) -> Result<HashSet<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT name FROM packs")?;
            stmt.query_map([], |r| r.get(0))?.collect()
        })
    }

    /// Records a pack and its objects (an object of several packs is recorded in each, and
    /// found in the one recorded first).
    pub(crate) fn add(&self, name: &str, index: &Index) -> Result<()> {
        self.write(|tx| {
            let added = tx.execute(
                "INSERT OR IGNORE INTO packs(name, objects, body_len) VALUES (?1, ?2, ?3)",
                params![name, index.entries.len() as i64, index.body_len as i64],
            )?;
            if added == 0 {
                return Ok(());
            }
            let id = tx.last_insert_rowid();
            let mut stmt =
                tx.prepare("INSERT OR IGNORE INTO keys VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            // In key order: each B-tree page of the key table is visited once per run of
            // its keys, not once per key.
            let mut entries: Vec<&Entry> = index.entries.iter().collect();
            entries.sort_unstable_by_key(|e| e.key);
            for e in entries {
                stmt.execute(params![
                    &e.key.as_bytes()[..],
                    id,
                    e.offset as i64,
                    i64::from(e.len),
                    e.raw_len as i64,
                    e.kind as i64
                ])?;
            }
            Ok(())
        })
    }

    /// Forgets packs the remote no longer lists: their key rows go in key order, a run of
    /// packs at a time, so that each page of the key table is rewritten once per run
    /// rather than once per key (a pack's keys are spread over the whole table).
    pub(crate) fn remove(&self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            let mut find = tx.prepare("SELECT id FROM packs WHERE name = ?1")?;
            let mut packs = Vec::new();
            for name in names {
                if let Some(id) = find.query_row([name], |r| r.get::<_, i64>(0)).optional()? {
                    packs.push(id);
                }
            }
            let mut keys_of = tx.prepare("SELECT key FROM keys WHERE pack = ?1")?;
            let mut delete = tx.prepare("DELETE FROM keys WHERE key = ?1 AND pack = ?2")?;
            let mut forget = tx.prepare("DELETE FROM packs WHERE id = ?1")?;
            let mut rows: Vec<(Vec<u8>, i64)> = Vec::new();
            let mut packs = packs.into_iter().peekable();
            while let Some(id) = packs.next() {
                for key in keys_of.query_map([id], |r| r.get::<_, Vec<u8>>(0))? {
                    rows.push((key?, id));
                }
                forget.execute([id])?;
                if rows.len() < REMOVED_A_RUN && packs.peek().is_some() {
                    continue;
                }
                rows.sort_unstable();
                for (key, id) in rows.drain(..) {
                    delete.execute(params![key, id])?;
                }
            }
            Ok(())
        })
    }

    /// Where the remote holds each of `keys`, `None` for those it is not known to hold.
    pub(crate) fn locate(&self, keys: &[Key]) -> Result<Vec<Option<Location>>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT p.name, k.offset, k.len, k.raw_len, k.kind FROM keys k JOIN packs p \
                 ON p.id = k.pack WHERE k.key = ?1 ORDER BY k.pack LIMIT 1",
            )?;
            keys.iter()
                .map(|key| {
                    stmt.query_row([&key.as_bytes()[..]], |r| {
                        Ok(Location {
                            pack: r.get(0)?,
                            entry: Entry {
                                key: *key,
                                offset: r.get::<_, i64>(1)? as u64,
                                len: r.get::<_, i64>(2)? as u32,
                                raw_len: r.get::<_, i64>(3)? as u64,
                                kind: kind(r.get(4)?),
                            },
                        })
                    })
                    .optional()
                })
                .collect()
        })
    }

    /// Which of `keys` the remote is known to hold.
    pub(crate) fn holds(&self, keys: &[Key]) -> Result<Vec<bool>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT 1 FROM keys WHERE key = ?1")?;
            keys.iter().map(|key| stmt.exists([&key.as_bytes()[..]])).collect()
        })
    }

    /// Every object of the pack `name`, in body order.
    pub(crate) fn entries(&self, name: &str) -> Result<Vec<Entry>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT k.key, k.offset, k.len, k.raw_len, k.kind FROM keys k JOIN packs p \
                 ON p.id = k.pack WHERE p.name = ?1 ORDER BY k.offset",
            )?;
            stmt.query_map([name], |r| {
                let bytes: Vec<u8> = r.get(0)?;
                Ok(Entry {
                    key: Key::from_slice(&bytes).unwrap_or_else(|| Key::of(&bytes)),
                    offset: r.get::<_, i64>(1)? as u64,
                    len: r.get::<_, i64>(2)? as u32,
                    raw_len: r.get::<_, i64>(3)? as u64,
                    kind: kind(r.get(4)?),
                })
            })?
            .collect()
        })
    }

    /// Rows of the key table (a key of two packs counts twice).
    pub(crate) fn key_rows(&self) -> Result<u64> {
        self.read(|conn| conn.query_row("SELECT count(*) FROM keys", [], |r| r.get::<_, i64>(0)))
            .map(|n| n as u64)
    }

    /// Every pack known with the bytes of its body.
    pub(crate) fn pack_sizes(&self) -> Result<Vec<(String, u64)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT name, body_len FROM packs ORDER BY id")?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?.collect()
        })
    }

    /// Every pack known: its name and how many keys it holds, by the catalog's id.
    pub(crate) fn pack_keys(&self) -> Result<std::collections::HashMap<i64, (String, u64)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
                "SELECT p.id, p.name, (SELECT count(*) FROM keys k WHERE k.pack = p.id) \
                 FROM packs p",
            )?;
            stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get::<_, i64>(2)? as u64))))?
                .collect()
        })
    }

    /// Calls `f` with the packs (catalog ids) of every key more than one pack holds: one
    /// pass over the key table in key order.
    pub(crate) fn shared_keys(&self, mut f: impl FnMut(&[i64])) -> Result<()> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare("SELECT group_concat(pack) FROM keys GROUP BY key HAVING count(*) > 1")?;
            let mut rows = stmt.query([])?;
            let mut packs = Vec::new();
            while let Some(row) = rows.next()? {
                let list: String = row.get(0)?;
                packs.clear();
                packs.extend(list.split(',').filter_map(|id| id.parse::<i64>().ok()));
                f(&packs);
            }
            Ok(())
        })
    }

    /// Packs and objects known (chunks are parts of objects and names are not objects: not
    /// counted).
    pub(crate) fn counts(&self) -> Result<Counts> {
        // The file and its write-ahead log: what this machine holds of the indexes.
        let file_bytes = files::database_bytes(&self.path)
            .map_err(|e| crate::error::Error::io(format!("reading {}", self.path.display()), e))?;
        // Packs a compacted index holds and whose indexes were read here too are counted
        // with the compacted index, not here.
        const MINE: &str = "(SELECT id FROM packs WHERE name NOT IN (SELECT name FROM covered))";
        self.read(|conn| {
            let count = |sql: &str| -> rusqlite::Result<u64> {
                conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n as u64)
            };
            Ok(Counts {
                packs: count(&format!("SELECT count(*) FROM packs WHERE id IN {MINE}"))?,
                objects: count(&format!(
                    "SELECT count(DISTINCT key) FROM keys WHERE kind NOT IN ({}, {}) \
                     AND pack IN {MINE}",
                    Kind::Chunk as i64,
                    Kind::Name as i64
                ))?,
                bytes: count(&format!(
                    "SELECT coalesce(sum(body_len), 0) FROM packs WHERE id IN {MINE}"
                ))?,
                file_bytes,
            })
        })
    }
}

/// What the catalog knows the remote holds.
pub(crate) struct Counts {
    pub packs: u64,
    /// Objects (a large object counts once, not its chunks).
    pub objects: u64,
    /// Bytes of the packs' bodies.
    pub bytes: u64,
    /// Bytes of the catalog's own files.
    pub file_bytes: u64,
}

/// A kind as the catalog stores it; an unknown one (a newer version's) reads as a chunk,
/// which nothing pulls or reads as an object.
fn kind(value: i64) -> Kind {
    u8::try_from(value).ok().and_then(Kind::from_byte).unwrap_or(Kind::Chunk)
}
