//! The object tables of a stash and the SQL of every statement on them, built from the
//! row's description (`row.rs`) and the table's key index (`key_index.rs`); the schema of
//! a layout, made new or read from a stash (format versions: `format.rs`).
//!
//! Each object table is a rowid table with a key index beside it: rows are appended in
//! rowid order and only the index is a randomly ordered B-tree. Measured against WITHOUT
//! ROWID in notes/design.md. Stashes of format 5 keep generations of key-prefix indexes
//! ([`KeyIndex::Generations`]); older ones a unique index on the whole key
//! ([`KeyIndex::Full`]), and are read and written as they are. The index on uses that
//! eviction reads, and the names' index by key that removing reads, are built when the
//! stash first evicts, removes or gets a cap ([`Schema::index_removals`]), so a stash that
//! never does pays for neither (17 bytes an object and a third B-tree per insert; half of
//! each name).

use rusqlite::{Connection, params};

use crate::db::first_generation::Generation;
use crate::db::format::{self, APPLICATION_ID};
use crate::db::key_filter::{KeyFilter, Lookup};
use crate::db::key_index;
pub(crate) use crate::db::key_index::KeyIndex;
use crate::db::meta::META;
use crate::db::names;
use crate::db::row::{self, Column, Columns, PINNED, Place, Sql};
use crate::db::scan;
use crate::db::use_table::{self, UseSql};
use crate::error::{DbContext, Error, Result};
use crate::settings::layout::Layout;
use crate::settings::values::Values;

/// Page size of new stashes; see notes/design.md.
pub(crate) const PAGE_SIZE: u32 = 8192;

/// How [`TableSql::add`] inserts a row.
#[derive(Debug)]
pub(crate) struct Insert<'a> {
    /// Insert a zeroed value of the value's length, to be written through blob I/O at the
    /// new rowid.
    pub reserve: bool,
    /// The writer's filter of stored key prefixes (`key_filter.rs`): it says which indexes
    /// the lookup reads, and takes the key once inserted.
    pub filter: Option<&'a mut KeyFilter>,
    /// Where the value is in the file of values, when it is there (the row's own value is
    /// then empty).
    pub place: Option<Place>,
}

impl Insert<'_> {
    /// The value bound, the key looked up in every index.
    pub(crate) const VALUE: Insert<'static> = Insert { reserve: false, filter: None, place: None };
}

/// The SQL statements of one object table, built from the row's description (`row.rs`).
#[derive(Debug)]
pub(crate) struct TableSql {
    pub name: String,
    pub key_index: KeyIndex,
    /// Where its rows' stored bytes are.
    pub stored: Values,
    /// Inserts a row: key, raw length, value, last use (`uses.rs`); through
    /// [`TableSql::add`], which skips a stored key.
    insert: String,
    /// An insert that reserves the value's bytes (its length the third parameter), written
    /// afterwards through blob I/O.
    insert_zeroblob: String,
    /// Reads a row by key, asking first the generation of the key index each names
    /// (`first_generation.rs`): its raw length, data, place and the way it was found.
    select: [Sql; 2],
    /// `select` with the row's last use (tables with a use column only).
    select_used: [Sql; 2],
    pub exists: String,
    /// Whether the row at rowid `?1` holds the key `?2` (generations: a row of the key's
    /// prefix, found through [`key_index::PREFIX_IDS`]).
    has_key: String,
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
}

impl TableSql {
    /// The statements of one table: [`TableSql::statements`] lists them all.
    const STATEMENTS: usize = 25;

    /// Every statement of the table. Destructured, so that a statement added to the struct
    /// and not here does not compile (the test below prepares them all).
    #[cfg(test)]
    fn statements(&self) -> [&str; Self::STATEMENTS] {
        let TableSql {
            name: _,
            key_index: _,
            stored: _,
            apart: _,
            insert,
            insert_zeroblob,
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
            insert_zeroblob,
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

    fn new(name: String, key_index: KeyIndex, stored: Values) -> Self {
        use Column as C;
        let columns = |list: &[Column]| Columns::new(stored, list);
        let is_key = key_index.matches("?1");
        let len = C::StoredLen.sql(stored);
        let place = C::Place.sql(stored);
        let (insert_columns, params) = row::insert_columns(stored);
        let zeroblob_params = params.replacen("?3", "zeroblob(?3)", 1);
        let (insert, insert_zeroblob) = match key_index {
            KeyIndex::Full => (
                format!("INSERT OR IGNORE INTO {name}{insert_columns} VALUES ({params})"),
                format!("INSERT OR IGNORE INTO {name}{insert_columns} VALUES ({zeroblob_params})"),
            ),
            // Run after a lookup (`TableSql::add`): one statement, `INSERT .. SELECT .. WHERE
            // NOT EXISTS`, reads the table it writes, and SQLite then stages each row in a
            // temporary table (4x slower, `experiments` `key_index`).
            KeyIndex::Generations => (
                format!("INSERT INTO {name}{insert_columns} VALUES ({params})"),
                format!("INSERT INTO {name}{insert_columns} VALUES ({zeroblob_params})"),
            ),
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
        TableSql {
            insert,
            insert_zeroblob,
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
                "SELECT used FROM {name} WHERE used < {PINNED} ORDER BY used LIMIT 1"
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

    fn create(&self) -> String {
        row::create_table(&self.name, self.stored) + &self.key_index.create(&self.name)
    }

    /// The index eviction reads uses through, oldest first.
    fn index_uses(&self) -> String {
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
    /// added. See [`Insert`].
    pub(crate) fn add(
        &self,
        conn: &Connection,
        key: &crate::key::Key,
        raw_len: i64,
        value: &[u8],
        used: i64,
        how: Insert,
    ) -> rusqlite::Result<usize> {
        let Insert { reserve, filter, place } = how;
        let lookup = filter.as_deref().map_or(Lookup::BOTH, |f| f.lookup(key));
        if self.key_index == KeyIndex::Generations && self.stored(conn, key, lookup)? {
            return Ok(0);
        }
        let key = &key.as_bytes()[..];
        let added = match (reserve, self.stored) {
            (true, Values::InRows) => conn
                .prepare_cached(&self.insert_zeroblob)?
                .execute(params![key, raw_len, value.len() as i64, used])?,
            (true, Values::InFile) => conn
                .prepare_cached(&self.insert_zeroblob)?
                .execute(params![key, raw_len, value.len() as i64, used, None::<i64>])?,
            (false, Values::InRows) => {
                conn.prepare_cached(&self.insert)?.execute(params![key, raw_len, value, used])?
            }
            (false, Values::InFile) => conn.prepare_cached(&self.insert)?.execute(params![
                key,
                raw_len,
                value,
                used,
                place.map(Place::pack)
            ])?,
        };
        if added == 1 && self.key_index == KeyIndex::Generations {
            conn.prepare_cached(key_index::INDEX)?
                .execute(params![key, conn.last_insert_rowid()])?;
            if let Some(filter) = filter {
                filter.insert(&key[..8]);
            }
        }
        Ok(added)
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

/// The statements of every table of a layout, indexed like [`Layout::table_of`].
#[derive(Debug)]
pub(crate) struct Schema {
    pub layout: Layout,
    pub tables: Vec<TableSql>,
    /// Whether its tables have narrow tables of uses beside them (`use_table.rs`).
    pub uses_apart: bool,
}

impl Schema {
    /// The statements of tables of `layout` indexed by `key_index`, with narrow tables of
    /// uses beside them if `uses_apart`, their values where `stored` says.
    pub(crate) fn new(
        layout: Layout,
        key_index: KeyIndex,
        uses_apart: bool,
        stored: Values,
    ) -> Self {
        let tables = (0..layout.table_count())
            .map(|i| TableSql::new(layout.table_name(i), key_index, stored))
            .collect();
        Schema { layout, tables, uses_apart }
    }

    /// The schema of a new stash: the newest format's.
    pub(crate) fn fresh(layout: Layout, stored: Values) -> Self {
        Schema::new(layout, KeyIndex::Generations, true, stored)
    }

    /// Where the stash keeps its values.
    pub(crate) fn stored(&self) -> Values {
        self.tables[0].stored
    }

    /// The schema of the stash on `conn`, whose layout is `layout`: its tables keep
    /// generations of key indexes if its first table does (every table of a stash is made
    /// at once).
    pub(crate) fn read(conn: &Connection, layout: Layout) -> Result<Self> {
        let (kind, name) = KeyIndex::Generations.marker(&layout.table_name(0));
        let found = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = ?1 AND name = ?2",
                [kind, &name],
                |r| r.get::<_, i64>(0),
            )
            .context(|| format!("looking for the {kind} {name}"))?
            > 0;
        let key_index = if found { KeyIndex::Generations } else { KeyIndex::Full };
        let first = layout.table_name(0);
        let stored =
            if has_column(conn, &first, "place")? { Values::InFile } else { Values::InRows };
        Ok(Schema::new(layout, key_index, use_table::exists(conn, &first)?, stored))
    }

    /// How many prepared statements a connection should cache, before its stash's layout
    /// is known.
    pub(crate) fn most_statements() -> usize {
        Schema::fresh(Layout::Bucketed, Values::InFile).statement_count()
    }

    /// How the tables find a row by key.
    pub(crate) fn key_index(&self) -> KeyIndex {
        self.tables[0].key_index
    }

    /// The table of `key`.
    pub(crate) fn table(&self, key: &crate::key::Key) -> &TableSql {
        &self.tables[self.layout.table_of(key)]
    }

    /// Statements a connection may prepare beside those of the object tables (the meta
    /// table's, the names', the dictionaries'): a bound, with room to spare, for the
    /// statement cache.
    pub(crate) const META_STATEMENTS: usize = 32;

    /// How many prepared statements a connection should cache to never re-prepare.
    pub(crate) fn statement_count(&self) -> usize {
        self.tables.len() * (TableSql::STATEMENTS + UseSql::STATEMENTS) + Self::META_STATEMENTS
    }

    /// Creates the tables and meta rows of a new stash in an empty database. Pages freed
    /// by deletes are given back to the file system by incremental vacuum (`evict.rs`),
    /// which SQLite can only switch on before the first table. `more` is the SQL of the
    /// tables a feature the stash is made with needs from the start (the accounting of a
    /// file of values, `values/value_space.rs`), run in the same transaction.
    pub(crate) fn create(&self, conn: &Connection, more: &str) -> Result<()> {
        let mut sql = String::from("PRAGMA auto_vacuum = INCREMENTAL;\nBEGIN;\n");
        sql += &format!("CREATE TABLE {META}(name TEXT PRIMARY KEY, value ANY) WITHOUT ROWID;\n");
        for table in &self.tables {
            sql += &table.create();
            if self.uses_apart {
                sql += &UseSql::create(&table.name);
            }
        }
        sql += more;
        sql += &format!(
            "INSERT INTO {META}(name, value) VALUES ('layout', '{}'), ('state', 'clean'), \
             ('objects', 0), ('raw_bytes', 0), ('stored_bytes', 0);\n",
            self.layout.as_str()
        );
        sql += &format!("PRAGMA application_id = {APPLICATION_ID};\n");
        let version = format::of_new(
            self.stored() == Values::InFile,
            self.uses_apart,
            self.key_index() == KeyIndex::Generations,
        );
        sql += &format!("PRAGMA user_version = {version};\n");
        sql += "COMMIT;";
        conn.execute_batch(&sql).context(|| "creating the stash's tables".to_string())
    }
}

/// Whether the stash's object tables record uses (made by this version, or upgraded by
/// [`Schema::add_uses`]).
pub(crate) fn has_uses(conn: &Connection, schema: &Schema) -> Result<bool> {
    has_column(conn, &schema.tables[0].name, "used")
}

/// Whether `table` has the column `column`.
fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .context(|| format!("reading the columns of {table}"))
}

impl Schema {
    /// Gives the object tables of a stash made before uses were recorded their use column,
    /// in one transaction; their objects count as used now. Versions that do
    /// not know the column read and write such tables as before (their rows get use 0,
    /// the first to be evicted), so this is no format change.
    pub(crate) fn add_uses(&self, conn: &Connection, now: i64) -> Result<()> {
        let mut sql = String::from("BEGIN IMMEDIATE;\n");
        for table in &self.tables {
            sql += &format::add_uses(&table.name, now);
        }
        sql += "COMMIT;";
        conn.execute_batch(&sql).map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            Error::db("adding use times to the stash's tables", e)
        })
    }
}

impl Schema {
    /// Whether the stash has the indexes that removing and evicting read: the object
    /// tables' index of uses, and the names' index by key (made with them before format 5,
    /// or by [`Schema::index_removals`]).
    pub(crate) fn removals_indexed(&self, conn: &Connection) -> Result<bool> {
        format::has_index(conn, &format!("{}_used", self.tables[0].name))
    }

    /// Indexes the uses of every object table, and the names by key if the stash has
    /// names, within the caller's transaction: one pass over each table (0.4 s for the
    /// million example's stash in memory; from disk, as long as reading the file), once in
    /// a stash's life, at its first cap, eviction or removal. Until then a stash pays
    /// neither (17 bytes an object, and a name's second copy).
    pub(crate) fn index_removals(&self, conn: &Connection) -> Result<()> {
        let mut sql: String = self.tables.iter().map(TableSql::index_uses).collect();
        if names::table_exists(conn)? {
            sql += &names::index_by_key();
        }
        conn.execute_batch(&sql).context(|| "indexing the uses and names of objects".into())
    }
}

/// How many objects of any kind (tables, indexes, views) the database defines.
pub(crate) fn schema_object_count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_of_a_table_prepares_and_finds_rows_through_the_key_index() {
        let kinds = [
            (KeyIndex::Full, false, Values::InRows),
            (KeyIndex::Generations, false, Values::InRows),
            (KeyIndex::Generations, true, Values::InRows),
            (KeyIndex::Generations, true, Values::InFile),
        ];
        for (key_index, uses_apart, stored) in kinds {
            let conn = Connection::open_in_memory().unwrap();
            let schema = Schema::new(Layout::Single, key_index, uses_apart, stored);
            schema.create(&conn, "").unwrap();
            assert!(!schema.removals_indexed(&conn).unwrap());
            // Eviction's statements run once uses are indexed.
            schema.index_removals(&conn).unwrap();
            assert!(schema.removals_indexed(&conn).unwrap());
            crate::db::names::create(&conn, true).unwrap();
            let read = Schema::read(&conn, Layout::Single).unwrap();
            assert_eq!((read.key_index(), read.uses_apart), (key_index, uses_apart));
            let table = &schema.tables[0];
            if uses_apart {
                for sql in table.apart.statements() {
                    conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
                }
            }
            for sql in table.statements() {
                conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
                // A statement that names a key must reach its row through the index.
                if sql.contains("?1") && sql.contains("key") && !sql.contains("rowid = ?1") {
                    let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
                    let mut rows = explain.raw_query();
                    let mut plan = Vec::new();
                    while let Some(row) = rows.next().unwrap() {
                        plan.push(row.get::<_, String>(3).unwrap());
                    }
                    assert!(
                        plan.iter().all(|step| !step.starts_with(&format!("SCAN {}", table.name))),
                        "{key_index:?}: {sql} scans the table: {plan:?}"
                    );
                }
            }
        }
    }

    /// SQLite compiles some statements again once the tables they read have changed (a
    /// join did, each time: a writer's lookups ran at a third of their speed).
    #[test]
    fn statements_are_not_compiled_again_after_writes() {
        let conn = Connection::open_in_memory().unwrap();
        let schema = Schema::fresh(Layout::Single, Values::InRows);
        schema.create(&conn, "").unwrap();
        crate::db::names::create(&conn, false).unwrap();
        let table = &schema.tables[0];
        for i in 0..300u32 {
            let mut key = [0u8; 32];
            key[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
            let key = crate::key::Key::from_slice(&key).unwrap();
            table.add(&conn, &key, 1, b"x", 0, Insert::VALUE).unwrap();
            for first in [Generation::Young, Generation::Old] {
                let mut select = conn.prepare_cached(table.select(first, false)).unwrap();
                select.exists([&key.as_bytes()[..]]).unwrap();
            }
            conn.prepare_cached(&table.touch)
                .unwrap()
                .execute(params![&key.as_bytes()[..], 5])
                .unwrap();
            conn.prepare_cached(&table.apart.record)
                .unwrap()
                .execute(params![&key.as_bytes()[..], 6])
                .unwrap();
        }
        let statements = [&table.exists, &table.touch, &table.has_key, &table.apart.record];
        let selects =
            [Generation::Young, Generation::Old].map(|first| &table.select(first, false).text[..]);
        let statements = statements.into_iter().map(String::as_str).chain(selects);
        for sql in statements.chain(key_index::PREFIX_IDS) {
            let stmt = conn.prepare_cached(sql).unwrap();
            let again = stmt.get_status(rusqlite::StatementStatus::RePrepare);
            assert_eq!(again, 0, "{sql}");
        }
    }

    #[test]
    fn keys_that_share_a_prefix_are_two_rows_found_apart_and_an_insert_of_a_stored_key_adds_none() {
        let conn = Connection::open_in_memory().unwrap();
        let schema = Schema::fresh(Layout::Single, Values::InRows);
        schema.create(&conn, "").unwrap();
        let table = &schema.tables[0];
        let first = [7u8; 32];
        let mut second = first;
        second[31] = 8;
        for (key, data) in [(&first, "a"), (&second, "b"), (&first, "c")] {
            let key = crate::key::Key::from_slice(key).unwrap();
            let added = table.add(&conn, &key, 1, data.as_bytes(), 0, Insert::VALUE).unwrap();
            assert_eq!(added, usize::from(data != "c"), "{data}");
        }
        // A key of the same prefix that is not stored is not found, in either index.
        let mut third = first;
        third[31] = 9;
        let [first, second, third] =
            [first, second, third].map(|k| crate::key::Key::from_slice(&k).unwrap());
        for moved in [false, true] {
            if moved {
                conn.execute_batch(&format!(
                    "INSERT INTO {OLD} SELECT * FROM {YOUNG}; DELETE FROM {YOUNG};",
                    OLD = key_index::OLD,
                    YOUNG = key_index::YOUNG
                ))
                .unwrap();
            }
            // Either order finds each row, and says in which index; the second key of a
            // shared prefix is found by neither first lookup (the first id of the prefix).
            let generation = if moved { Generation::Old } else { Generation::Young };
            for first_asked in [Generation::Young, Generation::Old] {
                let mut select = conn.prepare(table.select(first_asked, false)).unwrap();
                for (key, data, way) in [(&first, b"a", Some(generation)), (&second, b"b", None)] {
                    let (got, found): (Vec<u8>, i64) = select
                        .query_row([&key.as_bytes()[..]], |r| Ok((r.get(1)?, r.get(3)?)))
                        .unwrap();
                    assert_eq!(&got, data);
                    assert_eq!(Generation::of_column(found), way, "{first_asked:?} {key}");
                }
                assert!(!select.exists([&third.as_bytes()[..]]).unwrap());
            }
            for (key, stored) in [(&first, true), (&second, true), (&third, false)] {
                assert_eq!(table.stored(&conn, key, Lookup::BOTH).unwrap(), stored, "{key}");
                // Told the old index holds none of the prefix, only the young one is read.
                let young = Lookup { young: true, old: false };
                assert_eq!(table.stored(&conn, key, young).unwrap(), stored && !moved);
            }
        }
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, format::USES_APART);
    }
}
