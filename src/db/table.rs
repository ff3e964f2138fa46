//! One object table: the SQL of every statement on it, built from the row's description
//! (`row.rs`) and the table's key index (`key_index.rs`), and the two ways rows come and go
//! ([`TableSql::add`], [`TableSql::unindex`]), which keep the key index in step.

use rusqlite::blob::ZeroBlob;
use rusqlite::types::ToSql;
use rusqlite::{CachedStatement, Connection, params};

use crate::db::first_generation::Generation;
use crate::db::key_filter::Lookup;
use crate::db::key_index::{self, KeyIndex};
use crate::db::names;
use crate::db::row::{self, Column, Columns, MEMBER, PINNED, Place, Sql};
use crate::db::scan;
use crate::db::use_table::UseSql;
use crate::settings::values::Values;

/// How [`TableSql::add`] inserts a row.
#[derive(Debug)]
pub(crate) struct Insert {
    /// Insert a zeroed value of the value's length, to be written through blob I/O at the
    /// new rowid.
    pub reserve: bool,
    /// Which indexes the lookup before the insert reads (the writer's filter of stored key
    /// prefixes, `key_filter.rs`, says which can hold the key).
    pub lookup: Lookup,
    /// Where the value is in the file of values, when it is there (the row's own value is
    /// then empty).
    pub place: Option<Place>,
    /// The model the row is a member of (its home), in a stash with models: the row is
    /// inserted with the `model` column and `used` is the caller's (`row::MEMBER`).
    pub model: Option<i64>,
}

impl Insert {
    /// The value bound, the key looked up in every index.
    pub(crate) const VALUE: Insert =
        Insert { reserve: false, lookup: Lookup::BOTH, place: None, model: None };
}

/// The SQL statements of one object table, built from the row's description (`row.rs`).
#[derive(Debug)]
pub(crate) struct TableSql {
    pub name: String,
    pub key_index: KeyIndex,
    /// Where its rows' stored bytes are.
    pub stored: Values,
    /// Inserts a row: the columns of `row::insert_columns`; through [`TableSql::add`], which
    /// skips a stored key.
    insert: String,
    /// Reads a row by key, asking first the generation of the key index each names
    /// (`first_generation.rs`): its raw length, data, place and the way it was found.
    select: [Sql; 2],
    /// `select` with the row's last use (tables with a use column only).
    select_used: [Sql; 2],
    pub exists: String,
    /// Whether the row at rowid `?1` holds the key `?2` (generations: a row of the key's
    /// prefix, found through [`key_index::PREFIX_IDS`]).
    pub(crate) has_key: String,
    /// Deletes the row of a key, returning what releasing it needs.
    pub delete: Sql,
    /// A chunk of rows with their values, for checking (see `scan.rs`).
    pub scan: Sql,
    pub totals: String,
    /// A chunk of keys and sizes, for listing.
    pub list: Sql,
    /// Every manifest: key, raw length, data (`large/`).
    pub manifests: Sql,
    /// Adds a name for an object of this table, if the object is stored (`names.rs`).
    pub name_insert: String,
    /// Points an existing name at an object of this table, if the object is stored.
    pub name_repoint: String,
    /// Records a later use of an object (never un-pins: a pin's use is the largest).
    pub touch: String,
    /// Pins an object that is not pinned; returns its stored length.
    pub pin: Sql,
    /// Un-pins a pinned object, giving it a use time; returns its stored length.
    pub unpin: Sql,
    /// Whether an object is pinned.
    pub pinned: String,
    /// Unpinned rows used before a time, least recently used first (`evict.rs`).
    pub oldest: Sql,
    /// Deletes one row by rowid (eviction).
    pub evict: Sql,
    /// The earliest use of an unpinned object.
    pub first_use: String,
    /// Pinned objects and their stored bytes.
    pub pinned_totals: String,
    /// The rowids and places of the values that start in a range of places
    /// (`value_space.rs`; tables with values in a file only).
    pub places_in: Sql,
    /// Points the row at rowid `?1` at the place `?2`.
    pub move_place: String,
    /// The narrow table of uses beside it, in stashes that have one (`use_table.rs`).
    pub apart: UseSql,
    /// Its statements on models' members, which read the `model` column: prepared only in
    /// a stash with models (`models.rs`).
    pub models: ModelSql,
}

/// The statements of one object table that read or write its `model` column.
#[derive(Debug)]
pub(crate) struct ModelSql {
    /// Inserts a member: the columns of `row::insert_columns` with the model.
    pub insert: String,
    /// `select` with the row's last use and model, for a handle that records uses.
    select_used: [Sql; 2],
    /// Deletes the row of a key, returning what releasing it needs, and its model.
    pub delete: Sql,
    /// The row of a key: rowid, model, last use, stored length.
    pub find: Sql,
    /// A whole row by rowid, for reading a model and keeping a root apart.
    pub by_rowid: Sql,
    /// The rows of a run of rowids `[?1, ?2)`, in order (`Stash::read_model`).
    pub run: Sql,
    /// Makes the loose row at rowid `?1` a member of model `?2` (a pinned one stays pinned).
    pub tag: String,
    /// Makes the row at rowid `?1` loose again, used at `?2` (a pinned one stays pinned).
    pub untag: String,
    /// Gives the member at rowid `?1` the home `?2`.
    pub rehome: String,
    /// Deletes the row at rowid `?1`, returning what the totals and releasing need.
    pub take: Sql,
    /// Un-pins a pinned object: a member goes back to being one.
    pub unpin: Sql,
}

impl ModelSql {
    /// The statements it holds: [`ModelSql::statements`] lists them all.
    pub(crate) const STATEMENTS: usize = 12;

    /// Every statement. Destructured, so that one added to the struct and not here does
    /// not compile (the schema's test prepares them all).
    #[cfg(test)]
    pub(crate) fn statements(&self) -> [&str; Self::STATEMENTS] {
        let ModelSql {
            insert,
            select_used: [young, old],
            delete,
            find,
            by_rowid,
            run,
            tag,
            untag,
            rehome,
            take,
            unpin,
        } = self;
        [insert, young, old, delete, find, by_rowid, run, tag, untag, rehome, take, unpin]
    }
}

impl TableSql {
    /// The statements of one table: [`TableSql::statements`] lists them all.
    pub(crate) const STATEMENTS: usize = 24;

    /// Every statement of the table. Destructured, so that a statement added to the struct
    /// and not here does not compile (the test below prepares them all).
    #[cfg(test)]
    pub(crate) fn statements(&self) -> [&str; Self::STATEMENTS] {
        let TableSql {
            name: _,
            key_index: _,
            stored: _,
            apart: _,
            models: _,
            insert,
            select: [select_young, select_old],
            select_used: [select_used_young, select_used_old],
            exists,
            has_key,
            delete,
            scan,
            totals,
            list,
            manifests,
            name_insert,
            name_repoint,
            touch,
            pin,
            unpin,
            pinned,
            oldest,
            evict,
            first_use,
            pinned_totals,
            places_in,
            move_place,
        } = self;
        [
            insert,
            select_young,
            select_old,
            select_used_young,
            select_used_old,
            exists,
            has_key,
            delete,
            scan,
            totals,
            list,
            manifests,
            name_insert,
            name_repoint,
            touch,
            pin,
            unpin,
            pinned,
            oldest,
            evict,
            first_use,
            pinned_totals,
            places_in,
            move_place,
        ]
    }

    /// The statement that reads a row by key, asking `first` first; with the row's last use
    /// if `used` (tables with a use column only). Its columns: raw length, data, place,
    /// [the use,] and the way the row was found (`KeyIndex::select`).
    pub(crate) fn select(&self, first: Generation, used: bool) -> &Sql {
        if used { &self.select_used[first as usize] } else { &self.select[first as usize] }
    }

    /// [`TableSql::select`] with the last use and the model (tables with a `model` column).
    pub(crate) fn select_model(&self, first: Generation) -> &Sql {
        &self.models.select_used[first as usize]
    }

    pub(crate) fn new(name: String, key_index: KeyIndex, stored: Values) -> Self {
        use Column as C;
        let columns = |list: &[Column]| Columns::new(stored, list);
        let is_key = key_index.matches("?1");
        let len = C::StoredLen.sql(stored);
        let place = C::Place.sql(stored);
        // Run after a lookup (`TableSql::add`) with generations: one statement, `INSERT ..
        // SELECT .. WHERE NOT EXISTS`, reads the table it writes, and SQLite then stages
        // each row in a temporary table (4x slower, `experiments` `key_index`).
        let insert = |model: bool| {
            let (columns, params) = row::insert_columns(stored, model);
            let verb = match key_index {
                KeyIndex::Full => "INSERT OR IGNORE",
                KeyIndex::Generations => "INSERT",
            };
            format!("{verb} INTO {name}{columns} VALUES ({params})")
        };
        let select = |list: &[Column]| {
            let read = columns(list);
            [Generation::Young, Generation::Old]
                .map(|first| Sql::new(key_index.select(&name, read.sql(), first), read.clone()))
        };
        let scan = |list: &[Column]| {
            let read = columns(list);
            Sql::new(scan::chunk_sql(&name, read.sql()), read)
        };
        let query = |list: &[Column], rest: &str| {
            let read = columns(list);
            Sql::new(format!("SELECT {} FROM {name} {rest}", read.sql()), read)
        };
        let returning = |sql: String, list: &[Column]| {
            let read = columns(list);
            Sql::new(format!("{sql} RETURNING {}", read.sql()), read)
        };
        let released = [C::RawLen, C::StoredLen, C::Used, C::Manifest, C::Rowid, C::Place];
        let models = ModelSql {
            insert: insert(true),
            select_used: select(&[C::RawLen, C::Data, C::Place, C::Used, C::Model, C::Found]),
            delete: returning(
                format!("DELETE FROM {name} WHERE {is_key}"),
                &[&released[..], &[C::Model]].concat(),
            ),
            find: {
                let read = columns(&[C::Rowid, C::Model, C::Used, C::StoredLen]);
                let sql = key_index.select(&name, read.sql(), Generation::Young);
                Sql::new(
                    sql,
                    Columns::new(stored, &[C::Rowid, C::Model, C::Used, C::StoredLen, C::Found]),
                )
            },
            by_rowid: query(
                &[C::Key, C::RawLen, C::Data, C::Place, C::StoredLen, C::Used, C::Model],
                "WHERE rowid = ?1",
            ),
            run: query(
                &[C::Rowid, C::Key, C::RawLen, C::Data, C::Place],
                "WHERE rowid >= ?1 AND rowid < ?2 ORDER BY rowid",
            ),
            tag: format!(
                "UPDATE {name} SET model = ?2, used = CASE WHEN used = {PINNED} THEN used \
                 ELSE {MEMBER} END WHERE rowid = ?1 AND model IS NULL"
            ),
            untag: format!(
                "UPDATE {name} SET model = NULL, used = CASE WHEN used = {PINNED} THEN used \
                 ELSE ?2 END WHERE rowid = ?1"
            ),
            rehome: format!("UPDATE {name} SET model = ?2 WHERE rowid = ?1"),
            take: returning(
                format!("DELETE FROM {name} WHERE rowid = ?1"),
                &[C::Key, C::RawLen, C::StoredLen, C::Used, C::Manifest, C::Place],
            ),
            unpin: returning(
                format!(
                    "UPDATE {name} SET used = CASE WHEN model IS NULL THEN ?2 ELSE {MEMBER} END \
                     WHERE {is_key} AND used = {PINNED}"
                ),
                &[C::StoredLen],
            ),
        };
        TableSql {
            insert: insert(false),
            models,
            select: select(&[C::RawLen, C::Data, C::Place, C::Found]),
            select_used: select(&[C::RawLen, C::Data, C::Place, C::Used, C::Found]),
            exists: key_index.exists(&name),
            has_key: format!("SELECT 1 FROM {name} WHERE rowid = ?1 AND key = ?2"),
            delete: returning(
                format!("DELETE FROM {name} WHERE {is_key}"),
                &[C::RawLen, C::StoredLen, C::Used, C::Manifest, C::Rowid, C::Place],
            ),
            scan: scan(&[C::Rowid, C::Key, C::RawLen, C::StoredLen, C::Data, C::Place]),
            list: scan(&[C::Rowid, C::Key, C::RawLen, C::StoredLen]),
            manifests: query(
                &[C::Key, C::RawLen, C::Data],
                &format!("WHERE {}", C::IsManifest.sql(stored)),
            ),
            totals: format!(
                "SELECT count(*), coalesce(sum(raw_len), 0), coalesce(sum({len}), 0) FROM {name}"
            ),
            apart: UseSql::new(&name, key_index),
            name_insert: names::NameSql::insert(&name, key_index),
            name_repoint: names::NameSql::repoint(&name, key_index),
            touch: format!("UPDATE {name} SET used = ?2 WHERE {is_key} AND used < ?2"),
            pin: returning(
                format!("UPDATE {name} SET used = {PINNED} WHERE {is_key} AND used <> {PINNED}"),
                &[C::StoredLen],
            ),
            unpin: returning(
                format!("UPDATE {name} SET used = ?2 WHERE {is_key} AND used = {PINNED}"),
                &[C::StoredLen],
            ),
            pinned: key_index.select(&name, &format!("used = {PINNED}"), Generation::Young),
            oldest: query(
                &[C::Rowid, C::Key, C::RawLen, C::StoredLen, C::Used, C::IsManifest],
                "WHERE used < ?1 ORDER BY used LIMIT ?2",
            ),
            evict: returning(
                format!("DELETE FROM {name} WHERE rowid = ?1"),
                &[C::Manifest, C::Place],
            ),
            first_use: format!(
                "SELECT used FROM {name} WHERE used < {MEMBER} ORDER BY used LIMIT 1"
            ),
            pinned_totals: format!(
                "SELECT count(*), coalesce(sum({len}), 0) FROM {name} WHERE used = {PINNED}"
            ),
            places_in: query(
                &[C::Rowid, C::Place],
                &format!("WHERE {place} >= ?1 AND {place} < ?2 LIMIT ?3"),
            ),
            // Rows that hold their values have no place to move (compaction never runs).
            move_place: match stored {
                Values::InFile => format!("UPDATE {name} SET {place} = ?2 WHERE rowid = ?1"),
                Values::InRows => format!("SELECT ?2 FROM {name} WHERE rowid = ?1 AND 0"),
            },
            name,
            key_index,
            stored,
        }
    }

    pub(crate) fn create(&self) -> String {
        row::create_table(&self.name, self.stored) + &self.key_index.create(&self.name)
    }

    /// The index eviction reads uses through, oldest first.
    pub(crate) fn index_uses(&self) -> String {
        let mut sql =
            format!("CREATE INDEX IF NOT EXISTS {name}_used ON {name}(used);\n", name = self.name);
        if self.stored == Values::InFile {
            // Compacting a segment of the values file finds its rows through it.
            sql += &format!(
                "CREATE INDEX IF NOT EXISTS {name}_place ON {name}(place) \
                 WHERE place IS NOT NULL;\n",
                name = self.name
            );
        }
        sql
    }

    /// Inserts the row `(key, raw_len, value, used)` unless the key is stored; 1 if it was
    /// added. See [`Insert`]. A run of rows of one table goes through one [`Adder`].
    pub(crate) fn add(
        &self,
        conn: &Connection,
        key: &crate::key::Key,
        raw_len: i64,
        value: &[u8],
        used: i64,
        how: Insert,
    ) -> rusqlite::Result<usize> {
        self.adder(conn).add(key, raw_len, value, used, how)
    }

    /// The inserts of a run of rows into this table, on `conn`.
    pub(crate) fn adder<'c>(&'c self, conn: &'c Connection) -> Adder<'c> {
        Adder { table: self, conn, insert: None, insert_model: None, index: None }
    }

    /// Whether `key` is stored. With generations, the rows of its prefix in the indexes
    /// `lookup` names (the others are known to hold none of the prefix), each compared
    /// with the key: for a key not stored, two
    /// index descents, where `exists`, whose `IN` builds a temporary table of rowids, costs
    /// the writer a third of its time (the writer asks this of every row it inserts;
    /// `missing` of every key it is given).
    pub(crate) fn stored(
        &self,
        conn: &Connection,
        key: &crate::key::Key,
        lookup: Lookup,
    ) -> rusqlite::Result<bool> {
        let key = &key.as_bytes()[..];
        if self.key_index == KeyIndex::Full {
            return conn.prepare_cached(&self.exists)?.exists([key]);
        }
        let prefix = &key[..8];
        let [young, old] = key_index::PREFIX_IDS;
        let read = [(lookup.young, young), (lookup.old, old)];
        for sql in read.into_iter().filter_map(|(read, sql)| read.then_some(sql)) {
            let mut ids = conn.prepare_cached(sql)?;
            let mut rows = ids.query([prefix])?;
            while let Some(row) = rows.next()? {
                let id: i64 = row.get(0)?;
                if conn.prepare_cached(&self.has_key)?.exists(params![id, key])? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Takes the row of `key` at `rowid`, just deleted, out of the key index (the full key
    /// index of older formats follows its table by itself).
    pub(crate) fn unindex(
        &self,
        conn: &Connection,
        key: &crate::key::Key,
        rowid: i64,
    ) -> rusqlite::Result<()> {
        if self.key_index == KeyIndex::Generations {
            for sql in key_index::UNINDEX {
                conn.prepare_cached(sql)?.execute(params![&key.as_bytes()[..], rowid])?;
            }
        }
        Ok(())
    }
}

/// The statements of [`TableSql::add`] for a run of rows of one table, each taken from the
/// connection's statement cache at its first use and kept for the run: a statement taken
/// from the cache is found by a hash of its SQL (and put back by another), which, twice a
/// row, cost the writer 4% of its time.
pub(crate) struct Adder<'c> {
    table: &'c TableSql,
    conn: &'c Connection,
    insert: Option<CachedStatement<'c>>,
    insert_model: Option<CachedStatement<'c>>,
    index: Option<CachedStatement<'c>>,
}

impl Adder<'_> {
    /// The name of its table.
    pub(crate) fn table_name(&self) -> &str {
        self.table.name.as_str()
    }

    /// [`TableSql::add`].
    pub(crate) fn add(
        &mut self,
        key: &crate::key::Key,
        raw_len: i64,
        value: &[u8],
        used: i64,
        how: Insert,
    ) -> rusqlite::Result<usize> {
        let Insert { reserve, lookup, place, model } = how;
        let table = self.table;
        if table.key_index == KeyIndex::Generations && table.stored(self.conn, key, lookup)? {
            return Ok(0);
        }
        let key = &key.as_bytes()[..];
        let zeroed = ZeroBlob(value.len() as u64);
        let data: &dyn ToSql = if reserve { &zeroed } else { &value };
        let place = place.map(Place::pack);
        // Each column the insert names (`row::insert_columns`), in record order; on the
        // stack (two vectors a row cost the writer 3% of a save).
        let mut values: [&dyn ToSql; row::TABLE.len()] = [&key; row::TABLE.len()];
        let mut count = 0;
        for (column, _) in row::table_column_list(table.stored, model.is_some()).skip(1) {
            values[count] = match column {
                Column::Key => &key,
                Column::RawLen => &raw_len,
                Column::Data => data,
                Column::Used => &used,
                Column::Place => &place,
                Column::Model => &model,
                other => unreachable!("an object table has no column {other:?}"),
            };
            count += 1;
        }
        let (slot, sql) = match model {
            Some(_) => (&mut self.insert_model, &table.models.insert),
            None => (&mut self.insert, &table.insert),
        };
        let insert = match slot {
            Some(insert) => insert,
            None => slot.insert(self.conn.prepare_cached(sql)?),
        };
        let added = insert.execute(&values[..count])?;
        if added == 1 && table.key_index == KeyIndex::Generations {
            let index = match &mut self.index {
                Some(index) => index,
                None => self.index.insert(self.conn.prepare_cached(key_index::INDEX)?),
            };
            index.execute(params![key, self.conn.last_insert_rowid()])?;
        }
        Ok(added)
    }
}
