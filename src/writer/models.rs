//! The writer's side of models (`db/models.rs`): a declaration lists a model's members, an
//! assembly holds objects for a model whose root has not come yet, an insert of a member a
//! model misses completes it, a delete of a member makes its models incomplete, and a root
//! that must not be read is kept with its model instead of in the object table. Each
//! happens inside the transaction that changes the rows, so that every snapshot keeps the
//! invariant of `db/models.rs`.
//!
//! A model counts as `missing` every member (its root included) that is neither in the
//! object table nor, for the root, kept with the model: it is complete, and its root in
//! the object table, exactly when none is missing.
//!
//! The writer's memory of models is a hint that the database settles: the keys some model
//! misses (an insert of one asks `objstash_model_missing`). The roots that must not be
//! read are in `Shared`, where producers look before a save shows in the pending map.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, params};

use super::model_memory::Held;
use super::op::Request;
use super::stop::{Stop, StopContext};
use super::tx::Tx;
use crate::cache::evict::EVICT_ROWS;
use crate::cache::uses;
use crate::db::models::{self, HiddenRoot, ModelRow, State};
use crate::db::row::{MEMBER, PINNED, Place};
use crate::db::runs::Runs;
use crate::db::schema::Insert;
use crate::key::Key;
use crate::large::chunks;
use crate::report::stats::Evicted;
use crate::values::value_space;

/// What a declaration found: the model's members and how many are not stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Declared {
    pub objects: u64,
    pub missing: u64,
}

/// A row found by key.
pub(super) struct Found {
    pub rowid: i64,
    /// Its home model.
    pub model: Option<i64>,
    pub stored_len: i64,
}

impl Tx<'_> {
    /// Whether the stash has models.
    pub(crate) fn models_on(&self) -> bool {
        self.models.on
    }

    /// Whether `id` is an assembly under way (not given up, reclaimed or finished).
    pub(crate) fn assembling(&self, id: i64) -> Result<bool, Stop> {
        Ok(models::by_id(self.conn, id)?.is_some_and(|m| m.state == State::Assembling))
    }

    /// The index of `key`'s table in the layout.
    fn table_of(&self, key: &Key) -> u16 {
        self.shared.schema.layout.table_of(key) as u16
    }

    /// The row of `key`, if stored.
    pub(super) fn find(&self, key: &Key) -> Result<Option<Found>, Stop> {
        let table = self.shared.schema.table(key);
        let sql = &table.models.find;
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_row([&key.as_bytes()[..]], |r| {
                    let row = sql.columns.read(r);
                    Ok(Found {
                        rowid: row.rowid()?,
                        model: row.model()?,
                        stored_len: row.stored_len()?,
                    })
                })
                .optional()
            })
            .stop(|| format!("looking {key} up in {}", table.name))
    }

    /// Whether the root of `model` is stored and pinned.
    fn root_pinned(&self, model: &ModelRow) -> Result<bool, Stop> {
        let Some(root) = &model.root else { return Ok(false) };
        let Some(found) = self.find(root)? else { return Ok(false) };
        let table = self.shared.schema.layout.table_of(root) as u16;
        Ok(self.row_at(table, found.rowid)?.is_some_and(|(_, used, _)| used == PINNED))
    }

    /// The key and last use of row `rowid` of table `table`, with its home model.
    fn row_at(&self, table: u16, rowid: i64) -> Result<Option<(Key, i64, Option<i64>)>, Stop> {
        let table = &self.shared.schema.tables[usize::from(table)];
        let sql = &table.models.by_rowid;
        let row = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_row([rowid], |r| {
                    let row = sql.columns.read(r);
                    Ok((row.key()?, row.used()?, row.model()?))
                })
                .optional()
            })
            .stop(|| format!("reading row {rowid} of {}", table.name))?;
        Ok(row.and_then(|(key, used, model)| Some((key?, used, model))))
    }

    /// Gives the stash its model tables, the object tables their `model` column and the
    /// format its version, unless it has them.
    fn ensure_models(&mut self) -> Result<(), Stop> {
        if !self.models.on {
            models::ensure(self.conn)?;
            self.shared.schema.add_model_columns(self.conn)?;
            self.models.on = true;
        }
        Ok(())
    }

    /// Before a row of `key` is inserted: whether it must not go into the object table,
    /// being the root of a model that is incomplete or being evicted. Such a save is kept
    /// with its model, or completes it.
    pub(crate) fn kept_root(&mut self, key: &Key, raw_len: i64, data: &[u8]) -> Result<bool, Stop> {
        if !self.models.on || !self.shared.withheld(key) {
            return Ok(false);
        }
        let Some(mut model) = models::by_root(self.conn, key)? else { return Ok(false) };
        if !matches!(model.state, State::Incomplete | State::Evicting) {
            return Ok(false);
        }
        let kept = models::hidden_root(self.conn, model.id, false)?.is_some();
        if model.state == State::Incomplete && !kept && model.missing == 1 {
            // The root was all the model missed: it goes into the object table as its
            // member, and the model is complete.
            return Ok(false);
        }
        if !kept {
            models::hide_root(
                self.conn,
                model.id,
                &HiddenRoot { raw_len, data: data.to_vec(), place: None },
            )?;
            if model.state == State::Incomplete {
                models::missing_in(self.conn, key, true)?;
                model.missing = model.missing.saturating_sub(1);
                models::update(self.conn, &model)?;
            }
        }
        Ok(true)
    }

    /// After `key` was inserted at `rowid` (into model `home`, if tagged): records it in
    /// the models that miss it, which may complete them.
    pub(crate) fn stored_member(
        &mut self,
        key: &Key,
        rowid: i64,
        stored_len: i64,
        home: Option<i64>,
    ) -> Result<(), Stop> {
        if !self.models.on || !self.models.missing.contains(key) {
            return Ok(());
        }
        self.found_member(key, rowid, stored_len, home)
    }

    /// Records `key`, stored at `rowid`, in every model that misses it (the first becomes
    /// its home, unless it has one): a model that then misses nothing is complete, and its
    /// root, put back, may complete the models that list it in turn.
    fn found_member(
        &mut self,
        key: &Key,
        rowid: i64,
        stored_len: i64,
        home: Option<i64>,
    ) -> Result<(), Stop> {
        let table = self.table_of(key);
        let mut home = home;
        for id in models::missing_in(self.conn, key, true)? {
            let Some(mut model) = models::by_id(self.conn, id)? else { continue };
            if home.is_none() {
                self.tag(key, rowid, id)?;
                home = Some(id);
            }
            model.runs.insert(table, rowid);
            model.missing = model.missing.saturating_sub(1);
            model.bytes += stored_len.max(0) as u64;
            models::update(self.conn, &model)?;
            if model.state != State::Incomplete {
                continue;
            }
            if model.missing == 0 {
                self.complete(id)?;
            } else {
                self.complete_circle(id)?;
            }
        }
        Ok(())
    }
    /// Adds the rows inserted into assemblies, `(assembly, table, rowid)`, to their runs.
    pub(crate) fn assembled(&mut self, mut rows: Vec<(i64, u16, i64)>) -> Result<(), Stop> {
        rows.sort_unstable();
        for group in rows.chunk_by(|a, b| a.0 == b.0) {
            let Some(mut model) = models::by_id(self.conn, group[0].0)? else { continue };
            for &(_, table, rowid) in group {
                model.runs.insert(table, rowid);
            }
            models::update(self.conn, &model)?;
        }
        Ok(())
    }

    /// Makes the loose row of `key` at `rowid` a member of model `id`.
    fn tag(&self, key: &Key, rowid: i64, id: i64) -> Result<(), Stop> {
        let sql = &self.shared.schema.table(key).models.tag;
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(params![rowid, id]))
            .stop(|| format!("making {key} a member of model {id}"))?;
        Ok(())
    }

    /// Model `id`, which misses nothing now: its root, if kept with it, goes back into the
    /// object table, where the models that list it find it.
    fn complete(&mut self, id: i64) -> Result<(), Stop> {
        let Some(mut model) = models::by_id(self.conn, id)? else { return Ok(()) };
        model.state = State::Complete;
        models::update(self.conn, &model)?;
        let Some(root) = model.root else { return Ok(()) };
        self.written.models.readable.push(root);
        if let Some(hidden) = models::hidden_root(self.conn, id, true)? {
            self.restore_root(&mut model, &hidden)?;
        }
        Ok(())
    }

    /// Puts the root kept with `model` back into the object table as its member, and
    /// records it in the models that list it.
    fn restore_root(&mut self, model: &mut ModelRow, hidden: &HiddenRoot) -> Result<(), Stop> {
        let Some(root) = model.root else { return Ok(()) };
        let Some(rowid) = self.put_root(&root, hidden, Some(model.id))? else { return Ok(()) };
        model.runs.insert(self.table_of(&root), rowid);
        models::update(self.conn, model)?;
        let stored = hidden.place.and_then(Place::unpack).map_or(hidden.data.len(), |p| p.len);
        self.found_member(&root, rowid, stored as i64, Some(model.id))
    }

    /// Models that list each other's roots and miss nothing else (a circle: each one's
    /// root is kept aside because another is incomplete) are complete together. Starting
    /// from model `id`, which misses something: finds the largest set of incomplete models,
    /// each with its root kept aside, that miss only each other's roots, and completes
    /// them if `id` is one.
    fn complete_circle(&mut self, id: i64) -> Result<(), Stop> {
        // A model can miss only roots that this handle withholds for such a set to exist.
        let Some(start) = models::by_id(self.conn, id)? else { return Ok(()) };
        if start.missing as usize > self.shared.withheld_count() {
            return Ok(());
        }
        let mut circle: std::collections::HashMap<i64, (ModelRow, Vec<Key>)> = Default::default();
        let mut roots: std::collections::HashMap<Key, i64> = Default::default();
        let mut next = vec![start];
        while let Some(model) = next.pop() {
            if circle.contains_key(&model.id) {
                continue;
            }
            let Some(root) = model.root else { continue };
            if model.state != State::Incomplete
                || models::hidden_root(self.conn, model.id, false)?.is_none()
            {
                continue;
            }
            let missing = models::missing_keys(self.conn, model.id)?;
            for key in &missing {
                if let Some(other) = models::by_root(self.conn, key)?
                    && !circle.contains_key(&other.id)
                {
                    next.push(other);
                }
            }
            roots.insert(root, model.id);
            circle.insert(model.id, (model, missing));
        }
        // Whatever misses a key that is not a root of the set cannot complete with it.
        loop {
            let out: Vec<i64> = circle
                .iter()
                .filter(|(_, (_, missing))| missing.iter().any(|k| !roots.contains_key(k)))
                .map(|(id, _)| *id)
                .collect();
            if out.is_empty() {
                break;
            }
            for gone in out {
                if let Some((model, _)) = circle.remove(&gone)
                    && let Some(root) = model.root
                {
                    roots.remove(&root);
                }
            }
        }
        if !circle.contains_key(&id) {
            return Ok(());
        }
        // Every root of the set goes back; the models that list one find it there, and the
        // set's models, missing nothing then, are complete.
        let mut put = Vec::new();
        for (id, (mut model, _)) in circle {
            model.state = State::Complete;
            model.missing = 0;
            models::update(self.conn, &model)?;
            if let Some(root) = model.root {
                self.written.models.readable.push(root);
            }
            if let Some(hidden) = models::hidden_root(self.conn, id, true)? {
                put.push((id, hidden));
            }
        }
        for (id, hidden) in put {
            // Missing nothing, the set's models take what they listed without a count.
            let Some(mut model) = models::by_id(self.conn, id)? else { continue };
            self.restore_root(&mut model, &hidden)?;
        }
        Ok(())
    }

    /// Inserts a root kept apart back into the object table (a member of `model`, or
    /// loose); its rowid if it was not there.
    fn put_root(
        &mut self,
        root: &Key,
        hidden: &HiddenRoot,
        model: Option<i64>,
    ) -> Result<Option<i64>, Stop> {
        let table = self.shared.schema.table(root);
        let place = hidden.place.and_then(Place::unpack);
        let how = Insert { lookup: self.lookup(root), place, model, ..Insert::VALUE };
        let used = if model.is_some() { MEMBER } else { uses::now() };
        let added = table
            .add(self.conn, root, hidden.raw_len, &hidden.data, used, how)
            .stop(|| format!("putting the root {root} back"))?;
        self.note_added(root, added);
        if added == 0 {
            return Ok(None);
        }
        let totals = &mut self.written.totals;
        totals.objects += 1;
        totals.raw_bytes += hidden.raw_len;
        totals.stored_bytes += place.map_or(hidden.data.len(), |p| p.len) as i64;
        Ok(Some(self.conn.last_insert_rowid()))
    }

    /// Keeps a model's root out of the object table: its row moves into the model's row,
    /// and producers keep the root out of the pending map from now on. `model` (incomplete
    /// or being evicted) is written; the models that list its root lose it, and `model`
    /// is read back, as they may have changed it.
    fn hide(&mut self, model: &mut ModelRow) -> Result<(), Stop> {
        let Some(root) = model.root else { return Ok(()) };
        self.shared.withhold(root);
        let Some(found) = self.find(&root)? else { return Ok(()) };
        let table = self.shared.schema.table(&root);
        let sql = &table.models.by_rowid;
        let (raw_len, data, place) = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_row([found.rowid], |r| {
                    let row = sql.columns.read(r);
                    Ok((row.raw_len()?, row.data()?.to_vec(), row.packed_place()?))
                })
            })
            .stop(|| format!("reading the root {root}"))?;
        models::hide_root(self.conn, model.id, &HiddenRoot { raw_len, data, place })?;
        // The row goes; its value, chunks and names stay with the kept root.
        self.take(&root, found.rowid, true)?;
        model.runs.remove(self.table_of(&root), found.rowid);
        self.unlisted(model, &root, found.rowid, found.stored_len)
    }

    /// After the row of `root`, `model`'s root, left the object table: writes `model`, and
    /// every other model that lists the row misses it now; `model` is read back.
    fn unlisted(
        &mut self,
        model: &mut ModelRow,
        root: &Key,
        rowid: i64,
        stored: i64,
    ) -> Result<(), Stop> {
        models::update(self.conn, model)?;
        self.lost_member(root, rowid, None, stored)?;
        if let Some(now) = models::by_id(self.conn, model.id)? {
            *model = now;
        }
        Ok(())
    }

    /// Deletes the row of `key` at `rowid` with what hangs on it (its key index entry, its
    /// chunks; unless `kept`, its names and its value in the file of values), counting it
    /// out of the totals; its stored bytes, or `None` if it was gone. A root kept with its
    /// model (`kept`) keeps its names and its value.
    fn take(&mut self, key: &Key, rowid: i64, kept: bool) -> Result<Option<i64>, Stop> {
        let table = self.shared.schema.table(key);
        let what = || format!("removing {key} from {}", table.name);
        let sql = &table.models.take;
        let taken = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_row([rowid], |r| {
                    let row = sql.columns.read(r);
                    Ok((
                        row.raw_len()?,
                        row.stored_len()?,
                        row.used()?,
                        row.manifest()?,
                        row.place()?,
                    ))
                })
                .optional()
            })
            .stop(what)?;
        let Some((raw, stored, used, manifest, place)) = taken else { return Ok(None) };
        table.unindex(self.conn, key, rowid).stop(what)?;
        if self.shared.schema.uses_apart {
            self.conn
                .prepare_cached(&table.apart.forget)
                .and_then(|mut stmt| stmt.execute([rowid]))
                .stop(what)?;
        }
        if !kept && let Some(place) = place {
            value_space::free(self.conn, place).stop(what)?;
        }
        let totals = &mut self.written.totals;
        totals.objects -= 1;
        totals.raw_bytes -= raw;
        totals.stored_bytes -= stored;
        if used == PINNED {
            totals.pinned -= 1;
            totals.pinned_bytes -= stored;
        }
        if let Some(manifest) = manifest.filter(|_| !kept) {
            chunks::release_stored(self.conn, key, raw, &manifest, &mut self.written.totals)
                .stop(|| format!("releasing the chunks of {key}"))?;
        }
        if !kept && self.names_table()? {
            let gone = self
                .conn
                .prepare_cached(crate::db::names::NameSql::DELETE_BY_KEY)
                .and_then(|mut stmt| stmt.execute([&key.as_bytes()[..]]))
                .stop(|| format!("removing the names of {key}"))?;
            self.written.totals.names -= gone as i64;
        }
        Ok(Some(stored))
    }

    /// After the row of `key` at `rowid`, whose home model was `home`, was deleted: every
    /// model that listed it misses it now and keeps its root out of the object table, which
    /// the models that list that root miss in turn.
    pub(crate) fn lost_member(
        &mut self,
        key: &Key,
        rowid: i64,
        home: Option<i64>,
        stored: i64,
    ) -> Result<(), Stop> {
        let table = self.table_of(key);
        for held in self.models.assembled.values_mut() {
            held.remove(key);
        }
        // Read one by one: hiding a root changes the models that list it.
        let listing: Vec<i64> = models::all(self.conn)?
            .into_iter()
            .filter(|m| m.runs.contains(table, rowid) || Some(m.id) == home)
            .map(|m| m.id)
            .collect();
        for id in listing {
            let Some(mut model) = models::by_id(self.conn, id)? else { continue };
            if !model.runs.remove(table, rowid) && Some(model.id) != home {
                continue;
            }
            match model.state {
                State::Assembling | State::Evicting => {}
                State::Complete | State::Incomplete => {
                    models::add_missing(self.conn, model.id, key)?;
                    self.written.models.missing.push(*key);
                    model.missing += 1;
                    model.bytes = model.bytes.saturating_sub(stored.max(0) as u64);
                    if model.state == State::Complete {
                        model.state = State::Incomplete;
                        if model.root == Some(*key) {
                            self.shared.withhold(*key);
                        } else {
                            self.hide(&mut model)?;
                        }
                    }
                }
            }
            models::update(self.conn, &model)?;
        }
        Ok(())
    }

    /// Makes the row at `rowid` of table `table` loose again if its home is `model`,
    /// unless another model of `all` (the models as the caller read them) lists it, which
    /// becomes its home.
    fn untag(
        &mut self,
        table: u16,
        rowid: i64,
        model: i64,
        now: i64,
        all: &[ModelRow],
    ) -> Result<(), Stop> {
        let Some((_, _, home)) = self.row_at(table, rowid)? else { return Ok(()) };
        if home != Some(model) {
            return Ok(());
        }
        let other =
            all.iter().find(|m| m.id != model && m.runs.contains(table, rowid)).map(|m| m.id);
        let sql_table = &self.shared.schema.tables[usize::from(table)];
        let (sql, value) = match other {
            Some(other) => (&sql_table.models.rehome, other),
            None => (&sql_table.models.untag, now),
        };
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(params![rowid, value]))
            .stop(|| format!("letting row {rowid} of {} go", sql_table.name))?;
        Ok(())
    }

    /// Ends a model and keeps its objects: each row whose home it is goes to another model
    /// that lists it, or back to being loose; a root kept with it goes back into the object
    /// table.
    fn release(&mut self, model: ModelRow) -> Result<(), Stop> {
        let now = uses::now();
        let all = models::all(self.conn)?;
        for (table, rowid) in model.runs.rows() {
            self.untag(table, rowid, model.id, now, &all)?;
        }
        if let Some(root) = model.root {
            if let Some(hidden) = models::hidden_root(self.conn, model.id, true)? {
                self.put_root(&root, &hidden, None)?;
            }
            self.written.models.readable.push(root);
        }
        models::delete(self.conn, model.id)?;
        Ok(())
    }

    /// Declares `root` a model of `members` (the root need not be listed), taking over the
    /// assembly `assembly` if given and replacing an earlier declaration of `root`.
    pub(crate) fn declare(
        &mut self,
        root: &Key,
        members: &[Key],
        name: Option<Vec<u8>>,
        assembly: Option<i64>,
    ) -> Result<Declared, Stop> {
        self.write_run()?;
        self.ensure_models()?;
        let now = uses::now();
        if let Some(earlier) = models::by_root(self.conn, root)?
            && Some(earlier.id) != assembly
        {
            self.release(earlier)?;
        }
        // An assembly given up meanwhile (or reclaimed) held nothing: a new model is made.
        let existing = match assembly {
            Some(id) => models::by_id(self.conn, id)?.filter(|m| m.state == State::Assembling),
            None => None,
        };
        let mut model = match existing {
            Some(model) => model,
            None => {
                let id = models::insert(self.conn, None, State::Assembling, now)?;
                models::by_id(self.conn, id)?.expect("inserted above")
            }
        };
        let id = model.id;
        models::forget_owner(self.conn, id)?;
        let held = std::mem::take(&mut model.runs);
        let mut listed = Vec::with_capacity(members.len() + 1);
        let mut seen = HashSet::with_capacity(members.len() + 1);
        for key in members.iter().chain(std::iter::once(root)) {
            if seen.insert(*key) {
                listed.push(*key);
            }
        }
        let mut declared = Declared { objects: listed.len() as u64, missing: 0 };
        let (mut bytes, mut root_stored) = (0u64, false);
        let known = assembly.and_then(|id| self.models.assembled.remove(&id)).unwrap_or_default();
        for key in &listed {
            if let Some(held) = known.get(key) {
                model.runs.insert(held.table, held.rowid);
                bytes += held.stored.max(0) as u64;
                root_stored |= key == root;
                continue;
            }
            match self.find(key)? {
                Some(found) => {
                    if found.model.is_none() {
                        self.tag(key, found.rowid, id)?;
                    }
                    model.runs.insert(self.table_of(key), found.rowid);
                    bytes += found.stored_len.max(0) as u64;
                    root_stored |= key == root;
                }
                None => {
                    models::add_missing(self.conn, id, key)?;
                    self.written.models.missing.push(*key);
                    declared.missing += 1;
                }
            }
        }
        // Rows the assembly held that the model does not list go back to being loose.
        if !held.is_empty() {
            let all = models::all(self.conn)?;
            for (table, rowid) in held.rows() {
                if !model.runs.contains(table, rowid) {
                    self.untag(table, rowid, id, now, &all)?;
                }
            }
        }
        model.root = Some(*root);
        model.name = name;
        model.objects = declared.objects;
        model.missing = declared.missing;
        model.bytes = bytes;
        model.used = now;
        if declared.missing == 0 {
            model.state = State::Complete;
            self.written.models.readable.push(*root);
        } else {
            model.state = State::Incomplete;
            if root_stored {
                self.hide(&mut model)?;
            } else {
                self.shared.withhold(*root);
            }
        }
        models::update(self.conn, &model)?;
        Ok(declared)
    }

    /// Holds `keys` for the assembly `id`: each stored one becomes a member of it (and stays
    /// until the root is declared or the assembly given up); whether each is stored.
    fn hold(&mut self, id: i64, keys: &[Key]) -> Result<Vec<bool>, Stop> {
        self.write_run()?;
        let Some(mut model) =
            models::by_id(self.conn, id)?.filter(|m| m.state == State::Assembling)
        else {
            // Given up (or reclaimed): nothing is held, and nothing counts as stored.
            return Ok(vec![false; keys.len()]);
        };
        let mut stored = Vec::with_capacity(keys.len());
        for key in keys {
            match self.find(key)? {
                Some(found) => {
                    if found.model.is_none() {
                        self.tag(key, found.rowid, id)?;
                    }
                    let table = self.table_of(key);
                    model.runs.insert(table, found.rowid);
                    let held = Held { table, rowid: found.rowid, stored: found.stored_len };
                    self.written.models.held.push((id, *key, held));
                    stored.push(true);
                }
                None => stored.push(false),
            }
        }
        model.used = uses::now();
        models::update(self.conn, &model)?;
        Ok(stored)
    }

    /// Gives an assembly up: what it held goes back to being loose (or to another model).
    pub(super) fn give_up(&mut self, id: i64) -> Result<(), Stop> {
        self.write_run()?;
        self.models.assembled.remove(&id);
        models::forget_owner(self.conn, id)?;
        if let Some(model) = models::by_id(self.conn, id)?
            && model.state == State::Assembling
        {
            self.release(model)?;
        }
        Ok(())
    }

    /// Removes a model: its root and every member no other model lists (pinned ones stay,
    /// loose); whether there was such a model.
    fn remove_model(&mut self, root: &Key) -> Result<bool, Stop> {
        self.write_run()?;
        if !self.models.on {
            return Ok(false);
        }
        let Some(model) = models::by_root(self.conn, root)? else { return Ok(false) };
        let others = others_runs(self, model.id)?;
        let all = models::all(self.conn)?;
        let now = uses::now();
        for (table, rowid) in model.runs.rows() {
            let Some((key, used, _)) = self.row_at(table, rowid)? else { continue };
            if others.contains(table, rowid) || used == PINNED {
                self.untag(table, rowid, model.id, now, &all)?;
            } else {
                self.take(&key, rowid, false)?;
            }
        }
        self.drop_kept_root(model.id, root)?;
        self.release(ModelRow { runs: Runs::default(), ..model })?;
        Ok(true)
    }

    /// Pins (or unpins) the model of `root`: a pinned model is never evicted; whether there
    /// is such a model.
    fn pin_model(&mut self, root: &Key, pin: bool) -> Result<bool, Stop> {
        self.write_run()?;
        if !self.models.on {
            return Ok(false);
        }
        let Some(mut model) = models::by_root(self.conn, root)? else { return Ok(false) };
        model.pinned = pin;
        if !pin {
            model.used = model.used.max(uses::now());
        }
        models::update(self.conn, &model)?;
        Ok(true)
    }
}

impl Tx<'_> {
    /// One step of eviction by model, if a model goes before any loose object: the next
    /// rows of the model being evicted, or the start of the least recently used model's
    /// eviction (its root first, so that it reads as absent from then on). Models used at
    /// or after `before`, pinned ones, assemblies, and with `keep_newest` the most recently
    /// used one, stay. `None` when the next to go is a loose object.
    pub(crate) fn evict_model(
        &mut self,
        before: i64,
        stored_bytes: u64,
        keep_newest: bool,
    ) -> Result<Option<Evicted>, Stop> {
        let all = models::all(self.conn)?;
        let mut model = match all.iter().find(|m| m.state == State::Evicting) {
            Some(model) => model.clone(),
            None => {
                let newest = all
                    .iter()
                    .filter(|m| m.state != State::Assembling)
                    .max_by_key(|m| (m.used, m.id))
                    .map(|m| m.id);
                let mut candidates: Vec<&ModelRow> = all
                    .iter()
                    .filter(|m| matches!(m.state, State::Complete | State::Incomplete))
                    .filter(|m| !m.pinned && m.used < before)
                    .filter(|m| !keep_newest || Some(m.id) != newest)
                    .collect();
                candidates.sort_by_key(|m| (m.used, m.id));
                // A root is readable only with its whole model: pinning it pins the model.
                // A model whose root another model lists is held by that model and goes
                // after it; when only models that list each other's roots are left to go,
                // the oldest of them goes, and its listers miss its root.
                let ids: HashSet<i64> = candidates.iter().map(|m| m.id).collect();
                let (mut chosen, mut listed) = (None, None);
                for m in candidates {
                    if self.root_pinned(m)? {
                        continue;
                    }
                    match self.root_listers(m, &all)? {
                        listers if listers.is_empty() => {
                            chosen = Some(m);
                            break;
                        }
                        listers if listers.iter().all(|id| ids.contains(id)) => {
                            listed = listed.or(Some(m));
                        }
                        _held => {}
                    }
                }
                let Some(candidate) = chosen.or(listed) else {
                    return Ok(None);
                };
                if self.oldest_loose_use()?.is_some_and(|loose| loose < candidate.used) {
                    return Ok(None);
                }
                let mut model = candidate.clone();
                self.start_eviction(&mut model)?;
                model
            }
        };
        let others = others_runs(self, model.id)?;
        let now = uses::now();
        let (before_objects, before_bytes) =
            (self.written.totals.evicted, self.written.totals.evicted_bytes);
        let step: Vec<(u16, i64)> = model.runs.rows().take(EVICT_ROWS).collect();
        let mut taken_bytes = 0u64;
        for (table, rowid) in step {
            if taken_bytes >= stored_bytes {
                break;
            }
            model.runs.remove(table, rowid);
            let Some((key, used, _)) = self.row_at(table, rowid)? else { continue };
            if others.contains(table, rowid) || used == PINNED {
                self.untag(table, rowid, model.id, now, &all)?;
            } else if let Some(stored) = self.take(&key, rowid, false)? {
                let totals = &mut self.written.totals;
                totals.evicted += 1;
                totals.evicted_bytes += stored;
                taken_bytes += stored.max(0) as u64;
            }
        }
        if model.runs.is_empty() {
            models::delete(self.conn, model.id)?;
            if let Some(root) = model.root {
                self.written.models.readable.push(root);
            }
        } else {
            models::update(self.conn, &model)?;
        }
        let totals = &self.written.totals;
        Ok(Some(Evicted {
            objects: (totals.evicted - before_objects) as u64,
            stored_bytes: (totals.evicted_bytes - before_bytes) as u64,
        }))
    }

    /// Starts evicting `model`: its root goes first (the row, or the copy kept with the
    /// model), so that from this transaction on it reads as absent; the models that list
    /// it miss it.
    fn start_eviction(&mut self, model: &mut ModelRow) -> Result<(), Stop> {
        model.state = State::Evicting;
        let Some(root) = model.root else { return Ok(()) };
        self.shared.withhold(root);
        if let Some(found) = self.find(&root)? {
            let table = self.table_of(&root);
            model.runs.remove(table, found.rowid);
            if let Some(stored) = self.take(&root, found.rowid, false)? {
                let totals = &mut self.written.totals;
                totals.evicted += 1;
                totals.evicted_bytes += stored;
            }
            self.unlisted(model, &root, found.rowid, found.stored_len)?;
        }
        self.drop_kept_root(model.id, &root)?;
        Ok(models::update(self.conn, model)?)
    }

    /// The models other than `model` (among `all`, and not being evicted) that list
    /// `model`'s root.
    fn root_listers(&self, model: &ModelRow, all: &[ModelRow]) -> Result<Vec<i64>, Stop> {
        let Some(root) = &model.root else { return Ok(Vec::new()) };
        let Some(found) = self.find(root)? else { return Ok(Vec::new()) };
        let table = self.table_of(root);
        Ok(all
            .iter()
            .filter(|m| m.id != model.id && m.state != State::Evicting)
            .filter(|m| m.runs.contains(table, found.rowid))
            .map(|m| m.id)
            .collect())
    }

    /// Drops the copy of a root kept with model `id`, if any: its value in the file of
    /// values and its chunks go with it.
    fn drop_kept_root(&mut self, id: i64, root: &Key) -> Result<(), Stop> {
        let Some(hidden) = models::hidden_root(self.conn, id, true)? else { return Ok(()) };
        if let Some(place) = hidden.place.and_then(Place::unpack) {
            value_space::free(self.conn, place).stop(|| "freeing a root's value".into())?;
        }
        let data = &hidden.data;
        if crate::large::manifest::is_manifest(data) {
            chunks::release_stored(self.conn, root, hidden.raw_len, data, &mut self.written.totals)
                .stop(|| "releasing a root's chunks".into())?;
        }
        Ok(())
    }

    /// The earliest last use of a loose unpinned object, if there is one.
    fn oldest_loose_use(&self) -> Result<Option<i64>, Stop> {
        let mut oldest = None;
        for table in &self.shared.schema.tables {
            let used: Option<i64> = self
                .conn
                .prepare_cached(&table.first_use)
                .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)).optional())
                .stop(|| format!("reading the oldest use in {}", table.name))?;
            oldest = match (oldest, used) {
                (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                (a, b) => a.or(b),
            };
        }
        Ok(oldest)
    }
}

/// Every row some model other than `model` lists (assemblies included).
pub(crate) fn others_runs(tx: &Tx<'_>, model: i64) -> Result<Runs, Stop> {
    let mut runs = Runs::default();
    for other in models::all(tx.conn)? {
        if other.id != model {
            runs.extend(&other.runs);
        }
    }
    Ok(runs)
}

/// Start an assembly: what is saved into it or held by it stays until its root is
/// declared or it is given up; answers its id.
pub(crate) struct OpenAssembly {
    pub id: i64,
}

impl Request for OpenAssembly {
    type Answer = i64;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        tx.ensure_models()?;
        self.id = models::insert(tx.conn, None, State::Assembling, uses::now())?;
        // Its owner's death, seen by any other handle, gives it up (`files/owners.rs`).
        let owner = tx.shared.owner.name()?;
        models::set_owner(tx.conn, self.id, &owner)?;
        Ok(())
    }

    fn answer(self) -> i64 {
        self.id
    }
}

/// Hold stored objects for an assembly; answers whether each is stored.
pub(crate) struct Hold {
    pub assembly: i64,
    pub keys: Vec<Key>,
    pub stored: Vec<bool>,
}

impl Request for Hold {
    type Answer = Vec<bool>;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        self.stored = tx.hold(self.assembly, &self.keys)?;
        Ok(())
    }

    fn answer(self) -> Vec<bool> {
        self.stored
    }
}

/// [`Hold`] for a save into an assembly, which does not wait for it: the objects it found
/// stored stay held.
pub(crate) struct HoldQuietly(pub Hold);

impl super::op::Unasked for HoldQuietly {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.hold(self.0.assembly, &self.0.keys).map(|_| ())
    }
}

/// Declare a model: its root and members, taking over an assembly if given; answers its
/// members and how many are missing.
pub(crate) struct Declare {
    pub root: Key,
    pub members: Vec<Key>,
    pub name: Option<Vec<u8>>,
    pub assembly: Option<i64>,
    /// The model's row as the declaring transaction left it (another process may evict
    /// or remove the model as soon as it commits).
    pub declared: Option<ModelRow>,
    /// Whether to read the model's rows in the declaring transaction, if it is complete:
    /// a copy's receive then has its model whatever another process evicts or removes
    /// once it commits.
    pub read: bool,
    /// The rows read, `(key, raw_len, stored bytes)`, for the caller to decode.
    pub rows: Option<Vec<(Key, i64, Vec<u8>)>>,
}

impl Request for Declare {
    type Answer = (Option<ModelRow>, Option<Vec<(Key, i64, Vec<u8>)>>);

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.declare(&self.root, &self.members, self.name.take(), self.assembly)?;
        self.declared = models::by_root(tx.conn, &self.root)?;
        self.rows = None;
        if self.read
            && let Some(model) = self.declared.as_ref().filter(|m| m.state == State::Complete)
        {
            self.rows = Some(tx.model_rows(model)?);
        }
        Ok(())
    }

    fn answer(self) -> Self::Answer {
        (self.declared, self.rows)
    }
}

impl Tx<'_> {
    /// Every row `model` lists, `(key, raw_len, stored bytes)`, values in the file of
    /// values read from it (their places may be reused once this transaction commits).
    fn model_rows(&self, model: &ModelRow) -> Result<Vec<(Key, i64, Vec<u8>)>, Stop> {
        let mut rows = Vec::with_capacity(model.runs.len() as usize);
        for (table, rowid) in model.runs.rows() {
            let table = &self.shared.schema.tables[usize::from(table)];
            let sql = &table.models.by_rowid;
            let read = self
                .conn
                .prepare_cached(sql)
                .and_then(|mut stmt| {
                    stmt.query_row([rowid], |r| {
                        let row = sql.columns.read(r);
                        Ok((row.key()?, row.raw_len()?, row.data()?.to_vec(), row.packed_place()?))
                    })
                    .optional()
                })
                .stop(|| format!("reading row {rowid} of {}", table.name))?;
            let Some((Some(key), raw_len, data, place)) = read else { continue };
            let data = match place {
                Some(place) => {
                    crate::values::value_log::read_value(self.shared.values.as_ref(), &key, place)
                        .map_err(Stop::from)?
                }
                None => data,
            };
            rows.push((key, raw_len, data));
        }
        Ok(rows)
    }
}

/// Give an assembly up.
pub(crate) struct GiveUp(pub i64);

impl super::op::Unasked for GiveUp {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.give_up(self.0)
    }
}

/// Remove a model and the members no other model lists; answers whether there was one.
pub(crate) struct RemoveModel {
    pub root: Key,
    pub removed: bool,
}

impl Request for RemoveModel {
    type Answer = bool;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        self.removed = tx.remove_model(&self.root)?;
        Ok(())
    }

    fn answer(self) -> bool {
        self.removed
    }
}

/// Pin or unpin a model; answers whether there is one.
pub(crate) struct PinModel {
    pub root: Key,
    pub pin: bool,
    pub found: bool,
}

impl Request for PinModel {
    type Answer = bool;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        self.found = tx.pin_model(&self.root, self.pin)?;
        Ok(())
    }

    fn answer(self) -> bool {
        self.found
    }
}
