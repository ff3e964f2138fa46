//! Saving: hash, look up, compress, queue for the writer.
//!
//! Objects are hashed and compressed on the calling thread (`save`) or the stash's pool
//! (`save_all`) and handed to the writer through the bounded channel, after they are put
//! in the pending map: from the moment a save returns, every read sees the object. An
//! object over the size limit is refused before anything of its call is queued, so one bad
//! object never costs the others, the writer or the handle.

use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::counts::Count;
use crate::codec;
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::large::chunks::CHUNKED_ABOVE;
use crate::writer::pending::Row;
use crate::writer::{Hold, HoldQuietly, Message, unasked};

use super::Stash;

/// What saving needs, settled once by the open sequence.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saving {
    /// The gzip level of new objects.
    pub level: u32,
    /// The codec new objects are written with, as the stash records it.
    pub codec: Codec,
    /// The largest object a save accepts.
    pub max_object: u64,
    /// Bytes of first objects sampled to train a dictionary (zstd-dict).
    pub sample_bytes: usize,
}

/// Objects `save_all` looks up in one read transaction.
pub(super) const SAVE_CHUNK: usize = 256;
/// Keys of a chunk looked up before deciding the chunk is new data; see [`Stash::known`].
const PROBE_KEYS: usize = 16;

/// What saving did with one object.
pub(super) struct Saved {
    pub key: Key,
    /// Whether this thread queued the object's row (so that a message it sends next
    /// reaches the writer after the row).
    pub queued: bool,
}

impl Stash {
    /// Stores `object` and returns its key. An object already stored costs only its hash
    /// and a lookup.
    ///
    /// The object is hashed and compressed on the calling thread, then queued for the
    /// writer. Once `save` returns, every read from any thread (`get`, `get_many`,
    /// `contains`, `missing`) sees the object; it is committed at the writer's next batch
    /// (call [`Stash::flush`] to wait for that).
    ///
    /// # Errors
    /// [`Error::ReadOnly`] on a read-only handle, even for an object already stored;
    /// [`Error::TooLarge`] for an object over [`Stash::max_object_size`] (nothing is
    /// stored); [`Error::WriterStopped`] if the writer has stopped; [`Error::Database`] if
    /// the lookup fails.
    pub fn save(&self, object: &[u8]) -> Result<Key> {
        // A read-only handle refuses every save, of a stored object too.
        self.writer()?;
        self.check_size(object)?;
        let _call = self.shared.uses.saving();
        let key = Key::of(object);
        if !self.known(std::slice::from_ref(&key))?[0] {
            self.send_new(key, object, None)?;
        }
        Ok(key)
    }

    /// Stores many objects, hashing and compressing them in parallel; returns their keys in
    /// input order. Once it returns, every read sees every one of them.
    ///
    /// Memory stays bounded by the channel to the writer however many objects are given.
    ///
    /// # Errors
    /// [`Error::TooLarge`] if any object is over [`Stash::max_object_size`], before any of
    /// them is stored; otherwise as [`Stash::save`], and objects saved before an error stay
    /// saved.
    pub fn save_all<T: AsRef<[u8]> + Sync>(&self, objects: &[T]) -> Result<Vec<Key>> {
        self.save_each(None, objects, |object| object.as_ref(), |_, _| Ok(()))
    }

    /// Saves the object `object(item)` of every item in parallel, chunk by chunk, into
    /// the assembly `assembly` if given (`stash/models.rs`), and calls `then` with each
    /// chunk and what was done with its objects once the chunk's new objects are queued
    /// (from the same thread, so messages `then` sends come after).
    pub(super) fn save_each<I: Sync>(
        &self,
        assembly: Option<i64>,
        items: &[I],
        object: impl Fn(&I) -> &[u8] + Sync,
        then: impl Fn(&[I], &[Saved]) -> Result<()> + Sync,
    ) -> Result<Vec<Key>> {
        self.writer()?;
        for item in items {
            self.check_size(object(item))?;
        }
        let span = tracing::debug_span!(
            "save_batch",
            objects = items.len(),
            bytes = tracing::field::Empty,
            new = tracing::field::Empty,
        );
        let _entered = span.enter();
        if !span.is_disabled() {
            span.record("bytes", items.iter().map(|i| object(i).len()).sum::<usize>());
        }
        let saved_before = self.shared.counts.snapshot().get(Count::Saved);
        let _call = self.shared.uses.saving();
        self.train_gzip_code_ahead(items.iter().map(&object));
        let chunk = (items.len() / (self.pool.current_num_threads() * 4)).clamp(1, SAVE_CHUNK);
        let keys = self.pool.install(|| {
            let chunks: Vec<Vec<Key>> = items
                .par_chunks(chunk)
                .map(|c| {
                    let saved = self.save_chunk(assembly, c, &object)?;
                    then(c, &saved)?;
                    Ok(saved.into_iter().map(|s| s.key).collect())
                })
                .collect::<Result<_>>()?;
            Ok(chunks.into_iter().flatten().collect())
        });
        // New by this handle's count (other calls on it at the same time count too).
        let saved = self.shared.counts.snapshot().get(Count::Saved);
        span.record("new", saved.wrapping_sub(saved_before) as i64);
        keys
    }

    /// Queues rows for the writer as they are, unhashed and uncompressed (see
    /// `writer_benchmark.rs`).
    #[cfg(feature = "writer-benchmark")]
    pub(crate) fn queue_rows(&self, rows: Vec<Row>) -> Result<()> {
        for row in rows {
            self.shared.pending.insert(row.clone());
            self.send(Message::Save(row))?;
        }
        Ok(())
    }

    fn check_size(&self, object: &[u8]) -> Result<()> {
        let size = object.len() as u64;
        if size > self.saving.max_object {
            return Err(Error::TooLarge { size, limit: self.saving.max_object });
        }
        Ok(())
    }

    /// Hashes a chunk, looks all its keys up at once, then compresses and sends the ones
    /// not known to be stored.
    fn save_chunk<I>(
        &self,
        assembly: Option<i64>,
        items: &[I],
        object: impl Fn(&I) -> &[u8],
    ) -> Result<Vec<Saved>> {
        let keys: Vec<Key> = items.iter().map(|i| Key::of(object(i))).collect();
        let stored = self.known(&keys)?;
        let mut saved = Vec::with_capacity(keys.len());
        let mut held = Vec::new();
        for ((item, key), stored) in items.iter().zip(keys).zip(stored) {
            let queued = !stored && self.send_new(key, object(item), assembly)?;
            if stored {
                held.push(key);
            }
            saved.push(Saved { key, queued });
        }
        // Objects an assembly saves that are stored already are held for it, as the ones
        // it stores are.
        if let Some(assembly) = assembly
            && !held.is_empty()
        {
            self.send(Message::Op(unasked(HoldQuietly(Hold {
                assembly,
                keys: held,
                stored: Vec::new(),
            }))))?;
        }
        Ok(saved)
    }

    /// Which of `keys` are stored or pending, for saving: a key found here need not be
    /// compressed and sent again. A key wrongly taken for unknown only costs compressing
    /// it again: the writer's `INSERT OR IGNORE` drops the duplicate.
    ///
    /// All keys are looked up in one read transaction, which takes SQLite's locks once
    /// instead of once per key (per-key locking cost 25% of the save time). A reader never
    /// waits for the writer (WAL), so compressing threads are not idled by commits.
    ///
    /// A chunk whose first [`PROBE_KEYS`] keys are all unknown is taken for new data and
    /// the rest is not looked up either: for new objects a lookup only repeats the writer's
    /// `INSERT OR IGNORE`, and at ten million objects each one reads an index page. The
    /// cost when the guess is wrong is compressing some stored objects again; it is
    /// largest when about one key in 17 is stored, at about 2% of the chunk (a chunk of
    /// stored objects, or of half stored ones, is looked up in full with near certainty).
    fn known(&self, keys: &[Key]) -> Result<Vec<bool>> {
        let mut known: Vec<bool> = keys.iter().map(|k| self.shared.pending.contains(k)).collect();
        let stored = self.readers.checkout()?.in_transaction(|conn| {
            let mut stored = Vec::with_capacity(keys.len());
            for (i, key) in keys.iter().enumerate() {
                if i == PROBE_KEYS && !stored.contains(&true) {
                    break;
                }
                stored.push(known[i] || self.stored(conn, key)?);
            }
            Ok(stored)
        })?;
        known[..stored.len()].copy_from_slice(&stored);
        self.shared.counts.add(Count::SavedAgain, known.iter().filter(|&&k| k).count() as u64);
        // Saving a stored object again is a use of it.
        self.shared
            .uses
            .record_all(keys.iter().zip(&known).filter(|(_, k)| **k).map(|(key, _)| key));
        Ok(known)
    }

    /// Compresses an object found not stored and queues it for the writer; whether this
    /// call queued it (not if another save had queued it meanwhile).
    fn send_new(&self, key: Key, object: &[u8], assembly: Option<i64>) -> Result<bool> {
        self.writer()?;
        if object.len() > CHUNKED_ABOVE {
            // Committed, not queued (`stash/large.rs`); held for the assembly it was
            // saved into, as a queued row is tagged.
            self.save_chunked(object)?;
            self.shared.counts.add(Count::Saved, 1);
            if let Some(assembly) = assembly {
                let hold = Hold { assembly, keys: vec![key], stored: Vec::new() };
                self.send(Message::Op(unasked(HoldQuietly(hold))))?;
            }
            return Ok(false);
        }
        // A duplicate earlier in the same batch call may have been queued meanwhile.
        if self.shared.pending.contains(&key) {
            self.shared.counts.add(Count::SavedAgain, 1);
            return Ok(false);
        }
        let dict = self.dictionary_for(object);
        let code = if dict.is_none() { self.gzip_code_for(object) } else { None };
        let row = Row {
            key,
            raw_len: object.len() as u64,
            data: Arc::new(codec::encode(object, self.saving.level, dict.as_deref(), code)),
            model: assembly,
        };
        // Counted before the writer can find it stored already (`Counts::saved_already`).
        self.shared.counts.add(Count::Saved, 1);
        let shown = self.shared.show_pending(&row);
        let sent = self.send(Message::Save(row.clone()));
        if sent.is_err() && shown {
            // Not queued: reads must not show it.
            self.shared.pending.settle(&row);
        }
        #[cfg(feature = "remote")]
        if sent.is_ok()
            && let Some(behind) = &self.behind
        {
            behind.queue(key);
        }
        sent.map(|()| true)
    }
}
