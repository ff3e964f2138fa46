//! One write transaction of the writer: the rows, names, removes and pins it applies, and
//! what it wrote so far.
//!
//! Saves are gathered into a run and inserted sorted by key, which keeps the key index's
//! page accesses local; names that arrive in the run are inserted after its rows, since
//! they may name them. An operation that must come after the saves sent before it writes
//! the run first. The totals the transaction changes, and the keys it has written or
//! found (a name for one of them needs no check that its object exists), are kept in
//! [`Written`] until the commit.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};

use super::Shared;
use super::stop::{Stop, StopContext};
use crate::cache::counts::Snapshot;
use crate::cache::uses;
use crate::db::key_filter::{KeyFilter, Lookup};
use crate::db::meta::Delta;
use crate::db::names::{self, NameForm, NameSql};
use crate::db::row::{MEMBER, PINNED};
use crate::db::schema::{Adder, Insert, TableSql};
use crate::key::Key;
use crate::large::chunks;
use crate::large::manifest;
use crate::values::value_space::{self, Appender};
use crate::writer::model_memory::{Held, ModelChanges, Models};
use crate::writer::pending::Row;
use crate::writer::pending_names::NameRow;

/// Rows of at least this many stored bytes are written through blob I/O (see
/// [`Tx::insert_large`]); in a stash whose values are in a file they keep their value in
/// the row, as every value of [`value_space::FILE_MAX`] bytes or more does.
const LARGE_ROW: usize = 1 << 20;
const _: () = assert!(value_space::FILE_MAX <= LARGE_ROW);

/// What a transaction has written so far, kept between the writes of one batch.
#[derive(Default)]
pub(crate) struct Written {
    /// Changes to the running totals, added to them before the commit.
    pub totals: Delta,
    /// Keys whose rows this transaction has written or found. A remove takes its keys out.
    present: HashSet<Key>,
    /// The run: rows and names not yet written.
    rows: Vec<Row>,
    names: Vec<NameRow>,
    /// Where this transaction appends to the file of values, once it has (`value_space.rs`);
    /// recorded before the commit.
    pub values: Option<Appender>,
    /// What it changed of models, for the writer's memory once it commits.
    pub models: ModelChanges,
    /// The handle's counts when a reset of the counters in this transaction zeroed them:
    /// what was counted before is not added (`writer/counting.rs`).
    pub counted_from: Option<Snapshot>,
}

impl Written {
    /// Saves and names waiting in the run.
    pub(crate) fn queued(&self) -> usize {
        self.rows.len() + self.names.len()
    }
}

/// A transaction being written: its connection, the stash's shared state, what it wrote.
pub(crate) struct Tx<'a> {
    pub conn: &'a Connection,
    pub shared: &'a Shared,
    pub written: &'a mut Written,
    /// The writer's filter of stored key prefixes, when it has one (`key_filter.rs`).
    pub filter: Option<&'a mut KeyFilter>,
    /// The writer's memory of models (`writer/models.rs`).
    pub models: &'a mut Models,
}

impl Tx<'_> {
    /// Adds a save to the run.
    pub(crate) fn queue_row(&mut self, row: Row) {
        self.written.rows.push(row);
    }

    /// Adds names to the run, with the pending rows of their objects (stored first).
    pub(crate) fn queue_names(&mut self, names: &[NameRow]) {
        self.written.rows.extend(names.iter().filter_map(|name| name.row.clone()));
        self.written.names.extend_from_slice(names);
    }

    /// Writes the run: its rows, then its names, which may name those rows.
    pub(crate) fn write_run(&mut self) -> Result<(), Stop> {
        let mut rows = std::mem::take(&mut self.written.rows);
        self.insert(&mut rows)?;
        let mut names = std::mem::take(&mut self.written.names);
        if !names.is_empty() {
            self.insert_names(&mut names)?;
        }
        Ok(())
    }

    /// Whether the stash has a names table (another process may have made it). The shared
    /// flag is only set after a commit: this connection sees its own uncommitted table,
    /// readers do not.
    pub(crate) fn names_table(&self) -> Result<bool, Stop> {
        Ok(self.shared.names.table_known() || names::table_exists(self.conn)?)
    }

    /// Which key indexes a lookup of `key` before its insert reads: those the writer's
    /// filter says can hold it.
    pub(crate) fn lookup(&self, key: &Key) -> Lookup {
        self.filter.as_deref().map_or(Lookup::BOTH, |filter| filter.lookup(key))
    }

    /// Tells the writer's filter of a key `TableSql::add` inserted (`added` is its answer).
    pub(crate) fn note_added(&mut self, key: &Key, added: usize) {
        if added == 1
            && let Some(filter) = self.filter.as_deref_mut()
        {
            filter.insert(&key.as_bytes()[..8]);
        }
    }

    /// Inserts rows in key order; a row already stored counts as a use of it. In a stash
    /// whose values are in a file, the values of the rows added are appended to it, at the
    /// position the transaction found recorded (`value_space.rs`).
    fn insert(&mut self, rows: &mut [Row]) -> Result<(), Stop> {
        rows.sort_unstable_by_key(|row| row.key);
        let now = uses::now();
        if self.shared.values.is_some() && self.written.values.is_none() {
            self.written.values = Some(Appender::begin(self.conn)?);
        }
        let mut assembled: Vec<(i64, u16, i64)> = Vec::new();
        // Rows saved into an assembly given up meanwhile (or reclaimed) are saved loose.
        let mut live: HashMap<i64, bool> = HashMap::new();
        for row in rows.iter() {
            if let Some(id) = row.model
                && self.models_on()
                && !live.contains_key(&id)
            {
                live.insert(id, self.assembling(id)?);
            }
        }
        // The inserts of the table of the rows at hand (sorted by key, a table's rows come
        // together), their statements kept from one row to the next.
        let (conn, shared) = (self.conn, self.shared);
        let mut current: Option<(&TableSql, Adder)> = None;
        for row in rows.iter() {
            let table = shared.schema.table(&row.key);
            let what = || format!("inserting {} into {}", row.key, table.name);
            if self.kept_root(&row.key, row.raw_len as i64, &row.data)? {
                // The root of a model that must not be read: kept with its model.
                self.written.present.insert(row.key);
                continue;
            }
            let tagged = row.model.filter(|id| live.get(id) == Some(&true));
            let used = if tagged.is_some() { MEMBER } else { now };
            let reserve = row.data.len() >= LARGE_ROW;
            let in_file =
                row.data.len() < value_space::FILE_MAX && !manifest::is_manifest(&row.data);
            let place = match &mut self.written.values {
                Some(appender) if in_file => Some(appender.place(self.conn, &row.data)?),
                _ => None,
            };
            let value: &[u8] = if place.is_some() { &[] } else { &row.data };
            let how = Insert { reserve, lookup: self.lookup(&row.key), place, model: tagged };
            if !current.as_ref().is_some_and(|(t, _)| std::ptr::eq(*t, table)) {
                current = Some((table, table.adder(conn)));
            }
            let adder = &mut current.as_mut().expect("the adder of this row's table").1;
            let added = if reserve {
                Self::insert_large(conn, adder, row, used, how)
            } else {
                adder.add(&row.key, row.raw_len as i64, value, used, how)
            }
            .stop(what)?;
            self.note_added(&row.key, added);
            if added == 1 {
                let rowid = self.conn.last_insert_rowid();
                let totals = &mut self.written.totals;
                totals.objects += 1;
                totals.raw_bytes += row.raw_len as i64;
                totals.stored_bytes += row.data.len() as i64;
                if let Some(assembly) = tagged {
                    let index = self.shared.schema.layout.table_of(&row.key) as u16;
                    assembled.push((assembly, index, rowid));
                    let held = Held { table: index, rowid, stored: row.data.len() as i64 };
                    self.written.models.held.push((assembly, row.key, held));
                }
                self.stored_member(&row.key, rowid, row.data.len() as i64, tagged)?;
            } else {
                if let (Some(appender), Some(place)) = (&mut self.written.values, place) {
                    appender.unplace(place);
                }
                self.shared.uses.record(&row.key);
                self.shared.counts.saved_already();
            }
            self.written.present.insert(row.key);
        }
        if let (Some(log), Some(appender)) = (&self.shared.values, &mut self.written.values) {
            appender.write(log)?;
        }
        self.assembled(assembled)
    }

    /// Inserts a large row without handing SQLite a copy of its value: the row is inserted
    /// with a zeroed value of the right length, which is then written through blob I/O.
    /// Binding the value would make SQLite copy it first, a third copy of a large object in
    /// memory beside the caller's bytes and the compressed row.
    fn insert_large(
        conn: &Connection,
        adder: &mut Adder,
        row: &Row,
        now: i64,
        how: Insert,
    ) -> rusqlite::Result<usize> {
        let added = adder.add(&row.key, row.raw_len as i64, &row.data, now, how)?;
        if added == 1 {
            let rowid = conn.last_insert_rowid();
            let table = adder.table_name();
            let mut blob = conn.blob_open(rusqlite::MAIN_DB, table, "data", rowid, false)?;
            blob.write_all(&row.data)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        }
        Ok(added)
    }

    /// Inserts names in name order, each only if its object is stored (it may have been
    /// removed, by another process too, since the name was saved).
    fn insert_names(&mut self, run: &mut [NameRow]) -> Result<(), Stop> {
        if !self.names_table()? {
            // Readers learn of the table once it is committed (see `Writer::commit`).
            let by_key = self.shared.schema.removals_indexed(self.conn)?;
            names::create(self.conn, by_key)?;
        }
        // Read in the transaction, not cached: the table may be this transaction's.
        let form = NameForm::read(self.conn)?;
        let schema = &self.shared.schema;
        // By table, then name: one statement per table, and names in B-tree order.
        run.sort_by_cached_key(|row| (schema.layout.table_of(&row.key), Arc::clone(&row.name)));
        let prepare = |sql: &str| self.conn.prepare_cached(sql).stop(|| "preparing a name".into());
        let mut known = prepare(NameSql::INSERT_KNOWN)?;
        let mut current: Option<(usize, rusqlite::CachedStatement<'_>)> = None;
        for row in run.iter() {
            let index = schema.layout.table_of(&row.key);
            let table = &schema.tables[index];
            let key = &row.key.as_bytes()[..];
            let name = form.store(&row.name);
            let what = || format!("naming {}", row.key);
            let is_present = self.written.present.contains(&row.key);
            let added = if is_present {
                known.execute(params![&name[..], key]).stop(what)?
            } else {
                if current.as_ref().is_none_or(|(i, _)| *i != index) {
                    current = Some((index, prepare(&table.name_insert)?));
                }
                let (_, insert) = current.as_mut().expect("prepared above");
                insert.execute(params![&name[..], key]).stop(what)?
            };
            if added == 0 && !is_present && self.models_on() && self.shared.withheld(&row.key) {
                // The root of a model that must not be read yet, kept with its model: its
                // name waits with it.
                let added = known.execute(params![&name[..], key]).stop(what)?;
                self.written.totals.names += added as i64;
                continue;
            }
            if added == 1 {
                self.written.totals.names += 1;
                continue;
            }
            // Saved before (perhaps under another key), or its object is gone.
            let sql = if is_present { NameSql::REPOINT_KNOWN } else { &table.name_repoint };
            prepare(sql)?.execute(params![&name[..], key]).stop(what)?;
        }
        Ok(())
    }

    /// Deletes a name, stored in `form`; whether it was there.
    pub(crate) fn unname(&mut self, name: &[u8], form: NameForm) -> Result<bool, Stop> {
        let name = form.store(name);
        let mut stmt =
            self.conn.prepare_cached(NameSql::DELETE).stop(|| "preparing a name delete".into())?;
        let gone = stmt.execute([&name[..]]).stop(|| "removing a name".into())?;
        self.written.totals.names -= gone as i64;
        Ok(gone > 0)
    }

    /// Deletes an object and, if the stash has names, its names; whether it was stored.
    pub(crate) fn delete(&mut self, key: &Key, names: bool) -> Result<bool, Stop> {
        self.written.present.remove(key);
        let table = self.shared.schema.table(key);
        let what = || format!("removing {key} from {}", table.name);
        let delete = if self.models_on() { &table.models.delete } else { &table.delete };
        let mut stmt = self.conn.prepare_cached(delete).stop(|| "preparing a delete".into())?;
        let mut rows = stmt.query([&key.as_bytes()[..]]).stop(what)?;
        let mut removed = false;
        let mut manifest = None;
        let mut rowid = None;
        let mut place = None;
        let mut home = None;
        let mut stored_len = 0;
        while let Some(row) = rows.next().stop(what)? {
            let row = delete.columns.read(row);
            if self.models.on {
                home = row.model().stop(what)?;
            }
            let (raw, stored, used) =
                (row.raw_len().stop(what)?, row.stored_len().stop(what)?, row.used().stop(what)?);
            manifest = row.manifest().stop(what)?.map(|m| (raw, m));
            rowid = Some(row.rowid().stop(what)?);
            place = row.place().stop(what)?;
            stored_len = stored;
            let totals = &mut self.written.totals;
            totals.objects -= 1;
            totals.raw_bytes -= raw;
            totals.stored_bytes -= stored;
            if used == PINNED {
                totals.pinned -= 1;
                totals.pinned_bytes -= stored;
            }
            removed = true;
        }
        drop(rows);
        if let Some(place) = place {
            value_space::free(self.conn, place).stop(what)?;
        }
        if let Some(rowid) = rowid {
            table.unindex(self.conn, key, rowid).stop(what)?;
            if self.shared.schema.uses_apart {
                self.conn
                    .prepare_cached(&table.apart.forget)
                    .and_then(|mut stmt| stmt.execute([rowid]))
                    .stop(what)?;
            }
        }
        if let Some((raw, manifest)) = manifest {
            chunks::release_stored(self.conn, key, raw, &manifest, &mut self.written.totals)
                .stop(|| format!("releasing the chunks of {key}"))?;
        }
        if let (Some(home), Some(rowid)) = (home, rowid) {
            self.lost_member(key, rowid, Some(home), stored_len)?;
        }
        if removed && names {
            let mut stmt = self
                .conn
                .prepare_cached(NameSql::DELETE_BY_KEY)
                .stop(|| "preparing a name delete".into())?;
            let gone = stmt
                .execute([&key.as_bytes()[..]])
                .stop(|| format!("removing the names of {key}"))?;
            self.written.totals.names -= gone as i64;
        }
        Ok(removed)
    }

    /// Pins an object; whether it is stored (and so pinned now).
    pub(crate) fn pin(&mut self, key: &Key) -> Result<bool, Stop> {
        let table = self.shared.schema.table(key);
        let what = || format!("pinning {key}");
        let mut stmt = self.conn.prepare_cached(&table.pin).stop(what)?;
        let stored = stmt
            .query_row([&key.as_bytes()[..]], |r| table.pin.columns.read(r).stored_len())
            .optional()
            .stop(what)?;
        if let Some(bytes) = stored {
            self.written.totals.pinned += 1;
            self.written.totals.pinned_bytes += bytes;
            return Ok(true);
        }
        // Not stored, or pinned already.
        let mut stmt = self.conn.prepare_cached(&table.exists).stop(what)?;
        stmt.exists([&key.as_bytes()[..]]).stop(what)
    }

    /// Unpins an object, which counts as a use now; whether it was pinned.
    pub(crate) fn unpin(&mut self, key: &Key) -> Result<bool, Stop> {
        let table = self.shared.schema.table(key);
        let what = || format!("unpinning {key}");
        let unpin = if self.models_on() { &table.models.unpin } else { &table.unpin };
        let mut stmt = self.conn.prepare_cached(unpin).stop(what)?;
        let pinned = stmt
            .query_row(params![&key.as_bytes()[..], uses::now()], |r| {
                unpin.columns.read(r).stored_len()
            })
            .optional()
            .stop(what)?;
        if let Some(bytes) = pinned {
            self.written.totals.pinned -= 1;
            self.written.totals.pinned_bytes -= bytes;
        }
        Ok(pinned.is_some())
    }
}

/// Writes the uses recorded in memory into the open transaction on `conn`, in key order:
/// into the narrow tables of uses if `apart` (`use_table.rs`), else into the rows.
/// Uses are a hint for eviction, not data: one that cannot be written (a damaged index
/// that the next open will rebuild) is logged and dropped, never a reason to stop writing.
pub(crate) fn write_uses(conn: &Connection, shared: &Shared, apart: bool) {
    for (model, used) in shared.uses.take_models() {
        if let Err(e) = crate::db::models::touch(conn, model, used) {
            log::warn!("objstash: the use of a model could not be recorded: {e}");
        }
    }
    for (key, used) in shared.uses.take(apart) {
        let table = shared.schema.table(&key);
        let sql = if apart { &table.apart.record } else { &table.touch };
        let written = conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(params![&key.as_bytes()[..], used]));
        if let Err(e) = written {
            log::warn!("objstash: the uses of objects could not be recorded: {e}");
            shared.uses.take(apart);
            break;
        }
    }
}
