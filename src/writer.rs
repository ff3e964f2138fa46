//! The single writer: one named thread that owns the only write connection.
//!
//! Producers send [`Message`]s through a bounded channel, which is what bounds memory when
//! they outrun the disk. The writer gathers a batch (until it is full, a flush asks for a
//! commit, or no row has come for a few milliseconds), writing each run of saves sorted by
//! key into the batch's open transaction as it arrives. It updates the running totals in
//! the same transaction, commits, and only then forgets the rows from [`Pending`] and
//! acknowledges removes and flushes. If a commit fails or the thread panics, the writer records why and
//! stops: every later write and every waiting flush gets [`Error::WriterStopped`] with that
//! reason instead of hanging or losing rows silently.
//!
//! Between batches the writer does its upkeep (`writer/upkeep.rs`): it writes the uses
//! recorded in memory, evicts down to the stash's cap, runs one-off evictions and gives
//! free pages back, one short transaction at a time.

use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use rusqlite::{Connection, OptionalExtension, params};

use crate::dict::{self, Dictionary};
use crate::error::{Error, Result, sqlite_code};
use crate::evict::{self, MAX_BATCH_BYTES, Marks};
use crate::key::Key;
use crate::names::{self, NameRow, NameSql, PendingNames};
use crate::pending::{Pending, Row};
use crate::schema::{self, Delta, Schema, TableSql};
use crate::stats::Evicted;
use crate::uses::{self, PINNED, Uses};
use upkeep::Job;

mod upkeep;

/// Rows of at least this many stored bytes are written through blob I/O (see
/// `Writer::insert_large`).
const LARGE_ROW: usize = 1 << 20;
/// Saves written into the open transaction at a time, each run sorted by key, so SQLite works
/// while producers still compress. One sorted run per batch visits each key-index page once
/// per batch and raised the writer's ceiling 1.06x-1.19x, but left the insert of the last
/// batch after compression had ended: a save of 100,000 objects and its flush ran at
/// 0.88x-0.90x (notes/performance.md).
const RUN_ROWS: usize = 2_048;
/// How long the writer waits for more rows before committing a batch that is not full.
/// Each commit rewrites every index page the batch touched, so a commit per handful of rows
/// costs far more than waiting; readers do not wait, they read the pending rows.
const LINGER: Duration = Duration::from_millis(20);
/// The longest a row waits for its commit when rows keep trickling in.
const MAX_BATCH_AGE: Duration = Duration::from_millis(500);
/// Bytes of pages one transaction may change. Random keys spread a batch over the whole key
/// index, and every page a transaction changes goes into the write-ahead log: left
/// unbounded, a batch of 100,000 rows into a 10-million-object stash would log ~500 MB
/// and hold the write lock (which other processes wait for) for as long as that takes.
/// The more rows share a logged index page, the fewer pages each row costs: 128 MiB let the
/// writer take 1.4x-1.7x the rows/s of 32 MiB at its second and third million
/// (notes/performance.md), for a log of up to ~160 MiB between checkpoints.
const JOURNAL_BUDGET: f64 = 128.0 * 1024.0 * 1024.0;
/// Bytes one entry of the key index takes (32-byte key, rowid, cell overhead).
const INDEX_ENTRY_BYTES: f64 = 48.0;
/// How full index pages are after random inserts (B-trees settle near ln 2).
const INDEX_PAGE_FILL: f64 = 0.7;

/// Why the writer stopped: words for the user and, when there was one, the error behind it.
#[derive(Clone, Debug)]
pub(crate) struct Stop {
    reason: String,
    cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Stop {
    fn new(reason: impl Into<String>) -> Self {
        Stop { reason: reason.into(), cause: None }
    }

    /// A failed SQLite call, described for the user and kept as the cause.
    fn sqlite(what: &str, e: rusqlite::Error) -> Self {
        Stop { reason: describe(what, &e), cause: Some(Arc::new(e)) }
    }

    /// The error a caller gets.
    pub(crate) fn into_error(self) -> Error {
        Error::WriterStopped { reason: self.reason, source: self.cause }
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop { reason: e.to_string(), cause: Some(Arc::new(e)) }
    }
}

/// The answer to a caller waiting on the writer.
pub(crate) type Ack<T> = Sender<Result<T, Error>>;

/// Why a batch was not committed.
enum Failure {
    /// Another handle held the write lock for longer than the busy timeout: the batch is
    /// kept and tried again.
    Busy,
    /// The writer cannot go on.
    Fatal(Stop),
}

impl<E: Into<Stop>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Fatal(e.into())
    }
}

/// Tries of a kept batch after its senders are gone before the writer gives up on it.
const TRIES_AT_CLOSE: u32 = 3;

/// What producers send to the writer.
pub(crate) enum Message {
    /// Store a row (already in [`Pending`]).
    Save(Row),
    /// Delete keys and their names in one transaction; answers whether each was stored.
    Remove(Vec<Key>, Ack<Vec<bool>>),
    /// Record names (already in [`PendingNames`]) for objects saved before.
    Name(Vec<NameRow>),
    /// Delete names in one transaction; answers whether each was there.
    Unname(Vec<Arc<[u8]>>, Ack<Vec<bool>>),
    /// Commit everything sent before; answers once it is committed.
    Flush(Ack<()>),
    /// Store a newly trained dictionary (trained on this many samples) before any row
    /// compressed with it, which can only arrive after this message.
    Dictionary(Arc<Dictionary>, usize),
    /// Pin (`true`) or unpin keys; answers whether each was stored (pinning) or pinned
    /// (unpinning).
    Pin(Vec<Key>, bool, Ack<Vec<bool>>),
    /// Record a size cap (`None`: no cap); answers once it is committed.
    SetMaxSize(Option<u64>, Ack<()>),
    /// Evict now, after everything sent before is committed; answers what was evicted.
    Trim(Trim),
}

/// A one-off eviction: objects unused since a time, or down to a size, or both.
pub(crate) struct Trim {
    /// Evict every unpinned object last used before this (milliseconds, `uses.rs`).
    pub unused_before: Option<i64>,
    /// Evict least recently used objects until the pages in use fit this, then give the
    /// free pages back.
    pub max_size: Option<u64>,
    pub ack: Ack<Evicted>,
}

/// State shared by the handle and the writer thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub pending: Pending,
    pub names: PendingNames,
    pub uses: Uses,
    pub schema: Schema,
    stopped: Mutex<Option<Stop>>,
}

impl Shared {
    /// `names_table`: whether the stash has a names table yet; `uses`: what records the
    /// uses of objects (see `uses.rs`).
    pub(crate) fn new(schema: Schema, names_table: bool, uses: Uses) -> Self {
        Shared {
            pending: Pending::new(),
            names: PendingNames::new(names_table),
            uses,
            schema,
            stopped: Mutex::new(None),
        }
    }

    /// Why the writer stopped, if it did.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The error for a write that finds the writer gone.
    pub(crate) fn stopped_error(&self) -> Error {
        self.stopped().unwrap_or_else(|| Stop::new("the stash is closing")).into_error()
    }

    fn stop(&self, stop: Stop) {
        log::error!("objstash writer stopped: {}", stop.reason);
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        stopped.get_or_insert(stop);
        drop(stopped);
        // Rows still pending will never be committed; reads must stop showing them.
        self.pending.clear();
        self.names.clear();
    }
}

/// Marks the writer stopped if its thread unwinds.
struct PanicGuard<'a>(&'a Shared);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop(Stop::new("the writer thread panicked"));
        }
    }
}

/// One operation of a batch, in arrival order.
enum Op {
    Save(Row),
    Remove(Vec<Key>, Ack<Vec<bool>>),
    Name(Vec<NameRow>),
    Unname(Vec<Arc<[u8]>>, Ack<Vec<bool>>),
    Dictionary(Arc<Dictionary>, usize),
    Pin(Vec<Key>, bool, Ack<Vec<bool>>),
    SetMaxSize(Option<u64>),
}

impl Op {
    /// The caller waiting for this operation's answer, if one is.
    fn ack(&self) -> Option<&Ack<Vec<bool>>> {
        match self {
            Op::Remove(_, ack) | Op::Unname(_, ack) | Op::Pin(_, _, ack) => Some(ack),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Batch {
    ops: Vec<Op>,
    flushes: Vec<Ack<()>>,
    /// One-off evictions to run once the batch is committed.
    trims: Vec<Trim>,
    /// Whether each remove (of keys or names) found what it was given, in the order of the
    /// removes in `ops`.
    removed: Vec<Vec<bool>>,
    /// How many of `ops` are written into the open transaction.
    written: usize,
    /// Whether the batch's transaction is open.
    open: bool,
    totals: Delta,
    /// Keys whose rows this batch's transaction has written or found: a name for one of
    /// them needs no check that its object exists. A remove takes its keys out.
    present: HashSet<Key>,
    rows: usize,
    bytes: usize,
    /// Whether a message asked for a commit now, or the batch reached its size.
    full: bool,
}

impl Batch {
    /// Adds a message.
    fn push(&mut self, message: Message, limit: Limit) {
        match message {
            Message::Save(row) => {
                self.rows += 1;
                self.bytes += row.data.len();
                self.ops.push(Op::Save(row));
                self.full |= self.rows >= limit.rows || self.bytes >= limit.bytes;
            }
            Message::Name(names) => {
                self.rows += names.len();
                self.ops.push(Op::Name(names));
                self.full |= self.rows >= limit.rows;
            }
            Message::Pin(keys, pin, ack) => {
                self.ops.push(Op::Pin(keys, pin, ack));
                self.full = true;
            }
            Message::SetMaxSize(cap, ack) => {
                self.ops.push(Op::SetMaxSize(cap));
                self.flushes.push(ack);
                self.full = true;
            }
            Message::Trim(trim) => {
                self.trims.push(trim);
                self.full = true;
            }
            // The caller waits for the commit, so there is nothing to linger for.
            Message::Remove(keys, ack) => {
                self.ops.push(Op::Remove(keys, ack));
                self.full = true;
            }
            Message::Unname(names, ack) => {
                self.ops.push(Op::Unname(names, ack));
                self.full = true;
            }
            Message::Flush(ack) => {
                self.flushes.push(ack);
                self.full = true;
            }
            Message::Dictionary(dict, samples) => self.ops.push(Op::Dictionary(dict, samples)),
        }
    }

    /// Whether the batch should be committed now.
    fn ready(&self, limit: Limit) -> bool {
        self.full || self.rows >= limit.rows || self.bytes >= limit.bytes
    }

    fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.flushes.is_empty() && self.trims.is_empty()
    }
}

/// How large the next batch may grow.
#[derive(Clone, Copy, Debug)]
struct Limit {
    rows: usize,
    bytes: usize,
}

/// Starts the writer thread on `conn`, which must already carry the durability pragmas.
pub(crate) fn spawn(
    conn: Connection,
    shared: Arc<Shared>,
    rx: Receiver<Message>,
    batch_size: usize,
    path: PathBuf,
    busy: Duration,
    grace: Duration,
) -> Result<JoinHandle<()>> {
    let objects = schema::read_totals(&conn)?.objects;
    let page_size: i64 = conn
        .pragma_query_value(None, "page_size", |r| r.get(0))
        .map_err(|e| Error::db("reading the page size", e))?;
    let page_size = page_size.max(512) as u64;
    let incremental =
        evict::incremental(&conn).map_err(|e| Error::db("reading the vacuum mode", e))?;
    let mut writer = Writer {
        conn,
        shared,
        batch_size,
        objects,
        page_size,
        path,
        busy,
        senders_gone: false,
        grace: uses::millis(grace),
        cap: None,
        incremental,
        jobs: VecDeque::new(),
        owed: false,
        settled: true,
    };
    writer.read_cap().map_err(|stop| stop.into_error())?;
    std::thread::Builder::new()
        .name("objstash-writer".to_string())
        .spawn(move || writer.run(rx))
        .map_err(|e| Error::io("starting the writer thread", e))
}

struct Writer {
    conn: Connection,
    shared: Arc<Shared>,
    batch_size: usize,
    /// Objects stored (by this handle's estimate: other processes add theirs), kept
    /// current by each commit; it only sizes batches.
    objects: u64,
    page_size: u64,
    path: PathBuf,
    busy: Duration,
    /// Whether every sender is gone (the handle is closing).
    senders_gone: bool,
    /// Milliseconds after its last use during which an object is not evicted.
    grace: i64,
    /// The size cap the stash records, read after every commit (another handle may set it).
    cap: Option<u64>,
    /// Whether the database gives free pages back (`auto_vacuum = INCREMENTAL`).
    incremental: bool,
    /// One-off evictions waiting or under way, in order.
    jobs: VecDeque<Job>,
    /// Whether an eviction is under way: the stash went over its high-water mark and is not
    /// yet down to its low-water mark.
    owed: bool,
    /// Whether upkeep changed the file since the last checkpoint it ran.
    settled: bool,
}

/// The most rows a batch may hold so that the pages it is expected to change in a key
/// index of `objects` entries fit [`JOURNAL_BUDGET`].
///
/// `b` random keys touch `P(1 - e^(-b/P))` of `P` index pages; solving for the budget gives
/// the row count. Small stashes fit the budget whatever the batch.
fn journal_bounded_rows(batch_size: usize, objects: u64, page_size: u64, budget: f64) -> usize {
    let page = page_size as f64;
    let pages = objects as f64 * INDEX_ENTRY_BYTES / (page * INDEX_PAGE_FILL) + 1.0;
    let budget = budget / page;
    if pages <= budget {
        return batch_size;
    }
    let rows = -pages * (1.0 - budget / pages).ln();
    (rows as usize).clamp(1, batch_size)
}

impl Writer {
    fn run(mut self, rx: Receiver<Message>) {
        let shared = Arc::clone(&self.shared);
        let _guard = PanicGuard(&shared);
        let mut batch = Batch::default();
        let mut tries_at_close = 0;
        let mut more = false;
        loop {
            if batch.is_empty() {
                // With upkeep owed, take a message only if one is waiting: saves go first,
                // upkeep runs between batches.
                let first = if more {
                    match rx.try_recv() {
                        Ok(message) => Ok(message),
                        Err(TryRecvError::Empty) => Err(true),
                        Err(TryRecvError::Disconnected) => break,
                    }
                } else {
                    match rx.recv_timeout(uses::RECORD_EVERY) {
                        Ok(message) => Ok(message),
                        Err(RecvTimeoutError::Timeout) => Err(true),
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                };
                match first {
                    Ok(message) => {
                        let limit = self.limit();
                        batch.push(message, limit);
                    }
                    Err(_) => {
                        match self.upkeep() {
                            Ok(owed) => more = owed,
                            Err(stop) => {
                                self.fail(stop, batch);
                                return;
                            }
                        }
                        continue;
                    }
                }
            }
            match self.batch(&rx, &mut batch) {
                Ok(()) => {
                    let trims = std::mem::take(&mut batch.trims);
                    self.settle(std::mem::take(&mut batch));
                    self.jobs.extend(trims.into_iter().map(|trim| Job {
                        trim,
                        done: Evicted::default(),
                        aged_out: false,
                    }));
                    match self.read_cap().and_then(|()| self.upkeep()) {
                        Ok(owed) => more = owed,
                        Err(stop) => {
                            self.fail(stop, Batch::default());
                            return;
                        }
                    }
                }
                Err(Failure::Busy) => {
                    self.refuse_waiting(&mut batch);
                    if self.senders_gone {
                        tries_at_close += 1;
                        if tries_at_close >= TRIES_AT_CLOSE {
                            let rows = batch.rows;
                            self.fail(
                                Stop::new(format!(
                                    "{rows} objects could not be written: another process held \
                                     the stash's write lock for longer than {:?}, {TRIES_AT_CLOSE} \
                                     times",
                                    self.busy
                                )),
                                batch,
                            );
                            return;
                        }
                    }
                }
                Err(Failure::Fatal(stop)) => {
                    self.fail(stop, batch);
                    return;
                }
            }
        }
        // The handle is closing: the reads it recorded last still count.
        if !self.shared.uses.is_empty()
            && let Err(Failure::Fatal(stop)) = self.transaction(|writer| writer.write_uses())
        {
            log::warn!("objstash: the last uses of objects could not be recorded: {stop:?}");
        }
    }

    /// After a commit: forgets the committed rows from the pending map and answers every
    /// remove and flush of the batch.
    fn settle(&self, batch: Batch) {
        let mut removed = batch.removed.into_iter();
        for op in batch.ops {
            match op {
                Op::Save(row) => self.shared.pending.settle(&row),
                Op::Name(rows) => rows.iter().for_each(|row| self.shared.names.settle(row)),
                Op::Remove(_, ack) | Op::Unname(_, ack) | Op::Pin(_, _, ack) => {
                    let _ = ack.send(Ok(removed.next().unwrap_or_default()));
                }
                Op::Dictionary(..) | Op::SetMaxSize(_) => {}
            }
        }
        for ack in batch.flushes {
            let _ = ack.send(Ok(()));
        }
    }

    /// After a busy timeout: the flushes and removes waiting on the batch get `Busy`; the
    /// saves stay in it (and readable from the pending map) to be written on the next try.
    fn refuse_waiting(&self, batch: &mut Batch) {
        debug_assert!(!batch.open && batch.written == 0, "busy only before the first write");
        for ack in batch.flushes.drain(..) {
            let _ = ack.send(Err(self.busy_error()));
        }
        for trim in batch.trims.drain(..) {
            let _ = trim.ack.send(Err(self.busy_error()));
        }
        batch.ops.retain(|op| match op.ack() {
            Some(ack) => {
                let _ = ack.send(Err(self.busy_error()));
                false
            }
            None => true,
        });
        batch.removed.clear();
        batch.totals = Delta::default();
    }

    fn busy_error(&self) -> Error {
        Error::Busy {
            path: self.path.clone(),
            waited: self.busy,
            what: "another process held the stash's write lock",
        }
    }

    /// Stops the writer for good: rolls back, records why, and answers everyone waiting.
    fn fail(&mut self, stop: Stop, batch: Batch) {
        if batch.open {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.shared.stop(stop.clone());
        for op in batch.ops {
            if let Some(ack) = op.ack() {
                let _ = ack.send(Err(stop.clone().into_error()));
            }
        }
        for ack in batch.flushes {
            let _ = ack.send(Err(stop.clone().into_error()));
        }
        let trims = batch.trims.into_iter().chain(self.jobs.drain(..).map(|job| job.trim));
        for trim in trims {
            let _ = trim.ack.send(Err(stop.clone().into_error()));
        }
    }

    /// How large the next batch may grow: rows bounded by the journal budget, bytes by the
    /// cap (see `evict.rs`).
    fn limit(&self) -> Limit {
        // Under a cap, the log's share bounds the index pages a batch may change: what is
        // left of it beside the batch's own rows.
        let (budget, bytes) = self.cap.map_or((JOURNAL_BUDGET, MAX_BATCH_BYTES), |cap| {
            let marks = Marks::of(cap);
            ((marks.log - marks.batch_bytes as u64) as f64, marks.batch_bytes)
        });
        Limit {
            rows: journal_bounded_rows(self.batch_size, self.objects, self.page_size, budget),
            bytes,
        }
    }

    /// Gathers more of `batch` (until it is full, a flush or a remove asks for a commit, or
    /// no message has come for a while) and commits it. Rows are written into the open
    /// transaction in sorted runs as they arrive, so SQLite works while producers are
    /// still compressing; only the commit waits for the end of the batch.
    fn batch(&mut self, rx: &Receiver<Message>, batch: &mut Batch) -> Result<(), Failure> {
        let limit = self.limit();
        let deadline = Instant::now() + MAX_BATCH_AGE;
        while !batch.ready(limit) {
            let message = match rx.try_recv() {
                Ok(message) => message,
                Err(TryRecvError::Disconnected) => {
                    self.senders_gone = true;
                    break;
                }
                Err(TryRecvError::Empty) => {
                    match rx.recv_deadline(deadline.min(Instant::now() + LINGER)) {
                        Ok(message) => message,
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            self.senders_gone = true;
                            break;
                        }
                    }
                }
            };
            batch.push(message, limit);
            if batch.ops.len() - batch.written >= RUN_ROWS {
                self.write(batch)?;
            }
        }
        self.write(batch)?;
        if !batch.open {
            return Ok(());
        }
        self.write_uses()?;
        schema::add_totals(&self.conn, &batch.totals)?;
        self.conn.execute_batch("COMMIT").map_err(|e| Stop::sqlite("committing a batch", e))?;
        batch.open = false;
        if !self.shared.names.table_known() && names::table_exists(&self.conn)? {
            self.shared.names.table_made();
        }
        self.objects = self.objects.saturating_add_signed(batch.totals.objects);
        Ok(())
    }

    /// Starts a write transaction: [`Failure::Busy`] when another handle kept the write
    /// lock for the busy timeout. A stash that a newer objstash has moved to a format this
    /// version does not know (another process may do so at any time) stops the writer
    /// rather than be written in the old way.
    fn begin(&self) -> Result<(), Failure> {
        match self.conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {}
            Err(e) if sqlite_code(&e) == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                return Err(Failure::Busy);
            }
            Err(e) => return Err(Stop::sqlite("starting a transaction", e).into()),
        }
        let newer = match self.conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) {
            Ok(version) if version <= schema::FORMAT_VERSION => return Ok(()),
            Ok(version) => Stop::new(format!(
                "a newer objstash changed the stash to format {version} while this handle had \
                 it open (this version writes format {} and older); reopen it with the newer \
                 version",
                schema::FORMAT_VERSION
            )),
            Err(e) => Stop::sqlite("reading the format version", e),
        };
        let _ = self.conn.execute_batch("ROLLBACK");
        Err(newer.into())
    }

    /// Writes the operations not yet written into the batch's transaction, opening it first.
    fn write(&mut self, batch: &mut Batch) -> Result<(), Failure> {
        if batch.written == batch.ops.len() {
            return Ok(());
        }
        if !batch.open {
            self.begin()?;
            batch.open = true;
        }
        let Batch { ops, removed, totals, written, present, .. } = batch;
        let mut run = Run::default();
        for op in &ops[*written..] {
            match op {
                Op::Save(row) => run.rows.push(row),
                Op::Name(names) => {
                    run.rows.extend(names.iter().filter_map(|name| name.row.as_ref()));
                    run.names.extend(names);
                }
                Op::Remove(keys, _) => {
                    self.write_run(&mut run, totals, present)?;
                    keys.iter().for_each(|key| {
                        present.remove(key);
                    });
                    let names = self.names_table()?;
                    let found = keys
                        .iter()
                        .map(|key| self.delete(key, names, totals))
                        .collect::<Result<_, _>>()?;
                    removed.push(found);
                }
                Op::Unname(names, _) => {
                    self.write_run(&mut run, totals, present)?;
                    let found = if self.names_table()? {
                        names
                            .iter()
                            .map(|name| self.unname(name, totals))
                            .collect::<Result<_, _>>()?
                    } else {
                        vec![false; names.len()]
                    };
                    removed.push(found);
                }
                Op::Dictionary(dict, samples) => {
                    self.write_run(&mut run, totals, present)?;
                    dict::store(&self.conn, dict, *samples)?;
                }
                Op::Pin(keys, pin, _) => {
                    self.write_run(&mut run, totals, present)?;
                    let found = keys
                        .iter()
                        .map(
                            |key| {
                                if *pin { self.pin(key, totals) } else { self.unpin(key, totals) }
                            },
                        )
                        .collect::<Result<_, _>>()?;
                    removed.push(found);
                }
                Op::SetMaxSize(cap) => {
                    self.write_run(&mut run, totals, present)?;
                    schema::write_max_size(&self.conn, *cap)?;
                }
            }
        }
        self.write_run(&mut run, totals, present)?;
        *written = ops.len();
        Ok(())
    }

    /// Writes a run: its rows, then its names, which may name those rows.
    fn write_run(
        &self,
        run: &mut Run<'_>,
        totals: &mut Delta,
        present: &mut HashSet<Key>,
    ) -> Result<(), Stop> {
        self.insert(&mut run.rows, totals, present)?;
        if !run.names.is_empty() {
            self.insert_names(&mut run.names, totals, present)?;
        }
        Ok(())
    }

    /// Whether the stash has a names table (another process may have made it).
    /// The shared flag is only set after a commit: this connection sees its own
    /// uncommitted table, readers do not.
    fn names_table(&self) -> Result<bool, Stop> {
        Ok(self.shared.names.table_known() || names::table_exists(&self.conn)?)
    }

    /// Inserts a run of names in name order, each only if its object is stored (it may
    /// have been removed, by another process too, since the name was saved).
    fn insert_names(
        &self,
        run: &mut Vec<&NameRow>,
        totals: &mut Delta,
        present: &HashSet<Key>,
    ) -> Result<(), Stop> {
        if !self.names_table()? {
            // Readers learn of the table once it is committed (see `Writer::batch`).
            names::create(&self.conn)?;
        }
        let schema = &self.shared.schema;
        // By table, then name: one statement per table, and names in B-tree order.
        run.sort_by_cached_key(|row| (schema.layout.table_of(&row.key), Arc::clone(&row.name)));
        let mut known = self
            .conn
            .prepare_cached(NameSql::INSERT_KNOWN)
            .map_err(|e| Stop::sqlite("preparing a name insert", e))?;
        let mut current: Option<(usize, rusqlite::CachedStatement<'_>)> = None;
        for row in run.drain(..) {
            let index = schema.layout.table_of(&row.key);
            let table = &schema.tables[index];
            let key = &row.key.as_bytes()[..];
            let what = || format!("naming {}", row.key);
            let is_present = present.contains(&row.key);
            let added = if is_present {
                known.execute(params![&row.name[..], key]).map_err(|e| Stop::sqlite(&what(), e))?
            } else {
                if current.as_ref().is_none_or(|(i, _)| *i != index) {
                    let stmt = self
                        .conn
                        .prepare_cached(&table.name_insert)
                        .map_err(|e| Stop::sqlite("preparing a name insert", e))?;
                    current = Some((index, stmt));
                }
                let (_, insert) = current.as_mut().expect("prepared above");
                insert.execute(params![&row.name[..], key]).map_err(|e| Stop::sqlite(&what(), e))?
            };
            if added == 1 {
                totals.names += 1;
                continue;
            }
            // Saved before (perhaps under another key), or its object is gone.
            let sql = if is_present { NameSql::REPOINT_KNOWN } else { &table.name_repoint };
            let mut repoint = self
                .conn
                .prepare_cached(sql)
                .map_err(|e| Stop::sqlite("preparing a name update", e))?;
            repoint.execute(params![&row.name[..], key]).map_err(|e| Stop::sqlite(&what(), e))?;
        }
        Ok(())
    }

    /// Deletes a name; whether it was there.
    fn unname(&self, name: &[u8], totals: &mut Delta) -> Result<bool, Stop> {
        let mut stmt = self
            .conn
            .prepare_cached(NameSql::DELETE)
            .map_err(|e| Stop::sqlite("preparing a name delete", e))?;
        let gone = stmt.execute([name]).map_err(|e| Stop::sqlite("removing a name", e))?;
        totals.names -= gone as i64;
        Ok(gone > 0)
    }

    /// Inserts a run of saves in key order, which keeps the key index's page accesses local.
    fn insert(
        &self,
        run: &mut Vec<&Row>,
        totals: &mut Delta,
        present: &mut HashSet<Key>,
    ) -> Result<(), Stop> {
        run.sort_unstable_by_key(|row| row.key);
        let schema = &self.shared.schema;
        let now = uses::now();
        for row in run.drain(..) {
            let table = &schema.tables[schema.layout.table_of(&row.key)];
            let what = || format!("inserting {} into {}", row.key, table.name);
            let added = if row.data.len() < LARGE_ROW {
                let mut stmt = self
                    .conn
                    .prepare_cached(&table.insert)
                    .map_err(|e| Stop::sqlite("preparing an insert", e))?;
                stmt.execute(params![
                    &row.key.as_bytes()[..],
                    row.raw_len as i64,
                    &row.data[..],
                    now
                ])
                .map_err(|e| Stop::sqlite(&what(), e))?
            } else {
                self.insert_large(row, table, now).map_err(|e| Stop::sqlite(&what(), e))?
            };
            if added == 1 {
                totals.objects += 1;
                totals.raw += row.raw_len as i64;
                totals.stored += row.data.len() as i64;
            } else {
                // Stored already: saving it again is a use.
                self.shared.uses.record(&row.key);
            }
            present.insert(row.key);
        }
        Ok(())
    }

    /// Inserts a large row without handing SQLite a copy of its value: the row is inserted
    /// with a zeroed value of the right length, which is then written through blob I/O.
    /// Binding the value would make SQLite copy it first, a third copy of a large object in
    /// memory beside the caller's bytes and the compressed row.
    fn insert_large(&self, row: &Row, table: &TableSql, now: i64) -> rusqlite::Result<usize> {
        let added = self.conn.prepare_cached(&table.insert_zeroblob)?.execute(params![
            &row.key.as_bytes()[..],
            row.raw_len as i64,
            row.data.len() as i64,
            now
        ])?;
        if added == 1 {
            let rowid = self.conn.last_insert_rowid();
            let mut blob = self.conn.blob_open(
                rusqlite::MAIN_DB,
                table.name.as_str(),
                "data",
                rowid,
                false,
            )?;
            blob.write_all(&row.data)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        }
        Ok(added)
    }

    /// Deletes an object and, if the stash has names, its names.
    fn delete(&self, key: &Key, names: bool, totals: &mut Delta) -> Result<bool, Stop> {
        let schema = &self.shared.schema;
        let table = &schema.tables[schema.layout.table_of(key)];
        let mut stmt = self
            .conn
            .prepare_cached(&table.delete)
            .map_err(|e| Stop::sqlite("preparing a delete", e))?;
        let mut rows = stmt
            .query([&key.as_bytes()[..]])
            .map_err(|e| Stop::sqlite(&format!("removing {key} from {}", table.name), e))?;
        let mut removed = false;
        while let Some(row) =
            rows.next().map_err(|e| Stop::sqlite(&format!("removing {key}"), e))?
        {
            let raw: i64 = row.get(0).map_err(|e| Stop::sqlite("reading a removed row", e))?;
            let stored: i64 = row.get(1).map_err(|e| Stop::sqlite("reading a removed row", e))?;
            let used: i64 = row.get(2).map_err(|e| Stop::sqlite("reading a removed row", e))?;
            totals.objects -= 1;
            totals.raw -= raw;
            totals.stored -= stored;
            if used == PINNED {
                totals.pinned -= 1;
                totals.pinned_bytes -= stored;
            }
            removed = true;
        }
        drop(rows);
        if removed && names {
            let mut stmt = self
                .conn
                .prepare_cached(NameSql::DELETE_BY_KEY)
                .map_err(|e| Stop::sqlite("preparing a name delete", e))?;
            let gone = stmt
                .execute([&key.as_bytes()[..]])
                .map_err(|e| Stop::sqlite(&format!("removing the names of {key}"), e))?;
            totals.names -= gone as i64;
        }
        Ok(removed)
    }

    /// Pins an object; whether it is stored (and so pinned now).
    fn pin(&self, key: &Key, totals: &mut Delta) -> Result<bool, Stop> {
        let table = self.shared.schema.table(key);
        let what = |e| Stop::sqlite(&format!("pinning {key}"), e);
        let mut stmt = self.conn.prepare_cached(&table.pin).map_err(what)?;
        let stored: Option<i64> =
            stmt.query_row([&key.as_bytes()[..]], |r| r.get(0)).optional().map_err(what)?;
        if let Some(bytes) = stored {
            totals.pinned += 1;
            totals.pinned_bytes += bytes;
            return Ok(true);
        }
        // Not stored, or pinned already.
        let mut stmt = self.conn.prepare_cached(&table.exists).map_err(what)?;
        stmt.exists([&key.as_bytes()[..]]).map_err(what)
    }

    /// Unpins an object, which counts as a use now; whether it was pinned.
    fn unpin(&self, key: &Key, totals: &mut Delta) -> Result<bool, Stop> {
        let table = self.shared.schema.table(key);
        let what = |e| Stop::sqlite(&format!("unpinning {key}"), e);
        let mut stmt = self.conn.prepare_cached(&table.unpin).map_err(what)?;
        let pinned: Option<i64> = stmt
            .query_row(params![&key.as_bytes()[..], uses::now()], |r| r.get(0))
            .optional()
            .map_err(what)?;
        if let Some(bytes) = pinned {
            totals.pinned -= 1;
            totals.pinned_bytes -= bytes;
        }
        Ok(pinned.is_some())
    }
}

/// Operations gathered for writing in order: rows sorted by key, then names by name.
#[derive(Default)]
struct Run<'a> {
    rows: Vec<&'a Row>,
    names: Vec<&'a NameRow>,
}

/// A writer failure in words a user can act on.
fn describe(what: &str, e: &rusqlite::Error) -> String {
    match sqlite_code(e) {
        Some(rusqlite::ErrorCode::DiskFull) => {
            format!("{what} failed because the disk is full ({e}); free space and reopen")
        }
        Some(rusqlite::ErrorCode::ReadOnly) => {
            format!("{what} failed because the database became read-only ({e})")
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            format!("{what} failed because the database file is damaged ({e}); reopen to recover")
        }
        _ => format!("{what} failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_bound_shrinks_batches_only_for_large_stashes() {
        assert_eq!(journal_bounded_rows(100_000, 0, 8192, JOURNAL_BUDGET), 100_000);
        assert_eq!(journal_bounded_rows(100_000, 200_000, 8192, JOURNAL_BUDGET), 100_000);
        let at_10m = journal_bounded_rows(100_000, 10_000_000, 8192, JOURNAL_BUDGET);
        assert!((10_000..30_000).contains(&at_10m), "{at_10m}");
        let at_100m = journal_bounded_rows(100_000, 100_000_000, 8192, JOURNAL_BUDGET);
        assert!(at_100m < at_10m && at_100m > 10_000, "{at_100m}");
        // The bound never exceeds the configured batch.
        assert_eq!(journal_bounded_rows(10, 10_000_000, 8192, JOURNAL_BUDGET), 10);
    }
}
