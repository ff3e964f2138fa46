//! The chunk pass of a check: every chunk decoded and hashed, every reference count
//! recounted from the manifests, and every chunked object checked to have all its chunks.
//!
//! It reads in one read transaction, so that a save, remove or eviction committing
//! meanwhile (in any process) cannot pass for a wrong count: the manifests and the chunks
//! are one snapshot. Chunks that no manifest lists and no object references are the
//! chunks of saves under way or killed (`chunks.rs`): counted, not damage.

use std::collections::{HashMap, HashSet};
use std::ops::Deref;

use rusqlite::Connection;

use super::Check;
use crate::db::readers::in_read_transaction;
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::large::chunks::{self, TABLE};
use crate::large::manifest::{ChunkRef, Manifest};
use crate::report::stats::VerifyReport;

/// What the chunk pass found.
#[derive(Default)]
struct Found {
    checked: u64,
    pending: u64,
    /// Objects with a missing or damaged chunk.
    broken: Vec<Key>,
    problems: Vec<String>,
}

impl<C: Deref<Target = Connection>, F: Fn() -> Result<C>> Check<'_, F> {
    /// Runs the chunk pass, if the stash has chunks.
    pub(super) fn chunks(&self, report: &mut VerifyReport) {
        let found = (self.connect)().and_then(|conn| {
            in_read_transaction(&conn, |conn| {
                if !chunks::table_exists(conn)? {
                    return Ok(Found::default());
                }
                self.chunk_pass(conn)
            })
        });
        match found {
            Ok(found) => {
                report.chunks = found.checked;
                report.pending_chunks = found.pending;
                for key in found.broken {
                    if !report.corrupt.contains(&key) {
                        report.corrupt.push(key);
                    }
                }
                report.problems.extend(found.problems);
            }
            Err(e) => report.problems.push(format!("the chunks cannot be checked: {e}")),
        }
    }

    fn chunk_pass(&self, conn: &Connection) -> Result<Found> {
        // Every intact manifest: which objects list each chunk, how many times.
        let mut listed: HashMap<Key, (u64, u32)> = HashMap::new();
        let mut objects: Vec<(Key, Vec<ChunkRef>)> = Vec::new();
        for table in &self.schema.tables {
            let mut stmt = conn
                .prepare(&table.manifests)
                .context(|| format!("reading the manifests of {}", table.name))?;
            let mut rows = stmt.query([]).context(|| table.name.clone())?;
            while let Some(row) = rows.next().context(|| table.name.clone())? {
                let row = table.manifests.columns.read(row);
                let key = row.key().context(|| table.name.clone())?;
                let raw_len = row.raw_len().context(|| table.name.clone())?;
                let data = row.data().map(<[u8]>::to_vec);
                let (Some(key), Ok(data)) = (key, data) else { continue };
                // A damaged manifest is reported by the table pass.
                let Ok(manifest) = Manifest::decode(&data, raw_len) else { continue };
                for chunk in &manifest.chunks {
                    listed.entry(chunk.key).or_insert((0, chunk.len)).0 += 1;
                }
                objects.push((key, manifest.chunks));
            }
        }
        // A root an incomplete model keeps aside holds its chunks like a stored object.
        for (key, hidden) in crate::db::models::hidden_roots(conn)? {
            if hidden.place.is_some() || !crate::large::manifest::is_manifest(&hidden.data) {
                continue;
            }
            let Ok(manifest) = Manifest::decode(&hidden.data, hidden.raw_len) else { continue };
            for chunk in &manifest.chunks {
                listed.entry(chunk.key).or_insert((0, chunk.len)).0 += 1;
            }
            objects.push((key, manifest.chunks));
        }
        let mut found = Found::default();
        let mut bad: HashSet<Key> = HashSet::new();
        let mut seen: HashSet<Key> = HashSet::new();
        let mut stmt = conn
            .prepare(&format!("SELECT key, raw_len, form, data, refs FROM {TABLE}"))
            .context(|| "reading the chunks".to_string())?;
        let mut rows = stmt.query([]).context(|| "reading the chunks".to_string())?;
        while let Some(row) = rows.next().context(|| "reading the chunks".to_string())? {
            found.checked += 1;
            let read = (|| -> rusqlite::Result<_> {
                let key: Vec<u8> = row.get(0)?;
                Ok((
                    key,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, Vec<u8>>(3)?,
                    row.get::<_, i64>(4)?,
                ))
            })();
            let Ok((key, raw_len, form, data, refs)) = read else {
                found.problems.push("a chunk's row cannot be read".to_string());
                continue;
            };
            let Some(key) = Key::from_slice(&key) else {
                found.problems.push("a chunk's key is damaged".to_string());
                continue;
            };
            seen.insert(key);
            let (times, len) = listed.get(&key).copied().unwrap_or((0, raw_len.max(0) as u32));
            if chunks::check(&ChunkRef { key, len }, raw_len, form, &data).is_err() {
                bad.insert(key);
            }
            if times == 0 && refs == 0 {
                found.pending += 1;
            } else if refs.max(0) as u64 != times {
                found.problems.push(format!(
                    "chunk {key} records {refs} references but {times} objects list it"
                ));
            }
        }
        for (object, chunks) in objects {
            if chunks.iter().any(|c| bad.contains(&c.key) || !seen.contains(&c.key)) {
                found.broken.push(object);
            }
        }
        Ok(found)
    }
}
