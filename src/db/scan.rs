//! Reading a table's rows in rowid order, a chunk per query: the one row scanner behind
//! `verify`, `entries` and salvage (each row read leniently, `row.rs`).
//!
//! Each chunk is one short query, so a scan of millions of rows never keeps the writer
//! waiting for long. Values of the wrong type (damage) are read as empty or -1, so a
//! damaged row fails its own check instead of stopping the scan; a rowid that does not
//! increase means a damaged B-tree led the cursor back, and ends the scan with an error
//! instead of going round forever.

use rusqlite::{Connection, params};

use crate::db::row::{Lenient, Sql};
use crate::error::Error;

/// The query of one chunk: `columns` of the rows of `table` after a rowid, in rowid order.
pub(crate) fn chunk_sql(table: &str, columns: &str) -> String {
    format!("SELECT {columns} FROM {table} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2")
}

/// Why a scan stopped.
#[derive(Debug)]
pub(crate) enum ScanError {
    /// SQLite failed to read the chunk.
    Sqlite(rusqlite::Error),
    /// The B-tree gave a rowid at or below one already read.
    Backwards { rowid: i64, after: i64 },
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Sqlite(e) => write!(f, "{e}"),
            ScanError::Backwards { rowid, after } => {
                write!(f, "the table's b-tree is damaged (row {rowid} came after row {after})")
            }
        }
    }
}

impl ScanError {
    /// The crate's error for a scan that stopped while doing `context`.
    pub(crate) fn into_error(self, context: String) -> Error {
        match self {
            ScanError::Sqlite(e) => Error::db(context, e),
            backwards => Error::Damaged { context, reason: backwards.to_string() },
        }
    }
}

/// Up to `limit` rows after rowid `after`, read with `sql` (of [`chunk_sql`]), each read
/// leniently (`row.rs`), checked to come in increasing rowid order.
pub(crate) fn chunk(
    conn: &Connection,
    sql: &Sql,
    after: i64,
    limit: usize,
) -> Result<Vec<Lenient>, ScanError> {
    let mut stmt = conn.prepare_cached(sql).map_err(ScanError::Sqlite)?;
    let rows = stmt
        .query_map(params![after, limit as i64], |r| sql.columns.read(r).lenient())
        .map_err(ScanError::Sqlite)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(ScanError::Sqlite)?;
    let mut previous = after;
    for row in &rows {
        if row.rowid <= previous {
            return Err(ScanError::Backwards { rowid: row.rowid, after: previous });
        }
        previous = row.rowid;
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::row::{Column, Columns};
    use crate::settings::values::Values;

    #[test]
    fn chunks_follow_rowids_and_read_damage_as_empty() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t(rowid INTEGER PRIMARY KEY, key BLOB, raw_len INTEGER, data BLOB);
             INSERT INTO t VALUES (1, x'00', 3, x'616263'), (5, 7, 'x', NULL), (9, x'01', 1, x'61');",
        )
        .unwrap();
        let sql = |list: &[Column]| {
            let columns = Columns::new(Values::InRows, list);
            Sql { text: chunk_sql("t", columns.sql()), columns }
        };
        use Column as C;
        let values = sql(&[C::Rowid, C::Key, C::RawLen, C::StoredLen, C::Data, C::Place]);
        let first = chunk(&conn, &values, 0, 2).unwrap();
        assert_eq!(first.iter().map(|r| r.rowid).collect::<Vec<_>>(), [1, 5]);
        assert_eq!(first[0].data, b"abc");
        assert_eq!((first[1].key.len(), first[1].raw_len, first[1].stored_len), (0, -1, 0));
        let rest = chunk(&conn, &values, 5, 2).unwrap();
        assert_eq!(rest.len(), 1);
        let sizes = chunk(&conn, &sql(&[C::Rowid, C::Key, C::RawLen, C::StoredLen]), 0, 10);
        let sizes = sizes.unwrap();
        assert!(sizes.iter().all(|r| r.data.is_empty()));
        assert_eq!(sizes[0].stored_len, 3);
    }
}
