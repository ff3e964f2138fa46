//! The public handle: what a user holds, and the parts every capability shares.
//!
//! Each capability lives in a file of its own below `stash/` (saving, reading, removing,
//! verifying, training the dictionary) as an `impl Stash` block; this file holds the
//! handle's state, its life cycle (start, flush, close) and the reports that need no scan.
//!
//! Invariants: a saved object is in the pending map or committed from the moment `save`
//! returns, so every thread reads its writes; no byte reaches a caller before its blake3
//! hash has been checked against the key it was asked for.

#[cfg(feature = "remote")]
mod behind;
mod bound;
mod counters;
mod damage;
pub(crate) mod entries;
mod gzip_training;
mod large;
mod listing;
mod model_reader;
mod models;
mod named;
mod object_reader;
#[cfg(feature = "remote")]
mod packer;
mod read;
#[cfg(feature = "remote")]
mod read_through;
#[cfg(feature = "remote")]
mod remote;
#[cfg(feature = "remote")]
mod remote_large;
#[cfg(feature = "remote")]
mod remote_pull;
#[cfg(feature = "remote")]
pub use remote::RemoteTier;
mod remove;
mod save;
mod train;
mod verify;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::cache::uses::Uses;
use crate::codec::Codec;
use crate::codec::zstd_dict::Dictionaries;
use crate::db::dicts;
use crate::db::meta;
use crate::db::names;
use crate::db::readers::Readers;
use crate::db::schema::{Schema, TableSql};
use crate::error::{DbContext, Error, Result};
use crate::files;
use crate::files::lock::Hold;
use crate::key::Key;
use crate::report::recovery::RecoveryReport;
use crate::report::stats::Stats;
use crate::settings::durability::Durability;
use crate::settings::layout::Layout;
use crate::settings::values::Values;
use crate::stash::entries::Entries;
use crate::values::value_log::ValueLog;
use crate::writer::{Answer, Flush, Message, Op, Shared, WriterConfig, WriterHandle, asked};

use gzip_training::GzipTraining;
pub use model_reader::ModelReader;
pub use models::{Assembly, AssemblyId, ModelObjects};
pub use object_reader::ObjectReader;
pub(crate) use save::Saving;
use train::Trainer;

/// A content-addressed object cache in one SQLite file.
///
/// Share one handle between threads by reference (it is `Send + Sync`); other handles, in
/// this process or others, may have the same stash open at once (each with its own writer,
/// taking turns at SQLite's write lock). Dropping it flushes and stops the writer, as
/// [`Stash::close`] does, but can only log a failure.
pub struct Stash {
    shared: Arc<Shared>,
    /// The writer; `None` for a handle that only reads.
    writer: Option<WriterHandle>,
    readers: Arc<Readers>,
    pool: rayon::ThreadPool,
    saving: Saving,
    dicts: Arc<Dictionaries>,
    trainer: Mutex<Trainer>,
    gzip_training: GzipTraining,
    durability: Durability,
    recovery: Option<RecoveryReport>,
    /// This handle's hold on the stash (`lock.rs`); `None` for a reader that could not
    /// take one.
    hold: Option<Hold>,
    /// How to open the stash for writing, for a handle that opened read-only because the
    /// disk was full: a trim spends the reserve and trims through it (`bound.rs`).
    full_disk: Option<Reopen>,
    /// The shared remote tier, when the stash was opened with one.
    #[cfg(feature = "remote")]
    remote: Option<Arc<crate::remote::Remote>>,
    /// Background uploads of what this handle saves (`stash/behind.rs`).
    #[cfg(feature = "remote")]
    behind: Option<behind::WriteBehind>,
}

/// What the open sequence hands over to start a stash: a prepared connection and what each
/// part of the handle needs, each built once.
pub(crate) struct Parts {
    pub shared: Shared,
    pub conn: Connection,
    pub durability: Durability,
    pub saving: Saving,
    /// The writer's settings; `None` for a handle that only reads.
    pub writer: Option<WriterConfig>,
    pub readers: Readers,
    pub pool: rayon::ThreadPool,
    pub recovery: Option<RecoveryReport>,
    pub hold: Option<Hold>,
    /// For a handle that opened read-only because the disk was full: how to open the
    /// stash for writing once a trim has made room.
    pub full_disk: Option<Reopen>,
}

/// Opens the stash again for writing, with the settings of the first open.
pub(crate) type Reopen = Arc<dyn Fn() -> Result<Stash> + Send + Sync>;

impl std::fmt::Debug for Stash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stash")
            .field("path", &self.shared.path)
            .field("layout", &self.layout())
            .field("durability", &self.durability)
            .field("codec", &self.saving.codec)
            .finish_non_exhaustive()
    }
}

impl Stash {
    pub(crate) fn start(parts: Parts) -> Result<Stash> {
        let Parts {
            shared,
            conn,
            durability,
            saving,
            writer,
            readers,
            pool,
            recovery,
            hold,
            full_disk,
        } = parts;
        let dicts = Arc::new(dicts::open(&conn, shared.path.clone(), shared.busy)?);
        let trainer = Trainer::new(saving.codec, &dicts);
        let gzip_training = GzipTraining::open(&conn, &saving);
        let shared = Arc::new(shared);
        let writer = writer
            .map(|config| WriterHandle::spawn(conn, Arc::clone(&shared), config))
            .transpose()?;
        Ok(Stash {
            shared,
            writer,
            readers: Arc::new(readers),
            pool,
            saving,
            dicts,
            trainer: Mutex::new(trainer),
            gzip_training,
            durability,
            recovery,
            hold,
            full_disk,
            #[cfg(feature = "remote")]
            remote: None,
            #[cfg(feature = "remote")]
            behind: None,
        })
    }

    /// The state of a handle's stash shared with its writer: made by the open sequence.
    pub(crate) fn shared(
        path: std::path::PathBuf,
        busy: std::time::Duration,
        schema: Schema,
        conn: &Connection,
        records_uses: bool,
        resolution: std::time::Duration,
    ) -> Result<Shared> {
        let names_table = names::table_exists(conn)?;
        // A read-only handle of a stash whose values file is missing still opens: its reads
        // of values there fail as damage, each reported against its key.
        let values = match schema.stored() {
            Values::InRows => None,
            Values::InFile => Some(ValueLog::open(&path, records_uses)?),
        };
        let uses = Uses::new(records_uses, resolution);
        Ok(Shared::new(path, busy, schema, names_table, uses, values))
    }

    /// Attaches the remote tier (`open/sequence.rs`, once the stash is open).
    #[cfg(feature = "remote")]
    pub(crate) fn attach_remote(&mut self, config: crate::remote::RemoteConfig) -> Result<()> {
        let interval = config.write_behind;
        let remote =
            Arc::new(crate::remote::Remote::open(&self.shared.path, config, self.shared.busy)?);
        if let Some(interval) = interval
            && !self.is_read_only()
        {
            self.behind = Some(behind::WriteBehind::start(
                self.shared.path.clone(),
                Arc::clone(&remote),
                Arc::clone(&self.shared),
                interval,
            )?);
        }
        self.remote = Some(remote);
        Ok(())
    }

    /// Returns once every object saved and removed before the call is committed. In
    /// [`Durability::Safe`] committed means on disk.
    ///
    /// # Errors
    /// [`Error::WriterStopped`] if a commit failed: objects saved since the previous
    /// successful flush may not be stored.
    pub fn flush(&self) -> Result<()> {
        if self.writer.is_none() {
            return Ok(());
        }
        self.ask(|answer| asked(Flush, answer))
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

    /// The size report: objects, raw and stored bytes, file size, ratio, and the stash's
    /// settings. Waits for pending writes to commit; costs no scan.
    ///
    /// # Errors
    /// As [`Stash::len`], or [`Error::Io`] if a file size cannot be read.
    pub fn stats(&self) -> Result<Stats> {
        let totals = self.totals()?;
        let path = self.path();
        let file_bytes = files::database_bytes(path).map_err(|e| {
            Error::io(format!("reading the size of {} and its journals", path.display()), e)
        })?;
        let (max_size, oldest_use, dictionaries, counters) = {
            let reader = self.readers.checkout()?;
            (
                meta::read_max_size(&reader)?,
                self.oldest_use(&reader)?,
                dicts::count(&reader)?,
                self.recorded_counters(&reader)?,
            )
        };
        Ok(Stats {
            max_size,
            pinned_objects: totals.pinned,
            pinned_bytes: totals.pinned_bytes,
            evicted_objects: totals.evicted,
            evicted_bytes: totals.evicted_bytes,
            oldest_use,
            objects: totals.objects,
            raw_bytes: totals.raw_bytes,
            stored_bytes: totals.stored_bytes + totals.chunk_bytes,
            chunks: totals.chunks,
            chunk_bytes: totals.chunk_bytes,
            file_bytes,
            layout: self.layout(),
            durability: self.durability,
            codec: self.saving.codec,
            dictionaries,
            names: totals.names,
            counters,
        })
    }

    /// Every stored object's key and sizes, table by table. Waits for pending writes to
    /// commit; objects saved while iterating may or may not be listed.
    ///
    /// # Errors
    /// As [`Stash::flush`]; each item is an error if its chunk cannot be read.
    pub fn entries(&self) -> Result<Entries> {
        self.flush()?;
        Ok(Entries::new(Arc::clone(&self.readers), Arc::clone(&self.shared)))
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
        &self.shared.path
    }

    /// The table layout of this stash.
    #[must_use]
    pub fn layout(&self) -> Layout {
        self.shared.schema.layout
    }

    /// Where this stash keeps its objects' stored bytes: in their rows, or in a file beside
    /// the database (fixed when the stash is made).
    #[must_use]
    pub fn values(&self) -> Values {
        self.shared.schema.stored()
    }

    /// The durability of this stash, as recorded in it.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The codec new objects are written with, as recorded in the stash.
    #[must_use]
    pub fn codec(&self) -> Codec {
        self.saving.codec
    }

    /// Whether this handle only reads: opened with
    /// [`StashBuilder::read_only`](crate::StashBuilder::read_only), or because the stash's
    /// file or directory cannot be written.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// The largest object [`Stash::save`] accepts, in bytes (see
    /// [`StashBuilder::max_object_size`](crate::StashBuilder::max_object_size)).
    #[must_use]
    pub fn max_object_size(&self) -> u64 {
        self.saving.max_object
    }

    /// What opening found, if the previous fast-mode session did not close cleanly: whether
    /// the file was sound or salvaged, and how many objects survived and were lost. A
    /// program that must know about lost objects checks this after every open (the
    /// command line prints it on every command, `--quiet` or not).
    #[must_use]
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.recovery.as_ref()
    }

    fn totals(&self) -> Result<meta::Totals> {
        self.flush()?;
        let reader = self.readers.checkout()?;
        meta::read_totals(&reader)
    }

    fn table(&self, key: &Key) -> &TableSql {
        self.shared.schema.table(key)
    }

    /// Whether `key` has a committed row, looked up on `conn`.
    fn stored(&self, conn: &Connection, key: &Key) -> Result<bool> {
        let table = self.table(key);
        table
            .stored(conn, key, crate::db::key_filter::Lookup::BOTH)
            .context(|| format!("looking up {key} in {}", table.name))
    }

    /// The writer, or [`Error::ReadOnly`] for a handle that only reads
    /// ([`Error::DiskFull`] for one that reads because the disk was full).
    fn writer(&self) -> Result<&WriterHandle> {
        self.writer.as_ref().ok_or_else(|| {
            let path = self.shared.path.clone();
            match self.full_disk {
                Some(_) => Error::DiskFull { reserve: files::reserve::kept(&path), path },
                None => Error::ReadOnly { path },
            }
        })
    }

    /// Hands a message to the writer (see [`WriterHandle::send`]).
    fn send(&self, message: Message) -> Result<()> {
        self.writer()?.send(&self.shared, message)
    }

    /// Sends the writer an operation and waits for its answer.
    fn ask<T>(&self, op: impl FnOnce(Answer<T>) -> Box<dyn Op>) -> Result<T> {
        self.writer()?.ask(&self.shared, op)
    }

    fn shutdown(&mut self) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(mut behind) = self.behind.take() {
            behind.stop();
        }
        // What this handle used on the remote and has not reported yet: lost if the remote
        // fails now (the report is a hint for trims, never data).
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote
            && let Err(e) = remote.send_uses_at_close()
        {
            log::warn!("{e}");
        }
        self.readers.close();
        let Some(writer) = self.writer.take() else { return Ok(()) };
        let panicked = writer.join();
        let joined = match self.shared.stopped() {
            _ if panicked => Err(Error::WriterStopped {
                reason: "the writer thread panicked".to_string(),
                source: None,
            }),
            Some(stop) => Err(stop.into_error()),
            None => Ok(()),
        };
        if let Some(mut hold) = self.hold.take()
            && joined.is_ok()
        {
            match self.mark_closed(&mut hold) {
                // Everything is committed, in the write-ahead log: folding it back needs
                // room the disk does not have. The next open reads the log as it is.
                Err(e) if e.is_disk_full() => log::warn!(
                    "objstash: {} closed with its write-ahead log not folded back ({e}); \
                     nothing is lost, and the next open reads it",
                    self.shared.path.display()
                ),
                done => done?,
            }
        }
        joined
    }

    /// The last handle to close marks the stash cleanly closed, folds the write-ahead log
    /// back into the file and leaves the file in rollback-journal mode, which a reader on a
    /// read-only or full file system can open (a WAL file there needs its `-shm` file, which
    /// cannot be made); the next open switches to WAL again. The others leave it to the
    /// last.
    fn mark_closed(&self, hold: &mut Hold) -> Result<()> {
        let (path, busy) = (&self.shared.path, self.shared.busy);
        if !hold.closing(path, busy)? {
            return Ok(());
        }
        let conn = crate::db::readers::open_connection(path, false, Schema::META_STATEMENTS, busy)?;
        // NORMAL: the checkpoint below syncs the log before it and the file after it, so
        // everything committed is on disk when the close returns; the marking's own commit
        // need not sync as well (FULL, SQLite's default, did: a fifth of an open and close).
        conn.pragma_update(None, "synchronous", "NORMAL")
            .context(|| format!("closing {}", path.display()))?;
        // A file a writer found damaged stays marked: the next open alone rebuilds it.
        if meta::read_state(&conn).ok() != Some(meta::State::Damaged) {
            meta::write_state(&conn, meta::State::Clean)?;
        }
        let log_bytes = std::fs::metadata(files::sibling(path, "-wal")).map_or(0, |m| m.len());
        let span = tracing::debug_span!("checkpoint", mode = "close", log_bytes).entered();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .context(|| format!("checkpointing {}", path.display()))?;
        drop(span);
        conn.pragma_update(None, "journal_mode", "DELETE")
            .context(|| format!("closing {}", path.display()))?;
        // The writer looks at the reserve every few hundred commits: a stash that grew past
        // its threshold in fewer gets it here, so that a disk filled later finds it.
        files::reserve::ensure(path);
        Ok(())
    }
}

impl Drop for Stash {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("objstash: closing {} failed: {e}", self.shared.path.display());
        }
    }
}
