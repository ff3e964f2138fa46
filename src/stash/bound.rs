//! Staying within a size: the cap, one-off evictions, and pins (see `evict.rs` for how the
//! writer evicts, `uses.rs` for how uses are recorded).

use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension};

use crate::cache::uses;
use crate::db::meta;
use crate::db::schema;
use crate::error::{DbContext, Error, Result};
use crate::files::reserve;
use crate::key::Key;
use crate::report::stats::Evicted;
use crate::writer::{Pin, SetMaxSize, Trim, asked};

use super::{Reopen, Stash};

/// Times `save_pinned` saves again objects another process evicted before they were
/// pinned.
const PIN_TRIES: usize = 3;

impl Stash {
    /// The size cap the stash records, if it has one.
    ///
    /// # Errors
    /// [`Error::Database`] if it cannot be read.
    pub fn max_size(&self) -> Result<Option<u64>> {
        let reader = self.readers.checkout()?;
        meta::read_max_size(&reader)
    }

    /// Records a size cap in the stash (`None` removes it), for every handle and every
    /// later open; see [`StashBuilder::max_size`](crate::StashBuilder::max_size) for what
    /// counts. Returns once the cap is committed; evicting down to it then goes on in the
    /// background, between batches of saves. Call [`Stash::trim_to`] to wait for it. The
    /// first cap, eviction or removal of a stash indexes its objects' uses (and its names by
    /// key) in the same transaction, once: one pass over the stash (0.4 s for a million
    /// objects in memory, from disk as long as reading the file), which saves wait for.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a cap of 0; [`Error::ReadOnly`],
    /// [`Error::WriterStopped`] or [`Error::Busy`] as for a save.
    pub fn set_max_size(&self, bytes: Option<u64>) -> Result<()> {
        if bytes == Some(0) {
            return Err(Error::config(
                "a size cap of 0 bytes cannot hold anything: give at least 1 byte, or none"
                    .to_string(),
            ));
        }
        self.ask(|answer| asked(SetMaxSize { cap: bytes }, answer))
    }

    /// Evicts least recently used unpinned objects until the database's pages in use fit
    /// `bytes`, then gives the free pages back, so the file shrinks to about `bytes`; the
    /// recorded cap is not changed. Objects used within the eviction grace period stay, so
    /// the stash can end above `bytes`. Runs in short transactions; returns when done.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::WriterStopped`] or [`Error::Busy`] as for a save.
    pub fn trim_to(&self, bytes: u64) -> Result<Evicted> {
        self.trim(None, Some(bytes))
    }

    /// Evicts every unpinned object not saved or read for `unused_for` (and at least the
    /// eviction grace period, see
    /// [`StashBuilder::eviction_grace`](crate::StashBuilder::eviction_grace)); returns what
    /// went.
    ///
    /// # Errors
    /// As [`Stash::trim_to`].
    pub fn evict_unused_since(&self, unused_for: Duration) -> Result<Evicted> {
        let millis = unused_for.as_millis().min(i64::MAX as u128) as i64;
        // Unused for at least `unused_for`: last used at or before `now - unused_for` (a
        // use this very millisecond counts as unused for zero).
        self.trim(Some(uses::now().saturating_sub(millis).saturating_add(1)), None)
    }

    fn trim(&self, unused_before: Option<i64>, max_size: Option<u64>) -> Result<Evicted> {
        if self.writer.is_none()
            && let Some(reopen) = &self.full_disk
        {
            return self.trim_on_full_disk(reopen, unused_before, max_size);
        }
        self.ask(|answer| Box::new(Trim { unused_before, max_size, answer }))
    }

    /// A trim by a handle that opened read-only because the disk was full: the reserve's
    /// space goes back to the file system, which lets a handle open for writing (its log
    /// and index files) and trim; its writer makes the reserve again once there is room.
    fn trim_on_full_disk(
        &self,
        reopen: &Reopen,
        unused_before: Option<i64>,
        max_size: Option<u64>,
    ) -> Result<Evicted> {
        let path = &self.shared.path;
        if !reserve::release(path) {
            return Err(Error::DiskFull { path: path.clone(), reserve: false });
        }
        let writable = reopen()?;
        let trimmed = writable.trim(unused_before, max_size);
        let closed = writable.close();
        let trimmed = trimmed?;
        closed?;
        Ok(trimmed)
    }

    /// Pins objects: they are never evicted (an explicit [`Stash::remove`] still removes
    /// them) and their stored bytes count toward the cap. Returns whether each is stored
    /// (and so pinned now), in input order. Committed when it returns.
    ///
    /// # Errors
    /// [`Error::ReadOnly`], [`Error::WriterStopped`] or [`Error::Busy`] as for a save.
    pub fn pin(&self, keys: &[Key]) -> Result<Vec<bool>> {
        self.pin_or_unpin(keys, true)
    }

    /// Unpins objects, which counts as a use now; returns whether each was pinned.
    ///
    /// # Errors
    /// As [`Stash::pin`].
    pub fn unpin(&self, keys: &[Key]) -> Result<Vec<bool>> {
        self.pin_or_unpin(keys, false)
    }

    fn pin_or_unpin(&self, keys: &[Key], pin: bool) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.ask(|answer| asked(Pin { keys: keys.to_vec(), pin, found: Vec::new() }, answer))
    }

    /// Saves objects and pins them (see [`Stash::save_all`], [`Stash::pin`]): local work
    /// that exists nowhere else, kept beside cached copies. Committed when it returns.
    ///
    /// # Errors
    /// As [`Stash::save_all`] and [`Stash::pin`].
    pub fn save_pinned<T: AsRef<[u8]> + Sync>(&self, objects: &[T]) -> Result<Vec<Key>> {
        let keys = self.save_all(objects)?;
        let mut todo: Vec<usize> = (0..keys.len()).collect();
        for _ in 0..PIN_TRIES {
            let wanted: Vec<Key> = todo.iter().map(|&i| keys[i]).collect();
            let pinned = self.pin(&wanted)?;
            todo = todo.into_iter().zip(pinned).filter(|(_, ok)| !ok).map(|(i, _)| i).collect();
            if todo.is_empty() {
                return Ok(keys);
            }
            // Another thread had queued them and its rows had not reached the writer yet,
            // or another process evicted them between the save and the pin: save them
            // again and wait for every row queued so far.
            let again: Vec<&[u8]> = todo.iter().map(|&i| objects[i].as_ref()).collect();
            self.save_all(&again)?;
            self.flush()?;
        }
        Err(self.shared.busy_error(
            "other processes evicted the objects each time before they could be pinned",
        ))
    }

    /// Whether the object under `key` is stored and pinned.
    ///
    /// # Errors
    /// [`Error::Database`] if the lookup fails.
    pub fn is_pinned(&self, key: &Key) -> Result<bool> {
        self.flush()?;
        let reader = self.readers.checkout()?;
        if !schema::has_uses(&reader, &self.shared.schema)? {
            return Ok(false);
        }
        let table = self.table(key);
        let mut stmt = reader.prepare_cached(&table.pinned).context(|| "reading a pin".into())?;
        let pinned: Option<bool> = stmt
            .query_row([&key.as_bytes()[..]], |r| r.get(0))
            .optional()
            .context(|| format!("reading whether {key} is pinned"))?;
        Ok(pinned == Some(true))
    }

    /// The earliest last use of an unpinned object, read on `conn`; `None` also when the
    /// stash has never evicted nor had a cap, and so has no index of uses to read it from.
    pub(super) fn oldest_use(&self, conn: &Connection) -> Result<Option<SystemTime>> {
        let schema = &self.shared.schema;
        if !schema::has_uses(conn, schema)? || !schema.removals_indexed(conn)? {
            return Ok(None);
        }
        let mut oldest: Option<i64> = None;
        for table in &self.shared.schema.tables {
            let sql = if schema.uses_apart { &table.apart.first_use } else { &table.first_use };
            let mut stmt = conn.prepare_cached(sql).context(|| "reading uses".to_string())?;
            let first: Option<i64> = stmt
                .query_row([], |r| r.get(0))
                .optional()
                .map(Option::flatten)
                .context(|| format!("reading the oldest use in {}", table.name))?;
            oldest = match (oldest, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(oldest.and_then(uses::to_time))
    }
}
