//! The single writer: one named thread that owns the only write connection.
//!
//! Producers send [`Message`]s through a bounded channel, which is what bounds memory when
//! they outrun the disk: a save's row, or an operation ([`Op`]) that carries its own
//! answer. The writer gathers a batch (until it is full, an operation a caller waits for
//! asks for a commit, or no row has come for a few milliseconds), writing each run of
//! saves sorted by key into the batch's open transaction as it arrives. It updates the
//! running totals in the same transaction, commits, and only then forgets the rows from
//! [`Pending`] and answers the operations. If a commit fails or the thread panics, the
//! writer records why and stops: every later write and every waiting caller gets
//! [`Error::WriterStopped`] with that reason instead of hanging or losing rows silently.
//!
//! The parts, each in its own file: the operations (`writer/op.rs`, `writer/ops.rs`), the
//! batch and its limits (`writer/batch.rs`), one transaction's writing (`writer/tx.rs`),
//! the thread's loop (`writer/run.rs`), what it does between batches (`writer/upkeep.rs`,
//! `writer/generations.rs`, `writer/compact.rs`)
//! and why it stopped (`writer/stop.rs`).

mod batch;
mod chunked;
mod compact;
mod counting;
mod damaged;
mod generations;
mod model_memory;
pub(crate) mod models;
mod op;
mod ops;
pub(crate) mod pending;
pub(crate) mod pending_names;
mod run;
mod state;
mod stop;
mod tx;
mod upkeep;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, bounded};
use rusqlite::Connection;

use crate::cache::counts::Counts;
use crate::cache::uses::Uses;
use crate::db::first_generation::FirstGeneration;
use crate::db::readers::Commits;
use crate::db::schema::Schema;
use crate::error::{Error, Result};
use crate::files::owners::Owner;
use crate::key::Key;
use crate::values::value_log::ValueLog;
use crate::writer::pending::{Pending, Row};
use crate::writer::pending_names::PendingNames;

pub(crate) use chunked::{CommitChunked, Outgoing, PutChunks, Unhold};
pub(crate) use damaged::{DropDamaged, DropDamagedQuietly};
pub(crate) use models::{Declare, GiveUp, Hold, HoldQuietly, OpenAssembly, PinModel, RemoveModel};
pub(crate) use op::{Answer, Message, Op, asked, unasked};
pub(crate) use ops::{
    Dictionary, Flush, GzipCode, Name, Pin, RecordCounts, Remove, ResetCounters, SetMaxSize, Trim,
    Unname,
};
pub(crate) use stop::Stop;

/// What the writer of a handle needs, built once by the open sequence.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriterConfig {
    /// The most rows one transaction commits.
    pub batch_size: usize,
    /// Keys the young key indexes hold before they are moved (`writer/generations.rs`).
    pub young_keys: u64,
    /// Messages the channel to the writer holds.
    pub capacity: usize,
    /// How long after its last recorded use an object is spared from eviction.
    pub grace: Duration,
}

/// State shared by the handle and the writer thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub path: PathBuf,
    /// The longest wait for another handle's lock, for every part of the handle.
    pub busy: Duration,
    pub pending: Pending,
    /// The writer's commits, counted before it forgets their rows from `pending`.
    pub commits: Commits,
    pub names: PendingNames,
    pub uses: Uses,
    /// What the handle's calls served (`counts.rs`), which the writer adds to the stash's.
    pub counts: Counts,
    pub schema: Schema,
    /// The file of values, in a stash that keeps them there (`value_log.rs`).
    pub values: Option<ValueLog>,
    /// The generation of the key index reads ask first (`first_generation.rs`).
    pub first: FirstGeneration,
    /// Roots of models that must not be read (incomplete, or being evicted): a save of
    /// one never shows in the pending map (`writer/models.rs`).
    withheld: RwLock<HashSet<Key>>,
    /// Whether `withheld` may hold a key: set before a key goes in, so that a save that
    /// finds it clear needs no lock (a stash without models never takes it).
    any_withheld: AtomicBool,
    /// Whether the object tables have their `model` column, committed: reads then record
    /// a read of a member as a use of its model.
    models: AtomicBool,
    /// This handle as the owner of its assemblies (`files/owners.rs`).
    pub owner: Owner,
    stopped: Mutex<Option<Stop>>,
}

impl Shared {
    /// `names_table`: whether the stash has a names table yet; `uses`: what records the
    /// uses of objects (see `uses.rs`).
    pub(crate) fn new(
        path: PathBuf,
        busy: Duration,
        schema: Schema,
        names_table: bool,
        uses: Uses,
        values: Option<ValueLog>,
    ) -> Self {
        let models = schema.models;
        let owner = Owner::new(&path);
        Shared {
            path,
            busy,
            pending: Pending::new(),
            commits: Commits::default(),
            names: PendingNames::new(names_table),
            uses,
            counts: Counts::default(),
            schema,
            values,
            first: FirstGeneration::default(),
            withheld: RwLock::new(HashSet::new()),
            any_withheld: AtomicBool::new(false),
            models: AtomicBool::new(models),
            owner,
            stopped: Mutex::new(None),
        }
    }

    /// Puts a saved row in the pending map, where every read sees it, unless it is the
    /// root of a model that must not be read; whether it did. The check and the insert
    /// hold the lock that hiding a root takes, so that a root is never pending while its
    /// model misses a member.
    pub(crate) fn show_pending(&self, row: &Row) -> bool {
        if !self.any_withheld.load(Ordering::SeqCst) {
            self.pending.insert(row.clone());
            // A root withheld meanwhile (`withhold` sets the flag before it takes the key
            // out of the pending map) is taken out again here.
            if !self.any_withheld.load(Ordering::SeqCst) || !self.withheld(&row.key) {
                return true;
            }
            self.pending.forget(&row.key);
            return false;
        }
        let withheld = self.withheld.read().unwrap_or_else(|p| p.into_inner());
        let shown = !withheld.contains(&row.key);
        if shown {
            self.pending.insert(row.clone());
        }
        shown
    }

    /// Whether `key` is the root of a model that must not be read (as far as this handle
    /// knows: the writer settles it against the database).
    pub(crate) fn withheld(&self, key: &Key) -> bool {
        if !self.any_withheld.load(Ordering::SeqCst) {
            return false;
        }
        let withheld = self.withheld.read().unwrap_or_else(|p| p.into_inner());
        !withheld.is_empty() && withheld.contains(key)
    }

    /// How many roots this handle withholds.
    pub(crate) fn withheld_count(&self) -> usize {
        if !self.any_withheld.load(Ordering::SeqCst) {
            return 0;
        }
        self.withheld.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Keeps `key`, the root of a model that must not be read, out of the pending map from
    /// now on, and takes it out now; inside the transaction that hides it, before its
    /// commit.
    pub(crate) fn withhold(&self, key: Key) {
        self.any_withheld.store(true, Ordering::SeqCst);
        let mut withheld = self.withheld.write().unwrap_or_else(|p| p.into_inner());
        withheld.insert(key);
        self.pending.forget(&key);
    }

    /// Lets `keys` be pending again (their models are complete, or gone): after the commit.
    pub(crate) fn release_withheld(&self, keys: &[Key]) {
        if keys.is_empty() {
            return;
        }
        let mut withheld = self.withheld.write().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            withheld.remove(key);
        }
    }

    /// The roots that must not be read, as the database says (the writer, when another
    /// connection may have changed them).
    pub(crate) fn set_withheld(&self, keys: HashSet<Key>) {
        if !keys.is_empty() {
            self.any_withheld.store(true, Ordering::SeqCst);
        }
        let mut withheld = self.withheld.write().unwrap_or_else(|p| p.into_inner());
        for key in &keys {
            self.pending.forget(key);
        }
        *withheld = keys;
    }

    /// Whether the object tables have their `model` column (`writer/models.rs`).
    pub(crate) fn models(&self) -> bool {
        self.models.load(Ordering::Relaxed)
    }

    /// Notes that the stash has models, once the transaction that made them committed.
    pub(crate) fn models_made(&self) {
        self.models.store(true, Ordering::Relaxed);
    }

    /// Why the writer stopped, if it did.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The error for a write that finds the writer gone.
    pub(crate) fn stopped_error(&self) -> Error {
        self.stopped().unwrap_or_else(|| Stop::new("the stash is closing")).into_error()
    }

    /// The error of a wait for another handle's write lock that lasted the busy timeout.
    pub(crate) fn busy_error(&self, what: &'static str) -> Error {
        Error::Busy { path: self.path.clone(), waited: self.busy, what }
    }

    fn stop(&self, stop: Stop) {
        log::error!("objstash writer stopped: {}", stop.reason());
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        stopped.get_or_insert(stop);
        drop(stopped);
        // Rows still pending will never be committed; reads must stop showing them.
        self.pending.clear();
        self.names.clear();
    }
}

/// A handle's writer: the channel to its thread, and the thread.
pub(crate) struct WriterHandle {
    sender: Sender<Message>,
    thread: JoinHandle<()>,
    /// Disconnected once the writer thread has ended, however it ended: an operation left
    /// in the channel by a thread that panicked is never answered (the channel keeps its
    /// messages while a sender lives), and its caller must not wait for it.
    gone: Receiver<()>,
}

impl WriterHandle {
    /// Starts the writer thread on `conn`, which must already carry the durability pragmas.
    pub(crate) fn spawn(
        conn: Connection,
        shared: Arc<Shared>,
        config: WriterConfig,
    ) -> Result<WriterHandle> {
        let (sender, receiver): (Sender<Message>, Receiver<Message>) = bounded(config.capacity);
        let writer = state::Writer::new(conn, shared, config)?;
        let (alive, gone) = bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("objstash-writer".to_string())
            .spawn(move || {
                let _alive = alive;
                writer.run(receiver)
            })
            .map_err(|e| Error::io("starting the writer thread", e))?;
        Ok(WriterHandle { sender, thread, gone })
    }

    /// Hands a message to the writer, waiting at most the busy timeout for room in the
    /// channel (it stays full while another process holds the write lock).
    pub(crate) fn send(&self, shared: &Shared, message: Message) -> Result<()> {
        if shared.stopped().is_some() {
            return Err(shared.stopped_error());
        }
        match self.sender.send_timeout(message, shared.busy) {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Timeout(_)) => Err(shared.busy_error(
                "another process held the stash's write lock and the queue to the writer \
                 stayed full",
            )),
            Err(SendTimeoutError::Disconnected(_)) => Err(shared.stopped_error()),
        }
    }

    /// Sends `op` and waits for its answer.
    pub(crate) fn ask<T>(
        &self,
        shared: &Shared,
        op: impl FnOnce(Answer<T>) -> Box<dyn Op>,
    ) -> Result<T> {
        let (answer, done) = Answer::new();
        self.send(shared, Message::Op(op(answer)))?;
        crossbeam_channel::select! {
            recv(done) -> answer => answer.unwrap_or_else(|_| Err(shared.stopped_error())),
            // The thread may have answered just before it ended.
            recv(self.gone) -> _ => done.try_recv().unwrap_or_else(|_| Err(shared.stopped_error())),
        }
    }

    /// Closes the channel and waits for the writer to commit what it holds and end;
    /// whether its thread panicked.
    pub(crate) fn join(self) -> bool {
        drop(self.sender);
        self.thread.join().is_err()
    }
}
