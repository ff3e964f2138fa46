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
mod named;
mod read;
#[cfg(feature = "remote")]
mod remote;
mod remove;
mod save;
mod train;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{SendTimeoutError, Sender, bounded};
use rusqlite::Connection;

use crate::dict::{self, Codec, Dictionaries};
use crate::durability::Durability;
use crate::entries::Entries;
use crate::error::{DbContext, Error, Result};
use crate::files;
use crate::key::Key;
use crate::layout::Layout;
use crate::lock::Hold;
use crate::names;
use crate::readers::Readers;
use crate::recovery::RecoveryReport;
use crate::schema::{self, Schema, TableSql};
use crate::stats::Stats;
use crate::uses::Uses;
use crate::writer::{self, Message, Shared};

use train::Trainer;

/// A content-addressed object cache in one SQLite file.
///
/// Share one handle between threads by reference (it is `Send + Sync`); other handles, in
/// this process or others, may have the same stash open at once (each with its own writer,
/// taking turns at SQLite's write lock). Dropping it flushes and stops the writer, as
/// [`Stash::close`] does, but can only log a failure.
pub struct Stash {
    shared: Arc<Shared>,
    sender: Option<Sender<Message>>,
    writer: Option<JoinHandle<()>>,
    readers: Arc<Readers>,
    pool: rayon::ThreadPool,
    path: PathBuf,
    level: u32,
    codec: Codec,
    max_object: u64,
    dicts: Arc<Dictionaries>,
    sample_bytes: usize,
    trainer: Mutex<Trainer>,
    durability: Durability,
    recovery: Option<RecoveryReport>,
    read_only: bool,
    busy_timeout: Duration,
    /// This handle's hold on the stash (`lock.rs`); `None` for a reader that could not
    /// take one.
    hold: Option<Hold>,
    /// The shared remote tier, when the stash was opened with one.
    #[cfg(feature = "remote")]
    remote: Option<Arc<crate::remote::Remote>>,
    /// Background uploads of what this handle saves (`stash/behind.rs`).
    #[cfg(feature = "remote")]
    behind: Option<behind::WriteBehind>,
}

/// What the open sequence hands over to start a stash.
pub(crate) struct Parts {
    pub path: PathBuf,
    pub conn: Connection,
    pub schema: Schema,
    pub durability: Durability,
    pub level: u32,
    pub codec: Codec,
    pub max_object: u64,
    pub sample_bytes: usize,
    pub batch_size: usize,
    pub capacity: usize,
    pub read_mmap: u64,
    pub pool: rayon::ThreadPool,
    pub busy_timeout: Duration,
    pub grace: Duration,
    pub use_resolution: Duration,
    pub recovery: Option<RecoveryReport>,
    pub hold: Option<Hold>,
    pub read_only: bool,
}

impl std::fmt::Debug for Stash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stash")
            .field("path", &self.path)
            .field("layout", &self.layout())
            .field("durability", &self.durability)
            .field("codec", &self.codec)
            .finish_non_exhaustive()
    }
}

impl Stash {
    pub(crate) fn start(parts: Parts) -> Result<Stash> {
        let statements = parts.schema.statement_count();
        let dicts =
            Arc::new(Dictionaries::open(&parts.conn, parts.path.clone(), parts.busy_timeout)?);
        let trainer = Trainer::new(parts.codec, &dicts);
        let names_table = names::table_exists(&parts.conn)?;
        // A writable open has given the tables their use column (`open.rs`).
        let uses = Uses::new(!parts.read_only, parts.use_resolution);
        let shared = Arc::new(Shared::new(parts.schema, names_table, uses));
        let (sender, writer) = if parts.read_only {
            (None, None)
        } else {
            let (sender, receiver) = bounded(parts.capacity);
            let writer = writer::spawn(
                parts.conn,
                Arc::clone(&shared),
                receiver,
                parts.batch_size,
                parts.path.clone(),
                parts.busy_timeout,
                spared(parts.grace, parts.use_resolution),
            )?;
            (Some(sender), Some(writer))
        };
        Ok(Stash {
            shared,
            sender,
            writer,
            readers: Arc::new(Readers::new(
                parts.path.clone(),
                statements,
                parts.read_mmap,
                parts.busy_timeout,
            )),
            pool: parts.pool,
            path: parts.path,
            level: parts.level,
            codec: parts.codec,
            max_object: parts.max_object,
            dicts,
            sample_bytes: parts.sample_bytes,
            trainer: Mutex::new(trainer),
            durability: parts.durability,
            recovery: parts.recovery,
            read_only: parts.read_only,
            busy_timeout: parts.busy_timeout,
            hold: parts.hold,
            #[cfg(feature = "remote")]
            remote: None,
            #[cfg(feature = "remote")]
            behind: None,
        })
    }

    /// Attaches the remote tier (`open.rs`, once the stash is open).
    #[cfg(feature = "remote")]
    pub(crate) fn attach_remote(&mut self, config: crate::remote::RemoteConfig) -> Result<()> {
        let interval = config.write_behind;
        let remote = Arc::new(crate::remote::Remote::open(&self.path, config, self.busy_timeout)?);
        if let Some(interval) = interval
            && !self.read_only
        {
            self.behind = Some(behind::WriteBehind::start(
                self.path.clone(),
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
        if self.read_only {
            return Ok(());
        }
        let (ack, done) = bounded(1);
        self.send(Message::Flush(ack))?;
        self.wait(&done)
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
        let file_bytes = files::database_bytes(&self.path).map_err(|e| {
            Error::io(format!("reading the size of {} and its journals", self.path.display()), e)
        })?;
        let (max_size, oldest_use, dictionaries) = {
            let reader = self.readers.checkout()?;
            (schema::read_max_size(&reader)?, self.oldest_use(&reader)?, dict::count(&reader)?)
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
            stored_bytes: totals.stored_bytes,
            file_bytes,
            layout: self.layout(),
            durability: self.durability,
            codec: self.codec,
            dictionaries,
            names: totals.names,
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
        &self.path
    }

    /// The table layout of this stash.
    #[must_use]
    pub fn layout(&self) -> Layout {
        self.shared.schema.layout
    }

    /// The durability of this stash, as recorded in it.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The codec new objects are written with, as recorded in the stash.
    #[must_use]
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Whether this handle only reads: opened with
    /// [`StashBuilder::read_only`](crate::StashBuilder::read_only), or because the stash's
    /// file or directory cannot be written.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The largest object [`Stash::save`] accepts, in bytes (see
    /// [`StashBuilder::max_object_size`](crate::StashBuilder::max_object_size)).
    #[must_use]
    pub fn max_object_size(&self) -> u64 {
        self.max_object
    }

    /// What opening found, if the previous fast-mode session did not close cleanly: whether
    /// the file was sound or salvaged, and how many objects survived and were lost. A
    /// program that must know about lost objects checks this after every open (the
    /// command line prints it on every command, `--quiet` or not).
    #[must_use]
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.recovery.as_ref()
    }

    fn totals(&self) -> Result<schema::Totals> {
        self.flush()?;
        let reader = self.readers.checkout()?;
        schema::read_totals(&reader)
    }

    fn table(&self, key: &Key) -> &TableSql {
        self.shared.schema.table(key)
    }

    /// Whether `key` has a committed row, looked up on `conn`.
    fn stored(&self, conn: &Connection, key: &Key) -> Result<bool> {
        let table = self.table(key);
        let mut stmt =
            conn.prepare_cached(&table.exists).context(|| format!("looking up {}", table.name))?;
        stmt.exists([&key.as_bytes()[..]]).context(|| format!("looking up {key} in {}", table.name))
    }

    fn sender(&self) -> Result<&Sender<Message>> {
        if self.read_only {
            return Err(Error::ReadOnly { path: self.path.clone() });
        }
        if self.shared.stopped().is_some() {
            return Err(self.shared.stopped_error());
        }
        self.sender.as_ref().ok_or_else(|| self.shared.stopped_error())
    }

    /// Hands a message to the writer, waiting at most the busy timeout for room in the
    /// channel (it stays full while another process holds the write lock).
    fn send(&self, message: Message) -> Result<()> {
        match self.sender()?.send_timeout(message, self.busy_timeout) {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Timeout(_)) => Err(self.busy_error()),
            Err(SendTimeoutError::Disconnected(_)) => Err(self.shared.stopped_error()),
        }
    }

    fn busy_error(&self) -> Error {
        Error::Busy {
            path: self.path.clone(),
            waited: self.busy_timeout,
            what: "another process held the stash's write lock and the queue to the writer \
                   stayed full",
        }
    }

    /// Waits for the writer's answer to a message.
    fn wait<T>(&self, done: &crossbeam_channel::Receiver<Result<T>>) -> Result<T> {
        done.recv().unwrap_or_else(|_| Err(self.shared.stopped_error()))
    }

    fn shutdown(&mut self) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(mut behind) = self.behind.take() {
            behind.stop();
        }
        self.readers.close_all();
        drop(self.sender.take());
        let panicked = self.writer.take().is_some_and(|writer| writer.join().is_err());
        let joined = match self.shared.stopped() {
            _ if panicked => Err(Error::WriterStopped {
                reason: "the writer thread panicked".to_string(),
                source: None,
            }),
            Some(stop) => Err(stop.into_error()),
            None => Ok(()),
        };
        if let Some(mut hold) = self.hold.take()
            && !self.read_only
            && joined.is_ok()
        {
            self.mark_closed(&mut hold)?;
        }
        joined
    }

    /// The last handle to close marks the stash cleanly closed, folds the write-ahead log
    /// back into the file and leaves the file in rollback-journal mode, which a reader on a
    /// read-only file system can open (a WAL file there needs its `-shm` file, which
    /// cannot be made); the next open switches to WAL again. The others leave it to the
    /// last.
    fn mark_closed(&self, hold: &mut Hold) -> Result<()> {
        if !hold.closing(&self.path, self.busy_timeout)? {
            return Ok(());
        }
        let conn = crate::readers::open_connection(&self.path, false, 16, self.busy_timeout)?;
        schema::write_state(&conn, schema::State::Clean)?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .context(|| format!("checkpointing {}", self.path.display()))?;
        conn.pragma_update(None, "journal_mode", "DELETE")
            .context(|| format!("closing {}", self.path.display()))?;
        Ok(())
    }
}

impl Drop for Stash {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("objstash: closing {} failed: {e}", self.path.display());
        }
    }
}

/// How long after its last recorded use eviction spares an object: the grace period, plus
/// the resolution of uses when there is a grace period to honour. A read within the
/// resolution of an object's last use records nothing (`uses.rs`), so that use can be up to
/// the resolution older than the read the grace period counts from.
fn spared(grace: Duration, resolution: Duration) -> Duration {
    if grace.is_zero() { grace } else { grace.saturating_add(resolution) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_stays_spared_for_the_whole_grace_period() {
        let (grace, resolution) = (Duration::from_secs(5), Duration::from_secs(2));
        assert_eq!(spared(grace, resolution), Duration::from_secs(7));
        assert_eq!(spared(Duration::ZERO, resolution), Duration::ZERO);
        assert_eq!(spared(Duration::MAX, resolution), Duration::MAX);
    }
}
