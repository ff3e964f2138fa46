//! The writer thread: its state, its loop, and how a batch is gathered, written and
//! committed, or given up.
//!
//! The loop takes a message when one is waiting, gathers a batch around it, commits it and
//! answers its operations; between batches, and whenever no message comes for a while, it
//! runs one step of upkeep (`writer/upkeep.rs`). A batch that could not start because
//! another handle held the write lock is kept, and tried again; anything else that fails
//! stops the writer for good.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use rusqlite::Connection;

use super::batch::{self, Batch, Entry, JOURNAL_BUDGET, LINGER, Limit, MAX_BATCH_AGE, RUN_ROWS};
use super::op::{After, Message};
use super::state::{Moves, Writer};
use super::stop::{Failure, Stop, StopContext};
use super::tx::{self, Tx, Written};
use super::{Shared, WriterConfig};
use crate::cache::evict::{self, MAX_BATCH_BYTES};
use crate::cache::uses;
use crate::db::format;
use crate::db::key_filter::{self, KeyFilter};
use crate::db::key_index::KeyIndex;
use crate::db::meta;
use crate::db::models;
use crate::db::names;
use crate::error::{Error, Result, sqlite_code};
use crate::files::reserve;
use crate::writer::model_memory::Models;

/// Tries of a kept batch after its senders are gone before the writer gives up on it.
const TRIES_AT_CLOSE: u32 = 3;
/// Steps of upkeep a closing writer runs at most (each evicts or gives back at most one
/// batch's worth): a cap's eviction is finished before the handle closes.
const MAX_UPKEEP_AT_CLOSE: usize = 10_000;

/// What the loop does next.
enum Next {
    /// Gather a batch around this message.
    Batch(Message),
    /// Nothing is waiting: a step of upkeep.
    Upkeep,
    /// The handle is closing and everything it sent is done.
    Close,
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

/// Commits between two looks at whether the stash should keep a reserve of disk space
/// (`files/reserve.rs`); the first commit looks.
const RESERVE_EVERY: u32 = 256;

impl Writer {
    pub(super) fn new(conn: Connection, shared: Arc<Shared>, config: WriterConfig) -> Result<Self> {
        let objects = meta::read_totals(&conn)?.objects;
        let page_size: i64 = conn
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .map_err(|e| Error::db("reading the page size", e))?;
        let incremental =
            evict::incremental(&conn).map_err(|e| Error::db("reading the vacuum mode", e))?;
        let mut writer = Writer {
            conn,
            shared,
            batch_size: config.batch_size,
            objects,
            page_size: page_size.max(512) as u64,
            senders_gone: false,
            grace: uses::millis(config.grace),
            cap: None,
            incremental,
            jobs: VecDeque::new(),
            evicting: false,
            checkpoint_owed: false,
            moves: Moves::new(config.young_keys),
            removals_indexed: false,
            last_write: Instant::now(),
            filter: None,
            data_version: 0,
            quiet_rows: 0,
            told_disk_full: false,
            commits_since_reserve: RESERVE_EVERY,
            tight: false,
            models: Models::default(),
            models_seen: None,
            orphans_checked: None,
        };
        writer.read_cap().map_err(Stop::into_error)?;
        Ok(writer)
    }

    pub(super) fn run(mut self, rx: Receiver<Message>) {
        let shared = Arc::clone(&self.shared);
        let _guard = PanicGuard(&shared);
        let mut batch = Batch::default();
        let mut tries_at_close = 0;
        let mut upkeep_owed = false;
        loop {
            if batch.is_empty() {
                match self.next(&rx, upkeep_owed) {
                    Next::Batch(message) => {
                        batch.push(message);
                    }
                    Next::Upkeep => {
                        match self.upkeep() {
                            Ok(owed) => upkeep_owed = owed,
                            Err(stop) if stop.disk_full() => {
                                self.upkeep_deferred(&stop);
                                upkeep_owed = false;
                            }
                            Err(stop) => return self.fail(stop, batch),
                        }
                        continue;
                    }
                    Next::Close => break,
                }
            }
            match self.gather_and_commit(&rx, &mut batch) {
                Ok(()) => {
                    self.settle(std::mem::take(&mut batch));
                    match self.read_cap().and_then(|()| self.upkeep()) {
                        Ok(owed) => upkeep_owed = owed,
                        Err(stop) if stop.disk_full() => {
                            self.upkeep_deferred(&stop);
                            upkeep_owed = false;
                        }
                        Err(stop) => return self.fail(stop, Batch::default()),
                    }
                }
                Err(Failure::Busy) => {
                    self.refuse_waiting(&mut batch);
                    if self.senders_gone {
                        tries_at_close += 1;
                        if tries_at_close >= TRIES_AT_CLOSE {
                            let stop = Stop::new(format!(
                                "{} objects could not be written: another process held the \
                                 stash's write lock for longer than {:?}, {TRIES_AT_CLOSE} times",
                                batch.rows(),
                                self.shared.busy
                            ));
                            return self.fail(stop, batch);
                        }
                    }
                }
                Err(Failure::Fatal(stop)) => return self.fail(stop, batch),
            }
        }
        // The handle is closing: what a cap owes is evicted now, so that the files fit the
        // cap once it is closed (a burst of saves leaves eviction behind it). Objects saved
        // within the grace period are spared: if they keep the stash over its cap, their
        // grace (at most a second of it) is waited out and the rest evicted, so that a
        // closed stash is not left over its cap until the next write.
        for round in 0..2 {
            if round == 1 {
                if !self.over_cap() {
                    break;
                }
                let wait = u64::try_from(self.grace).unwrap_or(0).min(1_000);
                std::thread::sleep(std::time::Duration::from_millis(wait + 1));
            }
            for _ in 0..MAX_UPKEEP_AT_CLOSE {
                match self.upkeep() {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(stop) if stop.disk_full() => {
                        self.upkeep_deferred(&stop);
                        break;
                    }
                    Err(stop) => return self.fail(stop, Batch::default()),
                }
            }
        }
        // The reads it recorded last, and what it counted last, still count.
        if (!self.shared.uses.is_empty() || self.shared.counts.owed())
            && let Err(Failure::Fatal(stop)) = self.record_uses_and_counts()
        {
            log::warn!("objstash: the last uses of objects could not be recorded: {stop:?}");
        }
    }

    /// Upkeep (recording uses, moving keys, evicting down to a cap) found no room on the
    /// disk: it is left for later, and the writer goes on; what it records is advisory, and
    /// saves that need the room fail on their own. Said once per writer.
    fn upkeep_deferred(&mut self, stop: &Stop) {
        let _ = self.conn.execute_batch("ROLLBACK");
        if !self.told_disk_full {
            self.told_disk_full = true;
            log::warn!("objstash: upkeep is deferred: {}", stop.reason());
        }
    }

    /// The next thing to do. With upkeep owed, a message is taken only if one is waiting:
    /// saves go first, upkeep runs between batches.
    fn next(&mut self, rx: &Receiver<Message>, upkeep_owed: bool) -> Next {
        if upkeep_owed {
            match rx.try_recv() {
                Ok(message) => Next::Batch(message),
                Err(TryRecvError::Empty) => Next::Upkeep,
                Err(TryRecvError::Disconnected) => Next::Close,
            }
        } else {
            match rx.recv_timeout(uses::RECORD_EVERY) {
                Ok(message) => Next::Batch(message),
                Err(RecvTimeoutError::Timeout) => Next::Upkeep,
                Err(RecvTimeoutError::Disconnected) => Next::Close,
            }
        }
    }

    /// Gathers more of `batch` (until it is full, an operation asks for a commit, or no
    /// message has come for a while) and commits it. Rows are written into the open
    /// transaction in sorted runs as they arrive, so SQLite works while producers are still
    /// compressing; only the commit waits for the end of the batch.
    fn gather_and_commit(
        &mut self,
        rx: &Receiver<Message>,
        batch: &mut Batch,
    ) -> Result<(), Failure> {
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
            batch.push(message);
            if batch.unwritten() >= RUN_ROWS {
                self.write(batch)?;
            }
        }
        self.write(batch)?;
        self.commit(batch)
    }

    /// Writes the entries not yet written into the batch's transaction, opening it first if
    /// any of them writes.
    fn write(&mut self, batch: &mut Batch) -> Result<(), Failure> {
        if !batch.open {
            if !batch.writes() {
                return Ok(());
            }
            let format = self.begin()?;
            batch.open = true;
            self.last_write = Instant::now();
            // Where a transaction rolled back had appended is no one's: the end is read
            // again under this transaction's lock.
            batch.tx.values = None;
            self.follow_filter(format)?;
            self.follow_models(format)?;
        }
        let Batch { entries, written, tx: state, .. } = batch;
        let filter = self.filter.as_mut();
        let models = &mut self.models;
        let mut tx = Tx { conn: &self.conn, shared: &self.shared, written: state, filter, models };
        for entry in &mut entries[*written..] {
            match entry {
                Entry::Save(row) => tx.queue_row(row.clone()),
                Entry::Op(op) => op.apply(&mut tx)?,
            }
            if tx.written.queued() >= RUN_ROWS {
                tx.write_run()?;
            }
        }
        tx.write_run()?;
        *written = entries.len();
        Ok(())
    }

    /// Commits the batch's transaction, with the uses recorded so far and the totals.
    fn commit(&mut self, batch: &mut Batch) -> Result<(), Failure> {
        if !batch.open {
            return Ok(());
        }
        let totals = &batch.tx.totals;
        let _span = tracing::debug_span!(
            "commit",
            rows = batch.rows(),
            objects = totals.objects,
            stored_bytes = totals.stored_bytes,
            evicted = totals.evicted,
        )
        .entered();
        tx::write_uses(&self.conn, &self.shared, self.uses_apart());
        meta::add_totals(&self.conn, &batch.tx.totals)?;
        let from = batch.tx.counted_from.unwrap_or_else(|| self.shared.counts.recorded());
        let counted = self.write_counts(&from)?;
        if let Some(appender) = &mut batch.tx.values {
            self.sync_values()?;
            appender.record(&self.conn)?;
        }
        self.conn.execute_batch("COMMIT").stop(|| "committing a batch".into())?;
        self.shared.counts.set_recorded(counted);
        self.shared.commits.committed();
        self.commits_since_reserve += 1;
        if self.commits_since_reserve >= RESERVE_EVERY {
            self.commits_since_reserve = 0;
            reserve::ensure(&self.shared.path);
        }
        batch.open = false;
        self.models.apply(&mut batch.tx.models);
        self.shared.release_withheld(&std::mem::take(&mut batch.tx.models.readable));
        if self.models.on {
            self.shared.models_made();
        }
        if !self.shared.names.table_known() && names::table_exists(&self.conn)? {
            self.shared.names.table_made();
        }
        self.objects = self.objects.saturating_add_signed(batch.tx.totals.objects);
        self.quiet_rows += batch.tx.totals.objects.max(0) as u64;
        Ok(())
    }

    /// Safe mode: syncs the file of values, so that values reach the disk before the rows
    /// that point at them.
    pub(super) fn sync_values(&self) -> Result<(), Stop> {
        let Some(log) = &self.shared.values else { return Ok(()) };
        let synchronous: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .stop(|| "reading the synchronous setting".into())?;
        if synchronous >= 2 {
            log.sync()?;
        }
        Ok(())
    }

    /// At the start of a write transaction of a stash in format `format`, follows what
    /// other connections did since the last one (`key_filter.rs`): a move into the old
    /// index that the filter has not seen drops it; any commit means the young index may
    /// hold keys the filter lacks. Builds the filter (again) once enough rows came with no
    /// other connection committing.
    fn follow_filter(&mut self, format: i64) -> Result<(), Failure> {
        if self.shared.schema.key_index() != KeyIndex::Generations || format < format::COUNTED_MOVES
        {
            self.filter = None;
            return Ok(());
        }
        let moves = meta::read_count(&self.conn, key_filter::MOVES)?;
        let data_version: i64 = self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .stop(|| "reading the data version".into())?;
        if data_version != self.data_version {
            self.data_version = data_version;
            self.quiet_rows = 0;
            if let Some(filter) = &mut self.filter {
                filter.young_exact = false;
            }
        }
        if self.filter.as_ref().is_some_and(|f| f.moves != moves || f.full()) {
            self.filter = None;
        }
        let worth = key_filter::WORTH_ROWS.max(self.objects / 20);
        if self.filter.as_ref().is_none_or(|f| !f.young_exact) && self.quiet_rows >= worth {
            let filter = KeyFilter::build(&self.conn, self.objects, moves)
                .stop(|| "reading the key indexes".into())?;
            self.filter = Some(filter);
            self.quiet_rows = 0;
        }
        Ok(())
    }

    /// At the start of a write transaction of a stash in format `format`: whether the stash
    /// has models, and, when another connection may have changed them, the keys models miss
    /// and the roots that must not be read, as the database says.
    pub(super) fn follow_models(&mut self, format: i64) -> Result<(), Failure> {
        self.models.on = format >= format::MODELS;
        if !self.models.on {
            return Ok(());
        }
        let data_version: i64 = self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .stop(|| "reading the data version".into())?;
        if self.models_seen != Some(data_version) {
            // Another connection committed: what this writer saw of assemblies may be gone.
            self.models.assembled.clear();
            self.models.missing = models::every_missing(&self.conn)?.into_iter().collect();
            let withheld = models::withheld_roots(&self.conn)?.into_iter().collect();
            self.shared.set_withheld(withheld);
            self.models_seen = Some(data_version);
        }
        Ok(())
    }

    /// Runs `work` in a write transaction of its own, on a [`Tx`] of the writer's, and
    /// commits it with the totals it changed; what the writer knows of models follows.
    pub(super) fn transaction_tx<T>(
        &mut self,
        work: impl FnOnce(&mut Tx<'_>) -> Result<T, Stop>,
    ) -> Result<T, Failure> {
        let format = self.begin()?;
        if let Err(failure) = self.follow_models(format) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(failure);
        }
        let mut written = Written::default();
        let done = (|| {
            let filter = self.filter.as_mut();
            let models = &mut self.models;
            let mut tx = Tx {
                conn: &self.conn,
                shared: &self.shared,
                written: &mut written,
                filter,
                models,
            };
            let value = work(&mut tx)?;
            tx.write_run()?;
            meta::add_totals(&self.conn, &written.totals)?;
            // What the handle counted rides along (`writer/counting.rs`).
            let counted = self.write_counts(&self.shared.counts.recorded())?;
            if let Some(appender) = &mut written.values {
                appender.record(&self.conn)?;
            }
            self.conn.execute_batch("COMMIT").stop(|| "committing".into())?;
            Ok((value, counted))
        })();
        match done {
            Ok((value, counted)) => {
                self.shared.counts.set_recorded(counted);
                self.shared.commits.committed();
                self.models.apply(&mut written.models);
                self.shared.release_withheld(&written.models.readable);
                if self.models.on {
                    self.shared.models_made();
                }
                self.objects = self.objects.saturating_add_signed(written.totals.objects);
                Ok(value)
            }
            Err(stop) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(Failure::Fatal(stop))
            }
        }
    }

    /// Starts a write transaction: [`Failure::Busy`] when another handle kept the write
    /// lock for the busy timeout. A stash that a newer objstash has moved to a format this
    /// version does not know (another process may do so at any time) stops the writer
    /// rather than be written in the old way. Returns the stash's format version.
    pub(super) fn begin(&self) -> Result<i64, Failure> {
        match self.conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {}
            Err(e) if sqlite_code(&e) == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                return Err(Failure::Busy);
            }
            Err(e) => return Err(Stop::sqlite("starting a transaction", e).into()),
        }
        let newer = match self.conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) {
            Ok(version) if version <= format::NEWEST => return Ok(version),
            Ok(version) => Stop::new(format!(
                "a newer objstash changed the stash to format {version} while this handle had \
                 it open (this version writes format {} and older); reopen it with the newer \
                 version",
                format::NEWEST
            )),
            Err(e) => Stop::sqlite("reading the format version", e),
        };
        let _ = self.conn.execute_batch("ROLLBACK");
        Err(newer.into())
    }

    /// Runs `work` in a transaction of its own.
    pub(super) fn transaction<T>(
        &mut self,
        work: impl FnOnce(&Self) -> Result<T, Stop>,
    ) -> Result<T, Failure> {
        self.begin()?;
        let done = work(self).and_then(|value| {
            self.conn.execute_batch("COMMIT").map(|()| value).stop(|| "committing".into())
        });
        if done.is_ok() {
            self.shared.commits.committed();
        }
        if done.is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        Ok(done?)
    }

    /// After a commit: forgets the committed rows from the pending map and answers every
    /// operation of the batch.
    fn settle(&mut self, batch: Batch) {
        let mut after = After { shared: &self.shared, jobs: &mut self.jobs };
        for entry in batch.entries {
            match entry {
                Entry::Save(row) => after.shared.pending.settle(&row),
                Entry::Op(op) => op.committed(&mut after),
            }
        }
    }

    /// After a busy timeout: the operations callers wait for get `Busy`; saves, and
    /// operations nobody waits for, stay in the batch (saves readable from the pending map)
    /// to be written on the next try.
    fn refuse_waiting(&self, batch: &mut Batch) {
        debug_assert!(!batch.open && batch.written == 0, "busy only before the first write");
        let busy = || self.shared.busy_error("another process held the stash's write lock");
        let entries = std::mem::take(&mut batch.entries);
        let mut kept = Batch::default();
        for entry in entries {
            match entry {
                Entry::Save(row) => kept.push(Message::Save(row)),
                Entry::Op(op) => {
                    if let Some(op) = op.abandoned(busy(), true) {
                        kept.push(Message::Op(op));
                    }
                }
            }
        }
        *batch = kept;
    }

    /// Stops the writer for good: rolls back, records why, and answers everyone waiting.
    fn fail(&mut self, stop: Stop, batch: Batch) {
        if batch.open {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        if stop.damaged() {
            // So that the next open alone rebuilds the file, whatever the boot (where the
            // meta table's page can still be written).
            let _ = meta::write_state(&self.conn, meta::State::Damaged);
        }
        self.shared.stop(stop.clone());
        for entry in batch.entries {
            if let Entry::Op(op) = entry {
                op.abandoned(stop.clone().into_error(), false);
            }
        }
        for job in self.jobs.drain(..) {
            job.trim.answer.send(Err(stop.clone().into_error()));
        }
    }

    /// How large the next batch may grow: rows bounded by the journal budget, bytes by the
    /// cap (see `evict.rs`).
    fn limit(&self) -> Limit {
        // Under a cap, the log's share bounds the index pages a batch may change: what is
        // left of it beside the batch's own rows.
        let (budget, bytes) = self.marks().map_or((JOURNAL_BUDGET, MAX_BATCH_BYTES), |marks| {
            ((marks.log - marks.batch_bytes as u64) as f64, marks.batch_bytes)
        });
        // A batch writes into the young key indexes only, when the stash keeps generations.
        let (entries, entry_bytes) = match self.shared.schema.key_index() {
            KeyIndex::Full => (self.objects, batch::KEY_ENTRY_BYTES),
            KeyIndex::Generations => {
                (self.objects.min(self.moves.young_keys), batch::PREFIX_ENTRY_BYTES)
            }
        };
        Limit {
            rows: batch::journal_bounded_rows(
                self.batch_size,
                entries,
                entry_bytes,
                self.page_size,
                budget,
            ),
            bytes,
        }
    }
}
