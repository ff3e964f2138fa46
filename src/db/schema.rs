//! The schema of a stash: the object tables of its layout (each `table.rs`), made new or
//! read from a stash (format versions: `format.rs`), and the indexes its removals read.
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

use rusqlite::Connection;

use crate::db::format::{self, APPLICATION_ID};
pub(crate) use crate::db::key_index::KeyIndex;
use crate::db::meta::META;
use crate::db::names;
use crate::db::row;
pub(crate) use crate::db::table::{Adder, Insert, ModelSql, TableSql};
use crate::db::use_table::{self, UseSql};
use crate::error::{DbContext, Error, Result};
use crate::settings::layout::Layout;
use crate::settings::values::Values;

/// Page size of new stashes; see notes/design.md.
pub(crate) const PAGE_SIZE: u32 = 8192;

/// The statements of every table of a layout, indexed like [`Layout::table_of`].
#[derive(Debug)]
pub(crate) struct Schema {
    pub layout: Layout,
    pub tables: Vec<TableSql>,
    /// Whether its tables have narrow tables of uses beside them (`use_table.rs`).
    pub uses_apart: bool,
    /// Whether its tables had their `model` column when this schema was read (the first
    /// model gives it to them: a handle's writer knows at every transaction, `models.rs`).
    pub models: bool,
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
        Schema { layout, tables, uses_apart, models: false }
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
        let mut schema = Schema::new(layout, key_index, use_table::exists(conn, &first)?, stored);
        schema.models = has_column(conn, &first, "model")?;
        Ok(schema)
    }

    /// Gives every object table its `model` column, unless it has one: inside the
    /// writer's transaction that makes the first model (`models.rs`).
    pub(crate) fn add_model_columns(&self, conn: &Connection) -> Result<()> {
        if has_column(conn, &self.tables[0].name, "model")? {
            return Ok(());
        }
        let sql: String = self.tables.iter().map(|t| row::add_model_column(&t.name)).collect();
        conn.execute_batch(&sql).context(|| "giving the object tables a model column".into())
    }

    /// How many prepared statements a connection should cache, before its stash's layout
    /// is known.
    pub(crate) fn most_statements() -> usize {
        // Counted, not built: the SQL of 256 tables, made and dropped, was half of an open.
        Self::statements_of(Layout::Bucketed.table_count())
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
        Self::statements_of(self.tables.len())
    }

    fn statements_of(tables: usize) -> usize {
        tables * (TableSql::STATEMENTS + UseSql::STATEMENTS + ModelSql::STATEMENTS)
            + Self::META_STATEMENTS
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
/// [`Schema::migrate`]).
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
    /// Brings the object tables of a stash made by an earlier version up to what this one
    /// writes, each step of `format.rs`'s list that is no format change (their objects
    /// count as used at `now`); what it did, in words. One transaction a step.
    pub(crate) fn migrate(&self, conn: &Connection, now: i64) -> Result<Vec<&'static str>> {
        let mut done = Vec::new();
        if !has_uses(conn, self)? {
            self.alter(conn, |table| format::add_uses(table, now))?;
            done.push("now records when objects are used");
        }
        Ok(done)
    }

    /// Runs `sql` for every object table in one transaction.
    fn alter(&self, conn: &Connection, sql: impl Fn(&str) -> String) -> Result<()> {
        let mut batch = String::from("BEGIN IMMEDIATE;\n");
        for table in &self.tables {
            batch += &sql(&table.name);
        }
        batch += "COMMIT;";
        conn.execute_batch(&batch).map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            Error::db("bringing the stash's tables up to date", e)
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
    use crate::db::first_generation::Generation;
    use crate::db::key_filter::Lookup;
    use crate::db::key_index;
    use rusqlite::params;

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
            schema.add_model_columns(&conn).unwrap();
            schema.add_model_columns(&conn).unwrap();
            assert!(Schema::read(&conn, Layout::Single).unwrap().models);
            for sql in table.statements().into_iter().chain(table.models.statements()) {
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
