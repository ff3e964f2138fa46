//! The public handle: save, get and the batch calls, over the writer and the read pool.
//!
//! Invariants: a saved object is in the pending map or committed from the moment `save`
//! returns, so every thread reads its writes; no byte reaches a caller before its blake3
//! hash has been checked against the key it was asked for.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Sender, bounded};
use rayon::prelude::*;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

use crate::builder::StashBuilder;
use crate::codec;
use crate::dict::{self, Codec, Dictionaries, Dictionary};
use crate::durability::Durability;
use crate::entries::Entries;
use crate::error::{DbContext, Error, Result};
use crate::key::Key;
use crate::layout::Layout;
use crate::pagescan;
use crate::pending::Row;
use crate::readers::{BUSY_TIMEOUT, Readers};
use crate::recovery::{self, RecoveryReport, sibling};
use crate::schema::{self, Schema, TableSql};
use crate::stats::{Stats, VerifyReport};
use crate::writer::{self, Message, Shared};

/// Rows read per query by `verify`: each query holds a read lock only briefly, so the
/// writer is never kept waiting by a long scan.
const SCAN_CHUNK: i64 = 1_024;
/// Objects `save_all` looks up in one read transaction.
const SAVE_CHUNK: usize = 256;
/// What `get_many` found for the key at an index of its input.
type Found = (usize, Result<Option<Vec<u8>>>);

/// Fewest keys `get_many` gives one part. A part costs a read transaction (its file lock,
/// a few syscalls) and a hand-over to the pool, small beside 64 reads of ~20 µs each.
const GET_MANY_MIN_PART: usize = 64;
/// Keys of a chunk looked up before deciding the chunk is new data; see [`Stash::known`].
const PROBE_KEYS: usize = 16;

/// A content-addressed object cache in one SQLite file.
///
/// One `Stash` per file and process; share it between threads by reference (it is
/// `Send + Sync`). Dropping it flushes and stops the writer, as [`Stash::close`] does, but
/// can only log a failure.
pub struct Stash {
    shared: Arc<Shared>,
    sender: Option<Sender<Message>>,
    writer: Option<JoinHandle<()>>,
    readers: Readers,
    pool: rayon::ThreadPool,
    path: PathBuf,
    level: u32,
    codec: Codec,
    dicts: Arc<Dictionaries>,
    sample_bytes: usize,
    trainer: Mutex<Trainer>,
    durability: Durability,
    recovery: Option<RecoveryReport>,
    _lock: File,
}

/// What the builder hands over to start a stash.
pub(crate) struct Parts {
    pub path: PathBuf,
    pub conn: Connection,
    pub schema: Schema,
    pub durability: Durability,
    pub level: u32,
    pub codec: Codec,
    pub sample_bytes: usize,
    pub batch_size: usize,
    pub capacity: usize,
    pub read_mmap: u64,
    pub pool: rayon::ThreadPool,
    pub recovery: Option<RecoveryReport>,
    pub lock: File,
}

impl std::fmt::Debug for Stash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stash")
            .field("path", &self.path)
            .field("layout", &self.layout())
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl Stash {
    /// Opens the stash at `path` with default settings, creating it if needed.
    ///
    /// # Errors
    /// As [`StashBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Stash> {
        StashBuilder::default().open(path)
    }

    /// Settings for opening a stash.
    pub fn builder() -> StashBuilder {
        StashBuilder::default()
    }

    pub(crate) fn start(parts: Parts) -> Result<Stash> {
        let statements = parts.schema.statement_count();
        let dicts = Arc::new(Dictionaries::load(&parts.conn)?);
        let trainer = if parts.codec == Codec::ZstdDict && dicts.current().is_none() {
            Trainer::Sampling { samples: Vec::new(), bytes: 0 }
        } else {
            Trainer::Off
        };
        let shared = Arc::new(Shared::new(parts.schema));
        let (sender, receiver) = bounded(parts.capacity);
        let writer = writer::spawn(
            parts.conn,
            Arc::clone(&shared),
            receiver,
            parts.batch_size,
            parts.durability,
        )?;
        Ok(Stash {
            shared,
            sender: Some(sender),
            writer: Some(writer),
            readers: Readers::new(parts.path.clone(), statements, parts.read_mmap),
            pool: parts.pool,
            path: parts.path,
            level: parts.level,
            codec: parts.codec,
            dicts,
            sample_bytes: parts.sample_bytes,
            trainer: Mutex::new(trainer),
            durability: parts.durability,
            recovery: parts.recovery,
            _lock: parts.lock,
        })
    }

    /// Stores `object` and returns its key. An object already stored costs only its hash
    /// and a lookup.
    ///
    /// The object is hashed and compressed on the calling thread, then queued for the
    /// writer: it is readable from every thread at once, and committed at the writer's next
    /// batch (call [`Stash::flush`] to wait for that).
    ///
    /// # Errors
    /// [`Error::WriterStopped`] if the writer has stopped; [`Error::Database`] if the
    /// lookup fails.
    pub fn save(&self, object: &[u8]) -> Result<Key> {
        let key = Key::of(object);
        if !self.known(std::slice::from_ref(&key))?[0] {
            self.send_new(key, object)?;
        }
        Ok(key)
    }

    /// Stores many objects, hashing and compressing them in parallel; returns their keys in
    /// input order.
    ///
    /// Memory stays bounded by the channel to the writer however many objects are given.
    ///
    /// # Errors
    /// As [`Stash::save`]; objects saved before an error stay saved.
    pub fn save_all<T: AsRef<[u8]> + Sync>(&self, objects: &[T]) -> Result<Vec<Key>> {
        let chunk = (objects.len() / (self.pool.current_num_threads() * 4)).clamp(1, SAVE_CHUNK);
        self.pool.install(|| {
            let chunks: Vec<Vec<Key>> =
                objects.par_chunks(chunk).map(|c| self.save_chunk(c)).collect::<Result<_>>()?;
            Ok(chunks.into_iter().flatten().collect())
        })
    }

    /// Hashes a chunk, looks all its keys up at once, then compresses and sends the ones
    /// not known to be stored.
    fn save_chunk<T: AsRef<[u8]>>(&self, objects: &[T]) -> Result<Vec<Key>> {
        let keys: Vec<Key> = objects.iter().map(|o| Key::of(o.as_ref())).collect();
        let stored = self.known(&keys)?;
        for ((object, key), stored) in objects.iter().zip(&keys).zip(stored) {
            if !stored {
                self.send_new(*key, object.as_ref())?;
            }
        }
        Ok(keys)
    }

    /// Which of `keys` are stored or pending, for saving: a key found here need not be
    /// compressed and sent again.
    ///
    /// All keys are looked up in one read transaction, which takes SQLite's file lock once
    /// instead of once per key (measured 25% of the save time). The lookup does not wait
    /// for the writer: while it commits it holds the lock every reader needs, and waiting
    /// would idle the compressing threads for the whole commit. Then only pending keys count
    /// as known; the others are compressed and sent, and the writer's `INSERT OR IGNORE`
    /// drops those that turn out to be stored.
    ///
    /// A chunk whose first [`PROBE_KEYS`] keys are all unknown is taken for new data and
    /// the rest is not looked up either: for new objects a lookup only repeats the writer's
    /// `INSERT OR IGNORE`, and at ten million objects each one reads an index page. The
    /// cost when the guess is wrong is compressing some stored objects again; it is
    /// largest when about one key in 17 is stored, at about 2% of the chunk (a chunk of
    /// stored objects, or of half stored ones, is looked up in full with near certainty).
    fn known(&self, keys: &[Key]) -> Result<Vec<bool>> {
        let pending = |key: &Key| self.shared.pending.contains(key);
        let reader = self.readers.checkout()?;
        let set_timeout = |timeout| {
            reader.busy_timeout(timeout).context(|| "setting the busy timeout".to_string())
        };
        set_timeout(Duration::ZERO)?;
        let looked = reader.in_transaction(|conn| {
            let mut known = Vec::with_capacity(keys.len());
            for (i, key) in keys.iter().enumerate() {
                if i == PROBE_KEYS && !known.contains(&true) {
                    known.extend(keys[i..].iter().map(pending));
                    break;
                }
                known.push(pending(key) || self.stored(conn, key)?);
            }
            Ok(known)
        });
        set_timeout(BUSY_TIMEOUT)?;
        match looked {
            Err(e) if e.is_busy() => Ok(keys.iter().map(pending).collect()),
            looked => looked,
        }
    }

    /// Compresses an object found not stored and queues it for the writer.
    fn send_new(&self, key: Key, object: &[u8]) -> Result<()> {
        let sender = self.sender()?;
        // A duplicate earlier in the same batch call may have been queued meanwhile.
        if self.shared.pending.contains(&key) {
            return Ok(());
        }
        let dict = self.dictionary_for(object);
        let row = Row {
            key,
            raw_len: object.len() as u64,
            data: Arc::new(codec::encode(object, self.level, dict.as_deref())),
        };
        self.shared.pending.insert(row.clone());
        if sender.send(Message::Save(row)).is_err() {
            return Err(self.shared.stopped_error());
        }
        Ok(())
    }

    /// The dictionary a new object is compressed with. While the codec wants one and none
    /// exists, the object joins the training sample (and is gzipped).
    fn dictionary_for(&self, object: &[u8]) -> Option<Arc<Dictionary>> {
        if self.codec != Codec::ZstdDict {
            return None;
        }
        let current = self.dicts.current();
        if current.is_none() {
            self.sample(object);
        }
        current
    }

    /// Adds `object` to the training sample; the call that fills the sample trains the
    /// dictionary (a few hundred milliseconds, notes/compression.md) while other threads
    /// keep saving with gzip.
    fn sample(&self, object: &[u8]) {
        let mut trainer = self.trainer.lock().unwrap_or_else(|p| p.into_inner());
        let Trainer::Sampling { samples, bytes } = &mut *trainer else { return };
        samples.push(object.to_vec());
        *bytes += object.len();
        if *bytes < self.sample_bytes {
            return;
        }
        let samples = std::mem::take(samples);
        *trainer = Trainer::Off;
        drop(trainer);
        let trained =
            self.sender().and_then(|sender| train_and_send(&samples, sender, &self.dicts));
        if let Err(e) = trained {
            log::warn!("objstash: no dictionary ({e}); objects stay gzipped");
        }
    }

    /// Trains a new dictionary on the objects stored so far (up to the sample size, see
    /// [`StashBuilder::dictionary_sample`]) and compresses new objects with it; returns its
    /// id. Objects already stored keep the codec they were written with and stay readable.
    /// Waits for pending writes to commit.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless the stash was opened with [`Codec::ZstdDict`], or
    /// when it holds too few objects to train on; as [`Stash::flush`] otherwise.
    pub fn train(&self) -> Result<u32> {
        if self.codec != Codec::ZstdDict {
            return Err(Error::config("training a dictionary needs Codec::ZstdDict"));
        }
        let totals = self.totals()?;
        // A uniform sample of the stored objects (reservoir sampling), sized to the sample
        // bytes by the mean object size: retraining sees what the stash holds now.
        let mean = (totals.raw_bytes / totals.objects.max(1)).max(1) as usize;
        let wanted = (self.sample_bytes / mean).max(dict::MIN_SAMPLES);
        let mut rng = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
            | 1;
        let mut keys = Vec::with_capacity(wanted);
        for (seen, entry) in self.entries()?.enumerate() {
            let key = entry?.key;
            if keys.len() < wanted {
                keys.push(key);
                continue;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let slot = (rng % (seen as u64 + 1)) as usize;
            if slot < wanted {
                keys[slot] = key;
            }
        }
        let mut samples = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(SAVE_CHUNK) {
            samples.extend(self.get_many(chunk)?.into_iter().flatten());
        }
        // An explicit training ends any sampling of first objects.
        *self.trainer.lock().unwrap_or_else(|p| p.into_inner()) = Trainer::Off;
        let id = train_and_send(&samples, self.sender()?, &self.dicts)?;
        self.flush()?;
        Ok(id)
    }

    /// The codec new objects are written with.
    #[must_use]
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Returns once every object saved and removed before the call is committed. In
    /// [`Durability::Safe`] committed means on disk.
    ///
    /// # Errors
    /// [`Error::WriterStopped`] if a commit failed: objects saved since the previous
    /// successful flush may not be stored.
    pub fn flush(&self) -> Result<()> {
        let (ack, done) = bounded(1);
        self.send(Message::Flush(ack))?;
        match done.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(Error::WriterStopped { reason }),
            Err(_) => Err(self.shared.stopped_error()),
        }
    }

    /// The object stored under `key`, or `None`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if the stored row does not decompress or does not hash to `key`;
    /// the damaged bytes are never returned. [`Error::Database`] if the read fails.
    pub fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        if let Some(row) = self.shared.pending.get(key) {
            return decode(key, row.raw_len, &row.data, &self.dicts).map(Some);
        }
        let reader = self.readers.checkout()?;
        let table = self.table(key);
        let mut stmt =
            reader.prepare_cached(&table.select).context(|| format!("reading {}", table.name))?;
        stmt.query_row([&key.as_bytes()[..]], |r| {
            let raw_len = r.get::<_, i64>(0)?;
            let data = r.get_ref(1)?.as_blob()?;
            Ok(decode(key, raw_len.max(0) as u64, data, &self.dicts))
        })
        .optional()
        .context(|| format!("reading {key} from {}", table.name))?
        .transpose()
    }

    /// The objects stored under `keys`, in the same order, `None` for those not stored.
    ///
    /// The keys are sorted and split into one part per thread of the stash's pool; each
    /// part reads its rows in key order in one read transaction (SQLite takes its lock once
    /// per part, not per key), then decompresses and checks them while the other parts do
    /// the same. That is faster than a loop of [`Stash::get`].
    ///
    /// # Errors
    /// [`Error::Database`] if a read fails; otherwise [`Error::Corrupt`] for the first
    /// key in `keys` whose row is damaged.
    pub fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by_key(|&i| keys[i]);
        let threads = self.pool.current_num_threads().max(1);
        let part = keys.len().div_ceil(threads).max(GET_MANY_MIN_PART);
        let parts: Vec<Vec<Found>> = self.pool.install(|| {
            order
                .par_chunks(part)
                .map(|indices| self.read_part(keys, indices))
                .collect::<Result<_>>()
        })?;
        let mut found: Vec<Option<Result<Option<Vec<u8>>>>> = Vec::with_capacity(keys.len());
        found.resize_with(keys.len(), || None);
        for (i, value) in parts.into_iter().flatten() {
            found[i] = Some(value);
        }
        found.into_iter().map(|value| value.expect("every index is in one part")).collect()
    }

    /// Reads the rows of `keys[i]` for each `i` of `indices` (in key order) in one read
    /// transaction, then decodes them, each to its own result.
    fn read_part(&self, keys: &[Key], indices: &[usize]) -> Result<Vec<Found>> {
        let rows = self.readers.checkout()?.in_transaction(|conn| {
            let mut rows: Vec<Option<(u64, Arc<Vec<u8>>)>> = Vec::with_capacity(indices.len());
            for &i in indices {
                let key = &keys[i];
                if let Some(row) = self.shared.pending.get(key) {
                    rows.push(Some((row.raw_len, row.data)));
                    continue;
                }
                let table = self.table(key);
                let mut stmt = conn
                    .prepare_cached(&table.select)
                    .context(|| format!("reading {}", table.name))?;
                let row = stmt
                    .query_row([&key.as_bytes()[..]], |r| {
                        let raw_len = r.get::<_, i64>(0)?.max(0) as u64;
                        Ok((raw_len, Arc::new(r.get::<_, Vec<u8>>(1)?)))
                    })
                    .optional()
                    .context(|| format!("reading {key} from {}", table.name))?;
                rows.push(row);
            }
            Ok(rows)
        })?;
        Ok(indices
            .iter()
            .zip(rows)
            .map(|(&i, row)| {
                let key = &keys[i];
                (i, row.map(|(raw_len, data)| decode(key, raw_len, &data, &self.dicts)).transpose())
            })
            .collect())
    }

    /// Whether an object is stored under `key` (without reading or checking it).
    ///
    /// # Errors
    /// [`Error::Database`] if the lookup fails.
    pub fn contains(&self, key: &Key) -> Result<bool> {
        if self.shared.pending.contains(key) {
            return Ok(true);
        }
        let reader = self.readers.checkout()?;
        self.stored(&reader, key)
    }

    /// The keys among `keys` that are not stored, in input order: what still has to be
    /// fetched or sent.
    ///
    /// # Errors
    /// [`Error::Database`] if a lookup fails.
    pub fn missing(&self, keys: &[Key]) -> Result<Vec<Key>> {
        self.readers.checkout()?.in_transaction(|conn| {
            let mut missing = Vec::new();
            for key in keys {
                if !self.shared.pending.contains(key) && !self.stored(conn, key)? {
                    missing.push(*key);
                }
            }
            Ok(missing)
        })
    }

    /// Deletes the object under `key`; returns whether one was stored. Committed when it
    /// returns.
    ///
    /// # Errors
    /// [`Error::WriterStopped`] if the writer has stopped.
    pub fn remove(&self, key: &Key) -> Result<bool> {
        let (ack, done) = bounded(1);
        self.send(Message::Remove(*key, ack))?;
        match done.recv() {
            Ok(Ok(removed)) => Ok(removed),
            Ok(Err(reason)) => Err(Error::WriterStopped { reason }),
            Err(_) => Err(self.shared.stopped_error()),
        }
    }

    /// How many objects are stored. Waits for pending writes to commit.
    ///
    /// # Errors
    /// As [`Stash::flush`], or [`Error::Database`] if the count cannot be read.
    pub fn len(&self) -> Result<u64> {
        Ok(self.totals()?.objects)
    }

    /// Whether no object is stored. Waits for pending writes to commit.
    ///
    /// # Errors
    /// As [`Stash::len`].
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The size report: objects, raw and stored bytes, file size, ratio. Waits for pending
    /// writes to commit; costs no scan.
    ///
    /// # Errors
    /// As [`Stash::len`], or [`Error::Io`] if a file size cannot be read.
    pub fn stats(&self) -> Result<Stats> {
        let totals = self.totals()?;
        let mut file_bytes = 0;
        for suffix in ["", "-wal", "-journal"] {
            let file = sibling(&self.path, suffix);
            match std::fs::metadata(&file) {
                Ok(meta) => file_bytes += meta.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::io(format!("reading the size of {}", file.display()), e));
                }
            }
        }
        Ok(Stats {
            objects: totals.objects,
            raw_bytes: totals.raw_bytes,
            stored_bytes: totals.stored_bytes,
            file_bytes,
            layout: self.layout(),
            durability: self.durability,
            dictionaries: self.dicts.len(),
        })
    }

    /// Reads every object, decompresses it and checks its hash, and looks every intact
    /// key up through the key index: lists every corrupt key and every key `get` cannot
    /// find. Also compares the count with the recorded total and runs SQLite's integrity
    /// check, which holds a read lock for its duration (the writer waits). Damage that
    /// stops a table's scan is reported as a problem and the other tables are still
    /// checked. Waits for pending writes to commit.
    ///
    /// # Errors
    /// As [`Stash::flush`], or [`Error::Database`] if no read connection can be opened.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.flush()?;
        let mut report = VerifyReport::default();
        for table in &self.shared.schema.tables {
            if let Err(problem) = self.verify_table(table, &mut report) {
                report.problems.push(problem);
            }
        }
        // Rows the table scan cannot see (a truncated file) or keys the index has lost
        // (damage to index pages) do not show up above; the recorded count and SQLite's
        // own check find them. Already flushed above: read the totals without a flush.
        match schema::read_totals(&*self.readers.checkout()?) {
            Ok(totals) if totals.objects == report.checked => {}
            Ok(totals) => report.problems.push(format!(
                "the stash records {} objects but {} were found",
                totals.objects, report.checked
            )),
            Err(e) => report.problems.push(format!("the recorded totals cannot be read: {e}")),
        }
        if let Some(problem) = recovery::check(&*self.readers.checkout()?) {
            report.problems.push(problem);
        }
        if !report.problems.is_empty() {
            self.verify_pages(&mut report);
        }
        Ok(report)
    }

    /// The file is damaged: SQLite may not reach every row, so read the table leaf pages
    /// directly (as salvage does) and look every key found there up as `get` would, to
    /// name the keys `get` cannot serve.
    fn verify_pages(&self, report: &mut VerifyReport) {
        if self.durability == Durability::Safe {
            // Bring committed pages from the write-ahead log into the file the scanner
            // reads; PASSIVE never waits for the writer. Whatever it leaves in the log is
            // only newer than what the scan sees, and every key is checked through SQLite.
            if let Ok(reader) = self.readers.checkout() {
                let _ = reader.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        }
        let mut listed: HashSet<Key> =
            report.corrupt.iter().chain(&report.unreachable).copied().collect();
        let mut untrusted = HashSet::new();
        let scanned = pagescan::scan(&self.path, |(key, raw_len, data)| {
            if listed.contains(&key) {
                return;
            }
            let intact = raw_len >= 0 && decode(&key, raw_len as u64, &data, &self.dicts).is_ok();
            match self.get(&key) {
                Ok(Some(_)) => {}
                Ok(None) if intact => {
                    report.unreachable.push(key);
                    listed.insert(key);
                }
                // A damaged row the index does not know: its key may itself be damaged,
                // so it is counted, not named.
                Ok(None) => {
                    untrusted.insert(key);
                }
                Err(_) => {
                    report.corrupt.push(key);
                    listed.insert(key);
                }
            }
        });
        // The key indexes name rows whose cells are too damaged to be read at all.
        let indexed = pagescan::scan_index_keys(&self.path, |key| {
            if !listed.contains(&key) && !untrusted.contains(&key) && self.get(&key).is_err() {
                report.corrupt.push(key);
                listed.insert(key);
            }
        });
        if let Err(e) = scanned.and(indexed) {
            report.problems.push(format!("reading the pages of the file stopped: {e}"));
        }
        report.unnamed = untrusted.len() as u64;
    }

    /// Checks one table chunk by chunk; `Err` describes damage that stopped the scan.
    fn verify_table(&self, table: &TableSql, report: &mut VerifyReport) -> Result<(), String> {
        let mut after = 0i64;
        loop {
            let chunk = self
                .scan_chunk(table, after)
                .map_err(|e| format!("{}: the scan stopped after row {after}: {e}", table.name))?;
            let Some(last) = chunk.last().map(|row| row.rowid) else { return Ok(()) };
            // A damaged b-tree can lead a cursor back to rows it has passed; without this
            // check the scan would go round forever.
            let mut previous = after;
            for row in &chunk {
                if row.rowid <= previous {
                    return Err(format!(
                        "{}: the table's b-tree is damaged (row {} came after row {previous})",
                        table.name, row.rowid
                    ));
                }
                previous = row.rowid;
            }
            report.checked += chunk.len() as u64;
            let checked: Vec<(Key, bool)> = self.pool.install(|| {
                chunk
                    .par_iter()
                    .map(|row| match Key::from_slice(&row.key) {
                        Some(key) => (
                            key,
                            decode(&key, row.raw_len.max(0) as u64, &row.data, &self.dicts).is_ok(),
                        ),
                        // A key blob of the wrong length cannot address anything; it is
                        // reported under the hash of what it holds.
                        None => (Key::of(&row.key), false),
                    })
                    .collect()
            });
            let mut intact = Vec::with_capacity(checked.len());
            for (key, ok) in checked {
                if ok { intact.push(key) } else { report.corrupt.push(key) }
            }
            report.unreachable.extend(self.unreachable(table, &intact));
            after = last;
        }
    }

    /// Up to [`SCAN_CHUNK`] rows of `table` after rowid `after`. Values of the wrong type
    /// (damage) are read as empty, so the row fails its check instead of the scan.
    fn scan_chunk(&self, table: &TableSql, after: i64) -> Result<Vec<ScannedRow>> {
        fn blob(value: ValueRef<'_>) -> Vec<u8> {
            match value {
                ValueRef::Blob(b) | ValueRef::Text(b) => b.to_vec(),
                _ => Vec::new(),
            }
        }
        let reader = self.readers.checkout()?;
        let context = || format!("scanning {}", table.name);
        let mut stmt = reader.prepare_cached(&table.scan).context(context)?;
        let rows = stmt
            .query_map(params![after, SCAN_CHUNK], |r| {
                Ok(ScannedRow {
                    rowid: r.get(0)?,
                    key: blob(r.get_ref(1)?),
                    raw_len: r.get_ref(2)?.as_i64().unwrap_or(-1),
                    data: blob(r.get_ref(3)?),
                })
            })
            .context(context)?;
        rows.collect::<rusqlite::Result<_>>().context(context)
    }

    /// Those of `keys` (read from `table`'s rows) that the key index does not find.
    fn unreachable(&self, table: &TableSql, keys: &[Key]) -> Vec<Key> {
        let lookup = |conn: &Connection| -> Result<Vec<Key>> {
            let mut stmt = conn.prepare_cached(&table.exists).context(|| table.name.clone())?;
            Ok(keys
                .iter()
                .filter(|key| !matches!(stmt.exists([key.as_bytes()]), Ok(true)))
                .copied()
                .collect())
        };
        let candidates = match self.readers.checkout().and_then(|r| r.in_transaction(lookup)) {
            Ok(lost) => lost,
            Err(_) => keys.to_vec(),
        };
        // On a damaged file a lookup that failed once can succeed on another connection
        // (seen with flipped bytes): a key is only listed if `get` cannot find it either.
        candidates.into_iter().filter(|key| !matches!(self.get(key), Ok(Some(_)))).collect()
    }

    /// Every stored object's key and sizes, table by table. Waits for pending writes to
    /// commit; objects saved while iterating may or may not be listed.
    ///
    /// # Errors
    /// As [`Stash::flush`]; each item is an error if its chunk cannot be read.
    pub fn entries(&self) -> Result<Entries<'_>> {
        self.flush()?;
        Ok(Entries::new(&self.readers, &self.shared.schema))
    }

    /// Flushes, stops the writer and closes the database, marking it cleanly closed.
    ///
    /// # Errors
    /// [`Error::WriterStopped`] if the writer had failed: objects saved since the last
    /// successful flush may not be stored.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    /// The path of the database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table layout of this stash.
    #[must_use]
    pub fn layout(&self) -> Layout {
        self.shared.schema.layout
    }

    /// The durability of this handle.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// What opening found, if the previous fast-mode session did not close cleanly: whether
    /// the file was sound or salvaged, and how many objects survived.
    #[must_use]
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.recovery.as_ref()
    }

    fn totals(&self) -> Result<schema::Totals> {
        self.flush()?;
        let reader = self.readers.checkout()?;
        schema::read_totals(&reader)
    }

    fn table(&self, key: &Key) -> &schema::TableSql {
        let schema = &self.shared.schema;
        &schema.tables[schema.layout.table_of(key)]
    }

    fn stored(&self, conn: &Connection, key: &Key) -> Result<bool> {
        let table = self.table(key);
        let mut stmt =
            conn.prepare_cached(&table.exists).context(|| format!("looking up {}", table.name))?;
        stmt.exists([&key.as_bytes()[..]]).context(|| format!("looking up {key} in {}", table.name))
    }

    fn sender(&self) -> Result<&Sender<Message>> {
        if self.shared.stopped().is_some() {
            return Err(self.shared.stopped_error());
        }
        self.sender.as_ref().ok_or_else(|| self.shared.stopped_error())
    }

    fn send(&self, message: Message) -> Result<()> {
        self.sender()?.send(message).map_err(|_| self.shared.stopped_error())
    }

    fn shutdown(&mut self) -> Result<()> {
        self.readers.close_all();
        drop(self.sender.take());
        let Some(writer) = self.writer.take() else { return Ok(()) };
        if writer.join().is_err() {
            return Err(Error::WriterStopped { reason: "the writer thread panicked".to_string() });
        }
        match self.shared.stopped() {
            Some(reason) => Err(Error::WriterStopped { reason }),
            None => Ok(()),
        }
    }
}

impl Drop for Stash {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("objstash: closing {} failed: {e}", self.path.display());
        }
    }
}

/// One row as `verify` reads it.
struct ScannedRow {
    rowid: i64,
    key: Vec<u8>,
    raw_len: i64,
    data: Vec<u8>,
}

/// What gathers the sample a dictionary is trained on ([`Codec::ZstdDict`] only).
enum Trainer {
    /// No dictionary is wanted, one exists, or one is being trained.
    Off,
    /// The first objects saved, until their bytes reach the sample size.
    Sampling { samples: Vec<Vec<u8>>, bytes: usize },
}

/// Trains a dictionary on `samples`, queues it for the writer, then makes it current: a
/// row compressed with it can only be queued after the dictionary itself.
fn train_and_send(
    samples: &[Vec<u8>],
    sender: &Sender<Message>,
    dicts: &Dictionaries,
) -> Result<u32> {
    let dict = Arc::new(Dictionary::train(samples).map_err(Error::config)?);
    if let Some(known) = dicts.get(dict.id) {
        if known.bytes != dict.bytes {
            return Err(Error::config(format!(
                "the new dictionary's id {} is already taken; train again on another sample",
                dict.id
            )));
        }
        // The same sample trained the same dictionary: it is stored already.
        dicts.add(known);
        return Ok(dict.id);
    }
    sender
        .send(Message::Dictionary(Arc::clone(&dict), samples.len()))
        .map_err(|_| Error::WriterStopped { reason: "the stash is closing".to_string() })?;
    let id = dict.id;
    dicts.add(dict);
    Ok(id)
}

/// Decompresses a stored row and checks it hashes to `key`.
fn decode(key: &Key, raw_len: u64, data: &[u8], dicts: &Dictionaries) -> Result<Vec<u8>> {
    let raw = codec::decode(data, raw_len, dicts).map_err(|reason| Error::corrupt(*key, reason))?;
    let actual = Key::of(&raw);
    if actual != *key {
        return Err(Error::corrupt(*key, format!("its bytes hash to {actual}")));
    }
    Ok(raw)
}
