//! Reading: `get`, `get_many`, `contains`, `missing`.
//!
//! A read looks in the pending map (rows queued but not committed) and then in the
//! database. The order matters for reads of several keys in one transaction: the writer
//! forgets a row from the pending map only after committing it, so a key not pending at
//! some moment is committed by then, if it was saved at all. Multi-key reads therefore
//! look every key up in the pending map *before* their transaction reads anything (which
//! is when its snapshot is taken): a row committed and forgotten during the transaction
//! was either seen pending or is in the snapshot. Looking keys up in the pending map one
//! by one inside the transaction lost ~1% of fresh keys in Safe mode, where WAL lets the
//! writer commit during a read transaction (tests/suite/read_your_writes.rs).

use std::sync::Arc;

use rayon::prelude::*;
use rusqlite::{Connection, OptionalExtension, Statement};

use crate::cache::uses;
use crate::codec;
use crate::db::first_generation::Generation;
use crate::db::row::{Column, Columns, Place, RowOf, Sql};
use crate::db::schema::TableSql;
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::large::manifest;
use crate::parts;
use crate::values::value_log;
use crate::writer::pending::Row;

use super::Stash;

/// Fewest keys `get_many` gives one part. A part costs a read transaction (its file lock,
/// a few syscalls) and a hand-over to the pool, small beside 64 reads of ~20 µs each.
pub(super) const GET_MANY_MIN_PART: usize = 64;

/// What a read of one key of many found: the object, none, or why it could not be read.
type Read = Result<Option<Vec<u8>>>;

/// What `get_many` finds of a key: a row still pending, decoded once the part's
/// transaction has ended, or an object read and decoded in it.
enum Found {
    Pending(Stored),
    Read(Result<Vec<u8>>),
}

/// A committed row as a read finds it.
pub(super) struct Stored {
    pub raw_len: i64,
    pub data: Arc<Vec<u8>>,
    /// Its last use; `None` when this handle does not read it.
    pub used: Option<i64>,
}

impl Stored {
    /// A row still pending, as a read at `now` uses it.
    pub(super) fn pending(row: Row, now: i64) -> Self {
        Stored { raw_len: row.raw_len as i64, data: row.data, used: Some(now) }
    }
}

impl Stash {
    /// The object stored under `key`, or `None`.
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) if the stored row does not decompress or
    /// does not hash to `key`; the damaged bytes are never returned.
    /// [`Error::Database`](crate::Error::Database) if the read fails.
    pub fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        let found = self.get_uncounted(key)?;
        self.shared.counts.read(1, usize::from(found.is_some()));
        Ok(found)
    }

    /// [`Stash::get`], not counted as a read (for the library's own reads: verify, names).
    pub(super) fn get_uncounted(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        if let Some(row) = self.pending_row(key)? {
            return self.decode(key, row.raw_len as i64, &row.data, Some(uses::now())).map(Some);
        }
        // A snapshot kept from an earlier read (readers.rs) saves starting a read
        // transaction; one that finds nothing is renewed, in case another process has
        // committed the object since it was taken.
        let mut reader = self.readers.checkout_held(&self.shared.commits)?;
        let mut found = self.read_committed(&reader, key)?;
        if found.is_none() && reader.reused() {
            reader.renew(&self.shared.commits)?;
            found = self.read_committed(&reader, key)?;
        }
        #[cfg(feature = "remote")]
        if found.is_none() && self.remote.is_some() {
            drop(reader);
            return Ok(self.read_through(std::slice::from_ref(key))?.pop().flatten());
        }
        Ok(found)
    }

    /// Checks that `key`, which a read did not find, is not hidden by damage: the lookup
    /// runs again on a new connection that checks every page it crosses (SQLite's
    /// `cell_size_check`), so that a garbled page on the way is damage rather than "no
    /// such row". Costs a connection, so it is for a caller that must tell a damaged
    /// stash from an absent object (the command line's `get`), not for every miss.
    ///
    /// # Errors
    /// [`Error::Damaged`](crate::Error::Damaged) if the lookup crosses damage (what still
    /// verifies is kept by [`repair`](crate::repair)); [`Error::Corrupt`](crate::Error::Corrupt)
    /// if the object is there but damaged.
    pub fn check_absent(&self, key: &Key) -> Result<()> {
        let path = &self.shared.path;
        let conn = crate::db::readers::open_connection(
            path,
            true,
            self.shared.schema.statement_count(),
            self.shared.busy,
        )?;
        conn.pragma_update(None, "cell_size_check", true)
            .context(|| format!("checking pages of {}", path.display()))?;
        match self.read_committed(&conn, key) {
            // Found now: saved since by another handle, not hidden.
            Ok(_) => Ok(()),
            Err(e) if e.is_damage() && !matches!(e, crate::Error::Corrupt { .. }) => {
                Err(crate::Error::Damaged {
                    context: format!("reading {key}"),
                    reason: format!(
                        "the lookup crosses a damaged page ({e}), so it may be stored there"
                    ),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// This handle's pending row of `key`, if reads may serve it (see
    /// [`Stash::pending_servable`]).
    pub(super) fn pending_row(&self, key: &Key) -> Result<Option<Row>> {
        let Some(row) = self.shared.pending.get(key) else { return Ok(None) };
        let reader = self.readers.checkout()?;
        let models = self.models_in(&reader)?;
        Ok(self.pending_servable(&reader, models, key)?.then_some(row))
    }

    /// Whether the stash has models, as `conn` finds it (another handle may have made the
    /// model tables since this one opened).
    pub(super) fn models_in(&self, conn: &Connection) -> Result<bool> {
        if self.shared.models() {
            return Ok(true);
        }
        let made = crate::db::models::exist(conn)?;
        if made {
            self.shared.models_made();
        }
        Ok(made)
    }

    /// Whether a row of `key` pending in this handle may be served, as `conn`'s snapshot
    /// (taken after the row was found pending; `models`: [`Stash::models_in`] it) says:
    /// not while `key` is the root of a model that must not be read. This handle keeps such
    /// a save out of its pending map, but another handle or process may have withheld the
    /// root since (a member removed, evicted or found damaged), and the database is the one
    /// place every handle passes.
    pub(super) fn pending_servable(
        &self,
        conn: &Connection,
        models: bool,
        key: &Key,
    ) -> Result<bool> {
        Ok(!models || !crate::db::models::root_withheld(conn, key)?)
    }

    /// The committed object under `key`, decoded and checked, read on `conn`.
    fn read_committed(&self, conn: &Connection, key: &Key) -> Result<Option<Vec<u8>>> {
        self.read_decoded(conn, key)?.transpose()
    }

    /// The committed object under `key`, read on `conn` and decoded from SQLite's own copy
    /// of the row (no copy of the stored bytes): a failed read is the outer error, a damaged
    /// row the inner one.
    fn read_decoded(&self, conn: &Connection, key: &Key) -> Result<Option<Result<Vec<u8>>>> {
        let table = self.table(key);
        let select = self.select_sql(table, self.shared.first.get(), self.shared.models());
        let mut stmt = conn.prepare_cached(select).context(|| format!("reading {}", table.name))?;
        self.read_decoded_by(&mut stmt, &select.columns, table, key)
    }

    /// [`Stash::read_decoded`] with `stmt`, a statement of [`Stash::select_sql`] for
    /// `table`, the key's table, prepared.
    fn read_decoded_by(
        &self,
        stmt: &mut Statement,
        columns: &Columns,
        table: &TableSql,
        key: &Key,
    ) -> Result<Option<Result<Vec<u8>>>> {
        let used = self.shared.uses.on();
        stmt.query_row([&key.as_bytes()[..]], |r| {
            let row = columns.read(r);
            let (raw_len, last_use) = (row.raw_len()?, used.then(|| row.used()).transpose()?);
            self.note_found(&row)?;
            Ok(match row.packed_place()? {
                None => self.decode(key, raw_len, row.data()?, last_use),
                Some(place) => value_log::read_value(self.shared.values.as_ref(), key, place)
                    .and_then(|data| self.decode(key, raw_len, &data, last_use)),
            })
        })
        .optional()
        .context(|| format!("reading {key} from {}", table.name))
    }

    /// The objects stored under `keys`, in the same order, `None` for those not stored.
    ///
    /// The keys are sorted and split into one part per thread of the stash's pool; each
    /// part reads its rows in key order in one read transaction (SQLite takes its lock once
    /// per part, not per key), decompressing and checking each where SQLite holds it, while
    /// the other parts do the same. That is faster than a loop of [`Stash::get`].
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if a read fails; otherwise
    /// [`Error::Corrupt`](crate::Error::Corrupt) for the first key in `keys` whose row is
    /// damaged.
    pub fn get_many(&self, keys: &[Key]) -> Result<Vec<Option<Vec<u8>>>> {
        let found = self.get_many_uncounted(keys)?;
        self.shared.counts.read(keys.len(), found.iter().filter(|f| f.is_some()).count());
        Ok(found)
    }

    /// [`Stash::get_many`], not counted as reads.
    pub(super) fn get_many_uncounted(&self, keys: &[Key]) -> Result<Vec<Option<Vec<u8>>>> {
        let threads = self.pool.current_num_threads();
        let parts = parts::sorted_parts(keys, Key::cmp, threads, GET_MANY_MIN_PART);
        let read: Vec<Vec<(usize, Read)>> = self.pool.install(|| {
            parts.par_iter().map(|indices| self.read_part(keys, indices)).collect::<Result<_>>()
        })?;
        let found = parts::scatter(keys.len(), read.into_iter().flatten());
        #[cfg(feature = "remote")]
        let found = self.read_through_absent(keys, found)?;
        found.into_iter().collect()
    }

    /// Reads the objects `found` lacks through the remote, if the stash has one.
    #[cfg(feature = "remote")]
    fn read_through_absent(&self, keys: &[Key], mut found: Vec<Read>) -> Result<Vec<Read>> {
        if self.remote.is_none() {
            return Ok(found);
        }
        let absent: Vec<usize> =
            (0..keys.len()).filter(|&i| matches!(found[i], Ok(None))).collect();
        if !absent.is_empty() {
            let wanted: Vec<Key> = absent.iter().map(|&i| keys[i]).collect();
            for (i, value) in absent.into_iter().zip(self.read_through(&wanted)?) {
                found[i] = Ok(value);
            }
        }
        Ok(found)
    }

    /// Reads and decodes the objects of `keys[i]` for each `i` of `indices` (in key
    /// order), each to its own result: in one read transaction, each row decoded where
    /// SQLite holds it.
    fn read_part(&self, keys: &[Key], indices: &[usize]) -> Result<Vec<(usize, Read)>> {
        let part: Vec<Key> = indices.iter().map(|&i| keys[i]).collect();
        let now = uses::now();
        let pending = |row: Row| Found::Pending(Stored::pending(row, now));
        // The keys come sorted, so each table's are one run, read with one statement: a
        // statement taken from the connection's cache is found by a hash of its SQL, a few
        // hundred bytes, which cost 3% of a `get_many` (notes/experiments.md).
        let read = |conn: &Connection, keys: &[&Key]| {
            let mut found = Vec::with_capacity(keys.len());
            for run in keys.chunk_by(|a, b| std::ptr::eq(self.table(a), self.table(b))) {
                let table = self.table(run[0]);
                let [young, old] = [Generation::Young, Generation::Old]
                    .map(|first| self.select_sql(table, first, self.shared.models()));
                let prepare = |sql: &Sql| {
                    conn.prepare_cached(sql).context(|| format!("reading {}", table.name))
                };
                let mut young_stmt = prepare(young)?;
                let mut old_stmt = prepare(old)?;
                // Both statements read the same columns.
                let columns = &young.columns;
                for key in run {
                    let stmt = match self.shared.first.get() {
                        Generation::Young => &mut young_stmt,
                        Generation::Old => &mut old_stmt,
                    };
                    found.push(self.read_decoded_by(stmt, columns, table, key)?.map(Found::Read));
                }
            }
            Ok(found)
        };
        let found = self.lookup(&part, pending, read)?;
        Ok(indices
            .iter()
            .zip(part.iter().zip(found))
            .map(|(&i, (key, found))| {
                let decoded = found.map(|found| match found {
                    Found::Read(read) => read,
                    Found::Pending(row) => self.decode(key, row.raw_len, &row.data, row.used),
                });
                (i, decoded.transpose())
            })
            .collect())
    }

    /// The committed row of `key`, read on `conn`.
    pub(super) fn select_row(&self, conn: &Connection, key: &Key) -> Result<Option<Stored>> {
        let table = self.table(key);
        let select = self.select_sql(table, self.shared.first.get(), self.shared.models());
        let mut stmt = conn.prepare_cached(select).context(|| format!("reading {}", table.name))?;
        // A value in the file is read while the statement holds the snapshot that found
        // its row: compaction gives a segment back only once no snapshot points into it.
        let reads_use = self.shared.uses.on();
        let row = stmt
            .query_row([&key.as_bytes()[..]], |r| {
                let row = select.columns.read(r);
                let used = reads_use.then(|| row.used()).transpose()?;
                self.note_found(&row)?;
                let data = match row.packed_place()? {
                    None => Ok(row.data()?.to_vec()),
                    Some(place) => value_log::read_value(self.shared.values.as_ref(), key, place),
                };
                Ok((row.raw_len()?, data, used))
            })
            .optional()
            .context(|| format!("reading {key} from {}", table.name))?;
        let Some((raw_len, data, used)) = row else { return Ok(None) };
        let data = data?;
        Ok(Some(Stored { raw_len, data: Arc::new(data), used }))
    }

    /// Tells the handle's guess which generation of the key index found `row`, a row of
    /// [`Stash::select_sql`]'s statement, whose last column says so.
    fn note_found(&self, row: &RowOf) -> rusqlite::Result<()> {
        self.shared.first.found(Generation::of_column(row.found()?));
        // A read of a member of a model is a use of its model.
        if row.reads(Column::Model)
            && let Some(model) = row.model()?
        {
            self.shared.uses.record_model(model);
        }
        Ok(())
    }

    /// The statement that reads a row, asking `first` first: with its last use when this
    /// handle records uses (only a writable handle does, and its open gave every table a use
    /// column).
    /// (`models`: whether the tables have their `model` column, which this handle's reads
    /// then read too, to record a use of a member's model.)
    fn select_sql<'a>(&self, table: &'a TableSql, first: Generation, models: bool) -> &'a Sql {
        match self.shared.uses.on() {
            true if models => table.select_model(first),
            used => table.select(first, used),
        }
    }

    /// Whether an object is stored under `key` (without reading or checking it).
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if the lookup fails.
    pub fn contains(&self, key: &Key) -> Result<bool> {
        let stored = self.contains_uncounted(key)?;
        self.shared.counts.looked_up(1, usize::from(stored));
        Ok(stored)
    }

    fn contains_uncounted(&self, key: &Key) -> Result<bool> {
        if self.pending_row(key)?.is_some() {
            return Ok(true);
        }
        let mut reader = self.readers.checkout_held(&self.shared.commits)?;
        let stored = self.stored(&reader, key)?;
        if !stored && reader.reused() {
            reader.renew(&self.shared.commits)?;
            return self.stored(&reader, key);
        }
        Ok(stored)
    }

    /// The keys among `keys` that are not stored, in input order: what still has to be
    /// fetched or sent.
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if a lookup fails.
    pub fn missing(&self, keys: &[Key]) -> Result<Vec<Key>> {
        let missing = self.missing_uncounted(keys)?;
        self.shared.counts.looked_up(keys.len(), keys.len() - missing.len());
        Ok(missing)
    }

    /// [`Stash::missing`], not counted as lookups.
    pub(super) fn missing_uncounted(&self, keys: &[Key]) -> Result<Vec<Key>> {
        let found = self.lookup(
            keys,
            |_| (),
            |conn, keys| keys.iter().map(|key| Ok(self.stored(conn, key)?.then_some(()))).collect(),
        )?;
        Ok(keys.iter().zip(found).filter(|(_, found)| found.is_none()).map(|(k, _)| *k).collect())
    }

    /// Finds each of `keys`: in the pending map (taken with `pending`), else with `read` in
    /// one read transaction, which answers the keys not pending, in their order. Every key
    /// is looked up in the pending map before the transaction reads anything (see the
    /// module documentation for why).
    pub(super) fn lookup<T>(
        &self,
        keys: &[Key],
        pending: impl Fn(Row) -> T,
        read: impl FnOnce(&Connection, &[&Key]) -> Result<Vec<Option<T>>>,
    ) -> Result<Vec<Option<T>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let queued: Vec<Option<Row>> =
            keys.iter().map(|key| self.shared.pending.get(key)).collect();
        self.readers.checkout()?.in_transaction(|conn| {
            // A pending root that another handle withheld since is looked up as committed,
            // where it is not (see `pending_servable`).
            let models = queued.iter().any(Option::is_some) && self.models_in(conn)?;
            let mut found: Vec<Option<T>> = Vec::with_capacity(keys.len());
            for (key, row) in keys.iter().zip(queued) {
                found.push(match row {
                    Some(row) if self.pending_servable(conn, models, key)? => Some(pending(row)),
                    _ => None,
                });
            }
            let absent: Vec<&Key> =
                keys.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(k, _)| k).collect();
            if absent.is_empty() {
                return Ok(found);
            }
            let read = read(conn, &absent)?;
            debug_assert_eq!(read.len(), absent.len(), "an answer for each key not pending");
            let mut read = read.into_iter();
            Ok(found.into_iter().map(|found| found.or_else(|| read.next().flatten())).collect())
        })
    }

    /// Decodes a row and checks it against `key`; a row read is a use, recorded unless the
    /// row's last use, `used`, is recent (`uses.rs`). Every read of an object by key or name
    /// comes here.
    pub(super) fn decode(
        &self,
        key: &Key,
        raw_len: i64,
        data: &[u8],
        used: Option<i64>,
    ) -> Result<Vec<u8>> {
        let object = self.decode_unrecorded(key, raw_len, data)?;
        self.shared.uses.record_read(key, used);
        Ok(object)
    }

    /// [`Stash::decode`] without recording a use (a model's read records the model's).
    /// The object of a row read in a run (`read_model`, `named_objects`): its stored bytes,
    /// or its value in the file of values at `place`, which must be read inside the
    /// snapshot that found the row; decoded and checked, no use recorded.
    pub(super) fn decode_row(
        &self,
        key: &Key,
        raw_len: i64,
        data: &[u8],
        place: Option<Place>,
    ) -> Result<Vec<u8>> {
        match place {
            Some(place) => {
                let stored =
                    value_log::read_value(self.shared.values.as_ref(), key, Place::pack(place))?;
                self.decode_unrecorded(key, raw_len, &stored)
            }
            None => self.decode_unrecorded(key, raw_len, data),
        }
    }

    pub(super) fn decode_unrecorded(
        &self,
        key: &Key,
        raw_len: i64,
        data: &[u8],
    ) -> Result<Vec<u8>> {
        let decoded = if manifest::is_manifest(data) {
            self.assemble_chunks(key, raw_len, data)
        } else {
            codec::decode_checked(key, raw_len, data, &self.dicts)
        };
        if let Err(crate::Error::Corrupt { .. }) = &decoded {
            self.found_damaged(key);
        }
        decoded
    }
}
