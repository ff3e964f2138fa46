//! The catalog's part of reading a compacted index (`sharded.rs`): the manifest it reads
//! through, the shard headers and blocks it fetched (blocks up to 64 MiB), the packs gone
//! since the compaction, and the packs whose indexes it read although the shards hold them.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, params};

use super::super::pack::Entry;
use super::super::shard::{Located, Manifest};
use super::{BLOCKS_KEPT, CURSOR, Catalog, LISTED_WHOLE, MANIFEST, kind};
use crate::error::Result;
use crate::key::Key;

impl Catalog {
    /// The manifest of the compacted index this catalog reads parts of, if it does.
    pub(crate) fn manifest(&self) -> Result<Option<Manifest>> {
        let mut cached = self.manifest.lock().expect("manifest lock");
        if let Some(manifest) = &*cached {
            return Ok(manifest.clone());
        }
        let bytes: Option<Vec<u8>> = self.read(|conn| {
            conn.query_row("SELECT value FROM settings WHERE name = ?1", [MANIFEST], |r| r.get(0))
                .optional()
        })?;
        let manifest = bytes.and_then(|b| Manifest::decode(&b).ok());
        *cached = Some(manifest.clone());
        Ok(manifest)
    }

    /// Reads the remote through the compacted index of `manifest` from now on: what it
    /// covers is fetched in parts as needed, what was pushed after it is listed from the
    /// pack log (the cursor moves to the compaction's time). Parts of another generation
    /// are dropped; the keys and packs already known stay.
    pub(crate) fn adopt(&self, manifest: &Manifest, now_ms: u64) -> Result<()> {
        self.write(|tx| {
            tx.execute_batch(
                "DELETE FROM shard_headers; DELETE FROM shard_blocks; DELETE FROM gone_covered;",
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO settings VALUES (?1, ?2)",
                params![MANIFEST, manifest.encode()],
            )?;
            let mut stmt = tx.prepare(
                "INSERT INTO settings VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE \
                 SET value = max(value, excluded.value)",
            )?;
            stmt.execute(params![CURSOR, manifest.covered_ms as i64])?;
            stmt.execute(params![LISTED_WHOLE, now_ms as i64])?;
            Ok(())
        })?;
        *self.manifest.lock().expect("manifest lock") = Some(Some(manifest.clone()));
        Ok(())
    }

    /// Stops reading through a compacted index (every entry is now here).
    pub(crate) fn drop_manifest(&self) -> Result<()> {
        self.write(|tx| {
            tx.execute_batch(
                "DELETE FROM shard_headers; DELETE FROM shard_blocks; DELETE FROM gone; \
                 DELETE FROM covered; DELETE FROM gone_covered;",
            )?;
            tx.execute("DELETE FROM settings WHERE name = ?1", [MANIFEST])?;
            Ok(())
        })?;
        *self.manifest.lock().expect("manifest lock") = Some(None);
        Ok(())
    }

    /// A shard's header kept here.
    pub(crate) fn header(&self, shard: usize) -> Result<Option<Vec<u8>>> {
        self.read(|conn| {
            conn.query_row(
                "SELECT header FROM shard_headers WHERE shard = ?1",
                [shard as i64],
                |r| r.get(0),
            )
            .optional()
        })
    }

    pub(crate) fn keep_header(&self, shard: usize, header: &[u8]) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT OR REPLACE INTO shard_headers VALUES (?1, ?2)",
                params![shard as i64, header],
            )
            .map(drop)
        })
    }

    /// A shard's block kept here.
    pub(crate) fn block(&self, shard: usize, block: usize) -> Result<Option<Vec<u8>>> {
        self.read(|conn| {
            conn.query_row(
                "SELECT data FROM shard_blocks WHERE shard = ?1 AND block = ?2",
                [shard as i64, block as i64],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// Keeps blocks fetched; beyond [`BLOCKS_KEPT`] bytes, half of those kept go first.
    pub(crate) fn keep_blocks(&self, blocks: &[(usize, usize, Vec<u8>)]) -> Result<()> {
        self.write(|tx| {
            let kept: i64 =
                tx.query_row("SELECT coalesce(sum(length(data)), 0) FROM shard_blocks", [], |r| {
                    r.get(0)
                })?;
            if kept > BLOCKS_KEPT {
                tx.execute(
                    "DELETE FROM shard_blocks WHERE (shard + block) % 2 = abs(random() % 2)",
                    [],
                )?;
            }
            let mut stmt = tx.prepare("INSERT OR REPLACE INTO shard_blocks VALUES (?1, ?2, ?3)")?;
            for (shard, block, data) in blocks {
                stmt.execute(params![*shard as i64, *block as i64, data])?;
            }
            Ok(())
        })
    }

    /// Records packs whose indexes were read here although the compacted index holds them
    /// (read for a model's keys): they are not counted twice.
    pub(crate) fn mark_covered(&self, names: &[String]) -> Result<()> {
        self.write(|tx| {
            let mut stmt = tx.prepare("INSERT OR IGNORE INTO covered VALUES (?1)")?;
            for name in names {
                stmt.execute([name])?;
            }
            Ok(())
        })
    }

    /// Records packs taken out of the listing that the compacted index still lists.
    pub(crate) fn mark_gone(&self, names: &[String]) -> Result<()> {
        self.write(|tx| {
            let mut stmt = tx.prepare("INSERT OR IGNORE INTO gone VALUES (?1)")?;
            for name in names {
                stmt.execute([name])?;
            }
            Ok(())
        })
    }

    /// Of `names` (packs taken out of the listing), those not yet known to be gone from
    /// the compacted index.
    pub(crate) fn not_counted_gone(&self, names: &[String]) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT 1 FROM gone_covered WHERE name = ?1")?;
            let mut left = Vec::new();
            for name in names {
                if !stmt.exists([name])? {
                    left.push(name.clone());
                }
            }
            Ok(left)
        })
    }

    /// Records packs the compacted index covers (name, body length) that have gone since:
    /// the remote's status leaves them out.
    pub(crate) fn count_gone(&self, packs: &[(String, u64)]) -> Result<()> {
        self.write(|tx| {
            let mut stmt = tx.prepare("INSERT OR IGNORE INTO gone_covered VALUES (?1, ?2)")?;
            for (name, body_len) in packs {
                stmt.execute(params![name, *body_len as i64])?;
            }
            Ok(())
        })
    }

    /// Packs and bytes of bodies of the compacted index gone since it was written.
    pub(crate) fn gone_counts(&self) -> Result<(u64, u64)> {
        self.read(|conn| {
            conn.query_row(
                "SELECT count(*), coalesce(sum(body_len), 0) FROM gone_covered",
                [],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
        })
    }

    /// Packs taken out of the listing since the compacted index was written.
    pub(crate) fn gone(&self) -> Result<HashSet<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT name FROM gone")?;
            stmt.query_map([], |r| r.get(0))?.collect()
        })
    }

    /// Records, from a compacted index, packs (name, body length) and their entries.
    pub(crate) fn add_compacted(&self, packs: &[(String, u64)], entries: &[Located]) -> Result<()> {
        self.write(|tx| {
            let mut ids = std::collections::HashMap::new();
            {
                let mut insert = tx.prepare(
                    "INSERT OR IGNORE INTO packs(name, objects, body_len) VALUES (?1, 0, ?2)",
                )?;
                let mut id = tx.prepare("SELECT id FROM packs WHERE name = ?1")?;
                for (name, body_len) in packs {
                    insert.execute(params![name, *body_len as i64])?;
                    ids.insert(name.clone(), id.query_row([name], |r| r.get::<_, i64>(0))?);
                }
            }
            let mut stmt =
                tx.prepare("INSERT OR IGNORE INTO keys VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            for e in entries {
                let Some(id) = ids.get(&e.pack) else { continue };
                stmt.execute(params![
                    &e.entry.key.as_bytes()[..],
                    id,
                    e.entry.offset as i64,
                    i64::from(e.entry.len),
                    e.entry.raw_len as i64,
                    e.entry.kind as i64
                ])?;
            }
            tx.execute(
                "UPDATE packs SET objects = (SELECT count(*) FROM keys WHERE keys.pack = packs.id) \
                 WHERE objects = 0",
                [],
            )?;
            Ok(())
        })
    }

    /// Every entry whose key lies in `from..to` (`to` `None`: to the end), for a
    /// compaction.
    pub(crate) fn range(&self, from: &[u8; 32], to: Option<&[u8; 32]>) -> Result<Vec<Located>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
                "SELECT k.key, p.name, k.offset, k.len, k.raw_len, k.kind FROM keys k JOIN packs p \
                 ON p.id = k.pack WHERE k.key >= ?1 AND (?2 IS NULL OR k.key < ?2)",
            )?;
            stmt.query_map(params![&from[..], to.map(|t| &t[..])], |r| {
                let bytes: Vec<u8> = r.get(0)?;
                Ok(Located {
                    pack: r.get(1)?,
                    entry: Entry {
                        key: Key::from_slice(&bytes).unwrap_or_else(|| Key::of(&bytes)),
                        offset: r.get::<_, i64>(2)? as u64,
                        len: r.get::<_, i64>(3)? as u32,
                        raw_len: r.get::<_, i64>(4)? as u64,
                        kind: kind(r.get(5)?),
                    },
                })
            })?
            .collect()
        })
    }
}
