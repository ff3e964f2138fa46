//! What the writer does between batches of saves: writing the uses recorded in memory,
//! keeping the stash within its cap (`evict.rs`), one-off evictions, giving free pages
//! back, and keeping the write-ahead log within its share. Each step is one short
//! transaction, so saves wait for at most one.

use std::time::Duration;

use super::state::Writer;
use super::stop::{Failure, Stop, StopContext};
use super::tx;
use crate::cache::evict::{self, EVICT_ROWS, Marks, Space, VACUUM_PAGES};
use crate::cache::uses;
use crate::db::meta;
use crate::db::models;
use crate::db::names;
use crate::db::use_table;
use crate::error::Error;
use crate::error::sqlite_code;
use crate::files::{owners, reserve};
use crate::key::Key;
use crate::report::stats::Evicted;

/// The longest the writer waits for readers to leave the write-ahead log when it is over
/// its share of the cap (see `Writer::bound_log`).
const LOG_WAIT: Duration = Duration::from_millis(200);
/// How often the writer looks for assemblies whose owners are gone.
const ORPHANS_EVERY: Duration = Duration::from_secs(1);

/// A write-ahead log larger than this is truncated once the writer is idle
/// (`Writer::truncate_log`).
const IDLE_LOG_BYTES: u64 = 1 << 20;
/// Eviction transactions run at most between two batches while the stash is over its
/// high-water mark: each frees about one batch, and a batch of saves adds a little more
/// than one (its rows' index entries and page slack).
const EVICT_STEPS: usize = 4;
/// Pages one step of a trim on a full disk may free or move (`Writer::tight`): what a
/// reserve's room holds many times over.
const TIGHT_PAGES: u64 = 64;

impl Writer {
    /// Reads the size cap the stash records (another handle may have changed it) and sizes
    /// the write-ahead log to it.
    pub(super) fn read_cap(&mut self) -> Result<(), Stop> {
        let cap = meta::read_max_size(&self.conn)?;
        if cap != self.cap {
            // The log is checkpointed once it holds this many bytes, and truncated back to
            // them after each checkpoint; SQLite's defaults without a cap.
            let (limit, pages) = cap.map_or((-1, 1000), |cap| {
                let log = Marks::of(cap, self.shared.values.is_some()).log;
                (log as i64, (log / self.page_size).max(1) as i64)
            });
            self.conn
                .pragma_update(None, "journal_size_limit", limit)
                .and_then(|()| self.conn.pragma_update(None, "wal_autocheckpoint", pages))
                .stop(|| "sizing the write-ahead log".into())?;
            self.cap = cap;
        }
        Ok(())
    }

    /// Runs one step of the upkeep owed between batches: a one-off eviction, an eviction
    /// down to the cap, giving free pages back, or writing recorded uses. Returns whether
    /// more is owed. Each step is one short transaction, so saves wait for at most one.
    pub(super) fn upkeep(&mut self) -> Result<bool, Stop> {
        if !self.jobs.is_empty() {
            match self.job_step() {
                Ok(()) => {}
                Err(Failure::Busy) => {
                    let job = self.jobs.pop_front().expect("a job is under way");
                    let busy = "another process held the stash's write lock";
                    job.trim.answer.send(Err(self.shared.busy_error(busy)));
                }
                Err(Failure::Fatal(stop))
                    if stop.disk_full() && (!self.tight || reserve::release(&self.shared.path)) =>
                {
                    // The disk is full: the trim goes on in small steps, each folded back
                    // into the file, first in what the log can take, then in the reserve's
                    // room.
                    let _ = self.conn.execute_batch("ROLLBACK");
                    self.tight = true;
                    self.fold_log();
                }
                Err(Failure::Fatal(stop)) if stop.disk_full() => {
                    // The trim fails, and says why; the writer goes on (reads and saves
                    // that fit are not stopped by a trim that could not start).
                    let _ = self.conn.execute_batch("ROLLBACK");
                    let job = self.jobs.pop_front().expect("a job is under way");
                    job.trim.answer.send(Err(Error::Io {
                        context: format!(
                            "trimming {}: the disk is full, and SQLite needs room in its \
                             write-ahead log to delete objects before the file can shrink \
                             ({}); nothing was lost: free a few MB more than the stash's \
                             -wal file holds, and trim again",
                            self.shared.path.display(),
                            stop.reason()
                        ),
                        source: std::io::Error::from(std::io::ErrorKind::StorageFull),
                    }));
                    return Ok(false);
                }
                Err(Failure::Fatal(stop)) => return Err(stop),
            }
            return Ok(true);
        }
        if self.cap.is_some() && !self.removals_indexed {
            // Built as soon as the stash has a cap, before it needs to evict, so that its
            // bytes count from the start.
            match self.index_removals() {
                Ok(()) => return Ok(true),
                Err(Failure::Busy) => return Ok(false),
                Err(Failure::Fatal(stop)) => return Err(stop),
            }
        }
        match self.give_up_orphans() {
            Ok(()) | Err(Failure::Busy) => {}
            Err(Failure::Fatal(stop)) => return Err(stop),
        }
        match self.finish_model_eviction() {
            Ok(Some(_)) => return Ok(true),
            Ok(None) | Err(Failure::Busy) => {}
            Err(Failure::Fatal(stop)) => return Err(stop),
        }
        let space = self.space()?;
        let now = uses::now();
        if let Some(marks) = self.marks() {
            self.bound_log(&marks);
            let over = space.in_use() > marks.high || (self.evicting && space.in_use() > marks.low);
            if over {
                self.checkpoint_owed = true;
                // At most one batch's bytes a transaction, which bounds the log; as many
                // transactions as it takes to free what one batch of saves adds, so that
                // eviction keeps up with saving.
                let mut space = space;
                for _ in 0..EVICT_STEPS {
                    let need = (space.in_use() - marks.low).min(marks.batch_bytes as u64);
                    match self.evict(self.spared_since(now), self.stored_for(need, &space)?, true) {
                        Ok(evicted) => self.evicting = evicted.objects > 0,
                        Err(Failure::Busy) => self.evicting = false,
                        Err(Failure::Fatal(stop)) => return Err(stop),
                    }
                    space = self.space()?;
                    if !self.evicting || space.in_use() <= marks.high {
                        break;
                    }
                }
                // What eviction left dead in the file of values goes in the same step: a
                // burst of saves leaves no step between batches for anything else.
                match self.values_upkeep() {
                    Ok(_) | Err(Failure::Busy) => {}
                    Err(Failure::Fatal(stop)) => return Err(stop),
                }
                if self.evicting && space.in_use() > marks.low {
                    return Ok(true);
                }
            }
            self.evicting = false;
        }
        let reserve = self.marks().map_or_else(Marks::uncapped_reserve, |marks| marks.reserve);
        if self.incremental && space.free_bytes() > reserve {
            let pages = (space.free_bytes() - reserve).div_ceil(space.page_size);
            self.checkpoint_owed = true;
            match self.vacuum(pages.min(self.step_pages())) {
                Ok(()) => return Ok(true),
                Err(Failure::Busy) => return Ok(false),
                Err(Failure::Fatal(stop)) => return Err(stop),
            }
        }
        match self.values_upkeep() {
            Ok(true) => return Ok(true),
            Ok(false) | Err(Failure::Busy) => {}
            Err(Failure::Fatal(stop)) => return Err(stop),
        }
        match self.move_young() {
            Ok(true) => return Ok(true),
            Ok(false) | Err(Failure::Busy) => {}
            Err(Failure::Fatal(stop)) => return Err(stop),
        }
        if self.checkpoint_owed {
            self.checkpoint_owed = false;
            self.checkpoint();
        }
        if !self.shared.uses.is_empty() || self.shared.counts.owed() {
            // Uses are a hint (see `write_uses`): a failure to write them is no reason to
            // stop, and a damaged file is rebuilt by the next open.
            if let Err(Failure::Fatal(stop)) = self.record_uses_and_counts() {
                log::warn!("objstash: the uses of objects could not be recorded: {stop:?}");
                self.shared.uses.take(self.uses_apart());
            }
        }
        if self.last_write.elapsed() >= uses::RECORD_EVERY {
            self.truncate_log();
        }
        Ok(false)
    }

    /// Whether the stash is above its cap's high-water mark now.
    pub(super) fn over_cap(&self) -> bool {
        match (self.marks(), self.space()) {
            (Some(marks), Ok(space)) => space.in_use() > marks.high,
            _ => false,
        }
    }

    /// The marks of the stash's cap, if it has one.
    pub(super) fn marks(&self) -> Option<Marks> {
        self.cap.map(|cap| Marks::of(cap, self.shared.values.is_some()))
    }

    /// Whether uses go into the narrow tables beside the rows (`use_table.rs`): in a stash
    /// that has them, while it has no cap (a capped stash folds them before every eviction,
    /// so its uses go straight into the rows).
    pub(super) fn uses_apart(&self) -> bool {
        self.shared.schema.uses_apart && self.cap.is_none()
    }

    /// Objects last used at or after this are spared: those used within the grace period
    /// (with none, a use this very millisecond is not), and since the oldest save call
    /// under way on this handle (what it saved is not evicted before it returns).
    fn spared_since(&self, now: i64) -> i64 {
        let grace = now.saturating_sub(self.grace).saturating_add(1);
        self.shared.uses.oldest_save().map_or(grace, |started| grace.min(started))
    }

    /// One step of the first one-off eviction; answers it once it is done.
    fn job_step(&mut self) -> Result<(), Failure> {
        let now = uses::now();
        // A model whose eviction started goes whole before anything else.
        if let Some(step) = self.finish_model_eviction()? {
            if let Some(job) = self.jobs.front_mut() {
                job.done.objects += step.objects;
                job.done.stored_bytes += step.stored_bytes;
            }
            return Ok(());
        }
        let job = self.jobs.front().expect("a job is under way");
        let (unused_before, max_size, aged_out) =
            (job.trim.unused_before, job.trim.max_size, job.aged_out);
        let step = match (unused_before, max_size) {
            (Some(before), _) if !aged_out => {
                let evicted = self.evict(before.min(self.spared_since(now)), u64::MAX, false)?;
                if evicted.objects == 0 {
                    self.jobs[0].aged_out = true;
                }
                evicted
            }
            (_, Some(size)) => {
                let space = self.space()?;
                let step_pages = if self.tight { TIGHT_PAGES } else { self.step_pages() };
                if space.in_use() > size {
                    let need = (space.in_use() - size).min(step_pages * space.page_size);
                    let need = self.stored_for(need, &space)?;
                    let evicted = self.evict(self.spared_since(now), need, true)?;
                    if evicted.objects == 0 {
                        self.finish_job();
                    }
                    evicted
                } else if space.pages * space.page_size > size && space.free > 0 {
                    if self.incremental {
                        self.vacuum(space.free.min(step_pages))?;
                    } else {
                        self.convert()?;
                    }
                    Evicted::default()
                } else {
                    self.finish_job();
                    Evicted::default()
                }
            }
            _ => {
                self.finish_job();
                Evicted::default()
            }
        };
        if let Some(job) = self.jobs.front_mut() {
            job.done.objects += step.objects;
            job.done.stored_bytes += step.stored_bytes;
        }
        if self.tight {
            self.fold_log();
        }
        Ok(())
    }

    /// Copies the write-ahead log into the file and truncates it: on a full disk, what
    /// lets the next small step of a trim write at all.
    fn fold_log(&self) {
        if let Err(e) = self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
            log::debug!("objstash: folding the log back on a full disk: {e}");
        }
    }

    /// Makes a stash created before incremental vacuum give its free pages back: a full
    /// `VACUUM` that rewrites the file without them, once. It holds the write lock for as
    /// long as rewriting the pages in use takes (about a second per 100 MB here), and the
    /// log holds a copy of the file until the checkpoint that ends the trim.
    fn convert(&mut self) -> Result<(), Failure> {
        // Another handle may have converted it since this one opened.
        self.incremental =
            evict::incremental(&self.conn).stop(|| "reading the vacuum mode".into())?;
        if self.incremental {
            return Ok(());
        }
        log::info!(
            "objstash: {} was made before incremental vacuum; rewriting it once so that it \
             gives free pages back",
            self.shared.path.display()
        );
        let converted = self
            .conn
            .pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .and_then(|()| self.conn.execute_batch("VACUUM"));
        match converted {
            Ok(()) => {
                self.shared.commits.committed();
                self.incremental =
                    evict::incremental(&self.conn).stop(|| "reading the vacuum mode".into())?;
                Ok(())
            }
            Err(e) if sqlite_code(&e) == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                Err(Failure::Busy)
            }
            Err(e) => Err(Stop::sqlite("rewriting the stash without its free pages", e).into()),
        }
    }

    fn finish_job(&mut self) {
        // The log's pages count too: fold them into the file and truncate it. Best effort:
        // a reader in the middle of a read keeps part of it until the next checkpoint.
        if let Err(e) = self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
            log::debug!("objstash: checkpoint after a trim: {e}");
        }
        self.checkpoint_owed = false;
        self.tight = false;
        // A reserve spent on a full disk is made again, where the trim left room for it.
        reserve::ensure(&self.shared.path);
        if let Some(job) = self.jobs.pop_front() {
            job.trim.answer.send(Ok(job.done));
        }
    }

    /// Stored bytes to evict to free about `bytes` of pages: rows cost their stored bytes
    /// plus their share of the indexes and of half-full pages.
    fn stored_for(&self, bytes: u64, space: &Space) -> Result<u64, Stop> {
        let stored = meta::read_totals(&self.conn)?.stored_bytes.max(1);
        let per_byte = (space.in_use() as f64 / stored as f64).clamp(1.0, 4.0);
        Ok((bytes as f64 / per_byte).ceil() as u64)
    }

    /// Once upkeep is done: copies the log into the file without waiting for anyone. In
    /// WAL mode a file shrinks only when a checkpoint copies the commit that shrank it;
    /// the automatic checkpoint only runs once the log holds enough pages.
    fn checkpoint(&self) {
        let _span = tracing::debug_span!("checkpoint", mode = "passive").entered();
        if let Err(e) = self.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            log::debug!("objstash: checkpoint after upkeep: {e}");
        }
    }

    /// Once nothing has come for a while: gives the write-ahead log's bytes back. The log
    /// keeps the size of the largest transaction since it was last cut (a batch of saves,
    /// tens of MB), which would otherwise stay on disk for as long as the stash is open.
    /// Waits for no one: a reader still in the log (of another process; this handle's give
    /// their snapshots up when idle) leaves it for the next idle moment, checkpointed as
    /// far as it can be.
    fn truncate_log(&self) {
        let log = crate::files::sibling(&self.shared.path, "-wal");
        if std::fs::metadata(log).map_or(0, |m| m.len()) <= IDLE_LOG_BYTES {
            return;
        }
        let _span = tracing::debug_span!("checkpoint", mode = "truncate").entered();
        let truncated = self
            .conn
            .busy_timeout(Duration::ZERO)
            .and_then(|()| self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())));
        if let Err(e) = truncated.and_then(|()| self.conn.busy_timeout(self.shared.busy)) {
            log::debug!("objstash: truncating the write-ahead log: {e}");
            let _ = self.conn.busy_timeout(self.shared.busy);
        }
    }

    /// Keeps the write-ahead log within its share of the cap. The automatic checkpoint
    /// copies the log into the file, but the log only starts over from its beginning (and
    /// is cut back to `journal_size_limit`) once no reader is still reading its frames; with
    /// saves looking keys up all the time that moment may not come, and the log grows. A
    /// `RESTART` checkpoint waits (briefly) for the readers to move on.
    fn bound_log(&self, marks: &Marks) {
        let log = crate::files::sibling(&self.shared.path, "-wal");
        let bytes = std::fs::metadata(log).map_or(0, |m| m.len());
        if bytes <= marks.log {
            return;
        }
        let _span =
            tracing::debug_span!("checkpoint", mode = "restart", log_bytes = bytes).entered();
        let restarted = self
            .conn
            .busy_timeout(LOG_WAIT)
            .and_then(|()| self.conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())));
        if let Err(e) = restarted.and_then(|()| self.conn.busy_timeout(self.shared.busy)) {
            log::debug!("objstash: restarting the write-ahead log: {e}");
            let _ = self.conn.busy_timeout(self.shared.busy);
        }
    }

    /// Pages one step of upkeep may free or move: one batch's worth under a cap (the log
    /// holds one transaction's pages), [`VACUUM_PAGES`] without.
    fn step_pages(&self) -> u64 {
        self.marks()
            .map_or(VACUUM_PAGES, |marks| (marks.batch_bytes as u64 / self.page_size).max(1))
    }

    fn space(&self) -> Result<Space, Stop> {
        Space::read(&self.conn, self.shared.values.is_some())
            .stop(|| "reading the database's size".into())
    }

    /// Evicts, in one transaction, the least recently used unpinned objects used before
    /// `before`, up to `stored_bytes` of them (and [`EVICT_ROWS`] rows), with their names:
    /// loose objects one by one, models whole (`writer/models.rs`), the most recently used
    /// model never if `keep_newest` (a model larger than the cap stays until another needs
    /// the room).
    fn evict(
        &mut self,
        before: i64,
        stored_bytes: u64,
        keep_newest: bool,
    ) -> Result<Evicted, Failure> {
        let span = tracing::debug_span!(
            "evict",
            up_to_bytes = stored_bytes,
            objects = tracing::field::Empty,
            stored_bytes = tracing::field::Empty,
        );
        let _entered = span.enter();
        self.index_removals()?;
        let uses_apart = self.uses_apart();
        let evicted = self.transaction_tx(|tx| {
            // Uses recorded in memory first, and those recorded apart folded into the rows,
            // so that they count.
            tx::write_uses(tx.conn, tx.shared, uses_apart);
            let schema = &tx.shared.schema;
            if schema.uses_apart {
                use_table::fold(tx.conn, schema.tables.iter().map(|t| &t.apart))?;
            }
            if tx.models_on()
                && let Some(evicted) = tx.evict_model(before, stored_bytes, keep_newest)?
            {
                return Ok(evicted);
            }
            let uses = &tx.shared.uses;
            let recent = |key: &Key| uses.recorded(key).is_some_and(|used| used >= before);
            let victims = evict::oldest(tx.conn, schema, before, EVICT_ROWS, stored_bytes, recent)
                .stop(|| "choosing objects to evict".into())?;
            if victims.is_empty() {
                return Ok(Evicted::default());
            }
            let names = tx.shared.names.table_known() || names::table_exists(tx.conn)?;
            let delta = &mut tx.written.totals;
            let (evicted, bytes) = (delta.evicted, delta.evicted_bytes);
            evict::delete(tx.conn, schema, &victims, names, delta)
                .stop(|| "evicting objects".into())?;
            Ok(Evicted {
                objects: (delta.evicted - evicted) as u64,
                stored_bytes: (delta.evicted_bytes - bytes) as u64,
            })
        })?;
        span.record("objects", evicted.objects);
        span.record("stored_bytes", evicted.stored_bytes);
        Ok(evicted)
    }

    /// Gives up the assemblies whose owners are gone (a process killed between its saves
    /// and its root: `files/owners.rs`), at most once per [`ORPHANS_EVERY`]: what they held
    /// becomes loose, and evictable, within about that long of the death.
    fn give_up_orphans(&mut self) -> Result<(), Failure> {
        if !self.models.on && !self.shared.models() {
            return Ok(());
        }
        if self.orphans_checked.is_some_and(|at| at.elapsed() < ORPHANS_EVERY) {
            return Ok(());
        }
        self.orphans_checked = Some(std::time::Instant::now());
        let mine = self.shared.owner.made();
        let owned = models::owned_assemblies(&self.conn).map_err(Stop::from)?;
        let gone: Vec<i64> = owned
            .into_iter()
            .filter(|(_, owner)| Some(owner) != mine.as_ref())
            .filter(|(_, owner)| owners::gone(&self.shared.path, owner))
            .map(|(id, _)| id)
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        self.transaction_tx(|tx| gone.iter().try_for_each(|id| tx.give_up(*id)))?;
        log::warn!(
            "objstash: gave up {} assemblies whose processes are gone; what they held is \
             loose again",
            gone.len()
        );
        Ok(())
    }

    /// One step of the eviction of a model under way, if there is one: started by a cap or
    /// a trim, it goes on whatever the stash's size, until the model is gone whole.
    fn finish_model_eviction(&mut self) -> Result<Option<Evicted>, Failure> {
        if !self.models.on && !self.shared.models() {
            return Ok(None);
        }
        if !models::evicting(&self.conn).map_err(Stop::from)? {
            return Ok(None);
        }
        self.transaction_tx(|tx| tx.evict_model(i64::MAX, u64::MAX, false))
    }

    /// Builds the indexes removals read (of uses, and of names by key), unless the stash
    /// has them: once in a stash's life, at its first eviction or cap (`schema.rs`). One
    /// transaction, one pass over each table.
    pub(super) fn index_removals(&mut self) -> Result<(), Failure> {
        if self.removals_indexed {
            return Ok(());
        }
        if !self.shared.schema.removals_indexed(&self.conn).map_err(Stop::from)? {
            log::info!(
                "objstash: indexing the uses and names of {} for eviction (once)",
                self.shared.path.display()
            );
            self.transaction(|writer| Ok(writer.shared.schema.index_removals(&writer.conn)?))?;
            self.checkpoint_owed = true;
        }
        self.removals_indexed = true;
        Ok(())
    }

    /// Gives up to `pages` free pages back to the file system, in one transaction.
    fn vacuum(&mut self, pages: u64) -> Result<(), Failure> {
        self.transaction(|writer| {
            evict::vacuum(&writer.conn, pages).stop(|| "giving free pages back".into())
        })
    }
}
