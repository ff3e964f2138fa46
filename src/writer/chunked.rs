//! The writer's operations of a chunked save (`chunks.rs`): its chunks, then its manifest,
//! or, if it failed, letting go of the chunks it sent.

use std::sync::Arc;

use super::op::{Request, Unasked};
use super::stop::{Stop, StopContext};
use super::tx::Tx;
use crate::cache::uses;
use crate::db::table::Insert;
use crate::error::Result;
use crate::key::Key;
use crate::large::chunks::{self, Encoded};
use crate::large::inflight::Permit;
use crate::large::manifest::Manifest;

/// A chunk of a save under way, as the writer receives it.
pub(crate) enum Outgoing {
    /// Compressed (or not) and ready to store.
    Encoded(Encoded),
    /// Found stored when the save looked: only held, unless it has gone since, when the
    /// writer encodes it at `level` and stores it.
    Known { key: Key, raw: Vec<u8>, level: u32 },
}

impl Outgoing {
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Outgoing::Encoded(chunk) => chunk.data.len(),
            Outgoing::Known { raw, .. } => raw.len(),
        }
    }
}

/// Chunks of a save under way: stored (or held, if stored already) in the batch's
/// transaction. Nobody waits; a batch tried again keeps them, and a save whose chunks
/// never reached the database finds out when its manifest is committed.
pub(crate) struct PutChunks {
    pub chunks: Vec<Outgoing>,
    /// Given back to the save's budget when the writer drops the chunks.
    pub permit: Permit,
}

impl Unasked for PutChunks {
    fn rows(&self) -> usize {
        self.chunks.len()
    }

    fn bytes(&self) -> usize {
        self.chunks.iter().map(Outgoing::bytes).sum()
    }

    fn urgent(&self) -> bool {
        self.permit.pressing()
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        chunks::create(tx.conn)?;
        let totals = &mut tx.written.totals;
        for chunk in &self.chunks {
            match chunk {
                Outgoing::Encoded(chunk) => {
                    chunks::put(tx.conn, chunk, totals)
                        .stop(|| format!("storing chunk {}", chunk.key))?;
                }
                Outgoing::Known { key, raw, level } => {
                    if !chunks::hold(tx.conn, key).stop(|| format!("holding chunk {key}"))? {
                        let chunk = chunks::encode(*key, raw.clone(), *level);
                        chunks::put(tx.conn, &chunk, totals)
                            .stop(|| format!("storing chunk {key}"))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The manifest of a chunked save, after all its chunks: the object's row, inserted if
/// the object is not stored yet, and each chunk referenced. Answers whether the object
/// was new.
pub(crate) struct CommitChunked {
    pub key: Key,
    pub manifest: Arc<Manifest>,
    pub added: bool,
}

impl Request for CommitChunked {
    type Answer = bool;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        let table = tx.shared.schema.table(&self.key);
        let key = self.key;
        let what = || format!("inserting {key} into {}", table.name);
        let chunk_keys: Vec<Key> = self.manifest.chunks.iter().map(|c| c.key).collect();
        let stored = self.manifest.encode();
        let added = table
            .add(
                tx.conn,
                &key,
                self.manifest.len as i64,
                &stored,
                uses::now(),
                Insert { lookup: tx.lookup(&key), ..Insert::VALUE },
            )
            .stop(what)?;
        tx.note_added(&key, added);
        self.added = added == 1;
        let totals = &mut tx.written.totals;
        if self.added {
            // Every chunk is held by this save (`pending`), so none can have gone.
            if !chunks::commit(tx.conn, &self.manifest).stop(what)? {
                return Err(Stop::new(format!(
                    "a chunk of {key} went missing while its save was under way"
                )));
            }
            totals.objects += 1;
            totals.raw_bytes += self.manifest.len as i64;
            totals.stored_bytes += stored.len() as i64;
        } else {
            // Stored already (under this key, the same bytes): a use of it.
            chunks::unhold(tx.conn, &chunk_keys, totals)
                .stop(|| format!("releasing the chunks of {key}"))?;
            tx.shared.uses.record(&key);
        }
        Ok(())
    }

    fn answer(self) -> bool {
        self.added
    }
}

/// A chunked save that failed before its manifest lets go of the chunks it sent. Nobody
/// waits; a batch tried again keeps it.
pub(crate) struct Unhold(pub Vec<Key>);

impl Unasked for Unhold {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        if !chunks::table_exists(tx.conn)? {
            return Ok(());
        }
        chunks::unhold(tx.conn, &self.0, &mut tx.written.totals)
            .stop(|| "releasing the chunks of a failed save".into())
    }
}
