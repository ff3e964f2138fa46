//! Uses recorded apart from the object rows (format 8): a narrow table beside each object
//! table, `<table>_uses(id, used)`, one row per object read since the uses were last
//! folded into the rows.
//!
//! A use written into the object's row rewrites the row's page, which holds about nine
//! rows: at ten million objects, a page written to the log and checkpointed again for
//! every use. A row of the narrow table takes 16 bytes, so its pages hold hundreds: the
//! same uses cost the writer a fifth of the time and a sixth of the bytes (`experiments`
//! `use_log`), and `get_many` on two threads ran 1.26x-1.43x faster while the writer
//! recorded its uses (notes/experiments.md). A stash without a cap only ever reads its
//! uses to expire objects by age or to report the oldest, so a writer without a cap writes
//! them here; eviction first folds them into the rows (the latest of the two wins, a pin
//! is never overwritten), then reads the rows' order as before. A writer with a cap writes
//! its uses into the rows, since it folds before every eviction anyway.
//!
//! An object's last use is the later of its row's `used` and its row in the narrow table.
//! A narrow row left by an object that was removed is harmless: an object stored later
//! under the same rowid was saved after that use, so its own `used` is later, and the
//! fold keeps the later. Stashes made before format 8 keep recording uses in the rows.

use rusqlite::Connection;

use crate::db::key_index::{GENERATIONS, KeyIndex, prefix_entries};
use crate::db::row::PINNED;
use crate::error::{DbContext, Result};

/// The narrow table's statements for one object table.
#[derive(Debug)]
pub(crate) struct UseSql {
    /// Records a use of the object `?1` at `?2`, unless its narrow row is as recent. With
    /// generations of key indexes, under every rowid of the key's prefix, read from the
    /// indexes alone: the writer reads no object row to record a use (two keys sharing a
    /// prefix, a rare event, both get it; a pinned row's own use stays the largest).
    pub record: String,
    /// Forgets the narrow row of the object at rowid `?1` (a removal).
    pub forget: String,
    /// Folds every narrow row into its object row (the later use wins).
    pub fold: String,
    /// Empties the narrow table (after `fold`).
    pub clear: String,
    /// Whether the narrow table has a row: a fold of an empty one is skipped, since
    /// `clear`'s truncation rewrites the table's root page even when it is empty (in the
    /// bucketed layout, 256 pages in the log of every eviction of a capped stash).
    pub any: String,
    /// The earliest last use of an unpinned object, counting both places.
    pub first_use: String,
}

/// The narrow table of uses beside the object table `table`.
pub(crate) fn table_name(table: &str) -> String {
    format!("{table}_uses")
}

impl UseSql {
    /// How many statements it has.
    pub(crate) const STATEMENTS: usize = 6;

    /// Every statement, for the tests that prepare them all.
    #[cfg(test)]
    pub(crate) fn statements(&self) -> [&str; Self::STATEMENTS] {
        let UseSql { record, forget, fold, clear, any, first_use } = self;
        [record, forget, fold, clear, any, first_use]
    }

    /// The statements of the narrow table beside `table`, whose rows `key_index` finds.
    pub(crate) fn new(table: &str, key_index: KeyIndex) -> Self {
        let uses = table_name(table);
        let ids = match key_index {
            KeyIndex::Generations => GENERATIONS
                .map(|generation| prefix_entries(generation, "id, ?2", "?1"))
                .join(" UNION ALL "),
            KeyIndex::Full => format!("SELECT rowid, ?2 FROM {table} WHERE key = ?1"),
        };
        UseSql {
            record: format!(
                "INSERT INTO {uses}(id, used) {ids} \
                 ON CONFLICT(id) DO UPDATE SET used = excluded.used \
                 WHERE excluded.used > {uses}.used"
            ),
            forget: format!("DELETE FROM {uses} WHERE id = ?1"),
            fold: format!(
                "UPDATE {table} SET used = u.used FROM {uses} AS u \
                 WHERE {table}.rowid = u.id AND {table}.used < u.used"
            ),
            clear: format!("DELETE FROM {uses}"),
            any: format!("SELECT EXISTS (SELECT 1 FROM {uses})"),
            // The rows in order of their own use, up to the first without a narrow row
            // (every row after it was used later than it), and every narrow row's later use.
            first_use: format!(
                "SELECT min(used) FROM (\
                   SELECT * FROM (SELECT used FROM {table} WHERE used < {PINNED} \
                     AND NOT EXISTS (SELECT 1 FROM {uses} WHERE id = {table}.rowid) \
                     ORDER BY used LIMIT 1) \
                   UNION ALL \
                   SELECT max(o.used, u.used) FROM {uses} AS u JOIN {table} AS o \
                     ON o.rowid = u.id WHERE o.used < {PINNED})"
            ),
        }
    }

    /// Creates the narrow table beside `table`.
    pub(crate) fn create(table: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {}(id INTEGER PRIMARY KEY, used INTEGER NOT NULL);\n",
            table_name(table)
        )
    }
}

/// Whether the stash whose first object table is `first_table` records uses apart.
pub(crate) fn exists(conn: &Connection, first_table: &str) -> Result<bool> {
    crate::db::format::has_table(conn, &table_name(first_table))
}

/// Folds the narrow tables into their object tables (see [`UseSql::fold`]), within the
/// caller's transaction.
pub(crate) fn fold<'a>(conn: &Connection, tables: impl Iterator<Item = &'a UseSql>) -> Result<()> {
    for sql in tables {
        let any = conn
            .prepare_cached(&sql.any)
            .and_then(|mut stmt| stmt.query_row([], |r| r.get::<_, bool>(0)))
            .context(|| "reading the uses of objects".into())?;
        if !any {
            continue;
        }
        for step in [&sql.fold, &sql.clear] {
            conn.prepare_cached(step)
                .and_then(|mut stmt| stmt.execute([]))
                .context(|| "folding the uses of objects into their rows".into())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::schema::Schema;
    use crate::settings::layout::Layout;
    use crate::settings::values::Values;

    /// Pages the write-ahead log of the database at `path` holds.
    fn logged_pages(path: &std::path::Path) -> u64 {
        let log = std::fs::metadata(crate::files::sibling(path, "-wal")).map_or(0, |m| m.len());
        log.saturating_sub(32) / (4096 + 24)
    }

    #[test]
    fn folding_empty_narrow_tables_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uses.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "page_size", 4096).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        let schema = Schema::new(Layout::Bucketed, KeyIndex::Generations, true, Values::InRows);
        schema.create(&conn, "").unwrap();
        let fold_all = || {
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); BEGIN IMMEDIATE").unwrap();
            fold(&conn, schema.tables.iter().map(|t| &t.apart)).unwrap();
            conn.execute_batch("COMMIT").unwrap();
            logged_pages(&path)
        };
        // 256 empty narrow tables: no page changes (a truncation would log each root).
        assert_eq!(fold_all(), 0);
        // One use recorded apart is folded into its row, and its narrow table emptied.
        let table = &schema.tables[7];
        conn.execute(
            &format!(
                "INSERT INTO {}(key, raw_len, data, used) VALUES (?1, 1, x'00', 5)",
                table.name
            ),
            [&[7u8; 32][..]],
        )
        .unwrap();
        let id = conn.last_insert_rowid();
        conn.execute(
            &format!("INSERT INTO {}(id, used) VALUES (?1, 9)", table_name(&table.name)),
            [id],
        )
        .unwrap();
        let pages = fold_all();
        assert!((1..16).contains(&pages), "{pages} pages logged");
        let used: i64 = conn
            .query_row(&format!("SELECT used FROM {} WHERE rowid = ?1", table.name), [id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(used, 9);
        assert_eq!(fold_all(), 0);
    }
}
