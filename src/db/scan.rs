//! Reading a table's rows in rowid order, a chunk per query: the one row scanner behind
//! `verify`, `entries` and salvage.
//!
//! Each chunk is one short query, so a scan of millions of rows never keeps the writer
//! waiting for long. Values of the wrong type (damage) are read as empty or -1, so a
//! damaged row fails its own check instead of stopping the scan; a rowid that does not
//! increase means a damaged B-tree led the cursor back, and ends the scan with an error
//! instead of going round forever.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use crate::error::Error;
use crate::key::Key;
use crate::settings::values::Values;
use crate::values::value_log::Place;

/// One row as a scan reads it.
#[derive(Debug)]
pub(crate) struct ScannedRow {
    pub rowid: i64,
    /// The key column's bytes: 32 for a sound row.
    pub key: Vec<u8>,
    /// The recorded raw length; -1 when the value is not an integer.
    pub raw_len: i64,
    /// The stored value's length in bytes.
    pub stored_len: u64,
    /// The stored value; empty for a listing (see [`Columns`]), and for a value in the file
    /// of values, which `place` then names.
    pub data: Vec<u8>,
    /// Where the value is in the file of values (`value_log.rs`), if it is there.
    pub place: Option<Place>,
}

impl ScannedRow {
    /// Reads a row whose columns are `rowid, key, raw_len, length(data), data, place`.
    pub(crate) fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<ScannedRow> {
        fn blob(value: ValueRef<'_>) -> Vec<u8> {
            match value {
                ValueRef::Blob(b) | ValueRef::Text(b) => b.to_vec(),
                _ => Vec::new(),
            }
        }
        Ok(ScannedRow {
            rowid: row.get(0)?,
            key: blob(row.get_ref(1)?),
            raw_len: row.get_ref(2)?.as_i64().unwrap_or(-1),
            stored_len: row.get_ref(3)?.as_i64().unwrap_or(0).max(0) as u64,
            data: blob(row.get_ref(4)?),
            place: row.get_ref(5)?.as_i64().ok().and_then(Place::unpack),
        })
    }

    /// The row's key, if its key column holds one.
    pub(crate) fn key(&self) -> Option<Key> {
        Key::from_slice(&self.key)
    }
}

/// What a scan reads of each row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Columns {
    /// Keys and sizes only (listing).
    Sizes,
    /// Keys, sizes and stored values (checking, salvage).
    Values,
}

/// The query of one chunk: rows of `table` after a rowid, in rowid order.
pub(crate) fn chunk_sql(table: &str, columns: Columns, stored: Values) -> String {
    let data = match columns {
        Columns::Sizes => "NULL",
        Columns::Values => "data",
    };
    let (len, place) = (stored.stored_len_sql(), stored.place_sql());
    format!(
        "SELECT rowid, key, raw_len, {len}, {data}, {place} FROM {table} WHERE rowid > ?1 \
         ORDER BY rowid LIMIT ?2"
    )
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

/// Up to `limit` rows after rowid `after`, read with `sql` (from [`chunk_sql`]), checked to
/// come in increasing rowid order.
pub(crate) fn chunk(
    conn: &Connection,
    sql: &str,
    after: i64,
    limit: usize,
) -> Result<Vec<ScannedRow>, ScanError> {
    let mut stmt = conn.prepare_cached(sql).map_err(ScanError::Sqlite)?;
    let rows = stmt
        .query_map(params![after, limit as i64], ScannedRow::read)
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

    #[test]
    fn chunks_follow_rowids_and_read_damage_as_empty() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t(rowid INTEGER PRIMARY KEY, key BLOB, raw_len INTEGER, data BLOB);
             INSERT INTO t VALUES (1, x'00', 3, x'616263'), (5, 7, 'x', NULL), (9, x'01', 1, x'61');",
        )
        .unwrap();
        let sql = chunk_sql("t", Columns::Values, Values::InRows);
        let first = chunk(&conn, &sql, 0, 2).unwrap();
        assert_eq!(first.iter().map(|r| r.rowid).collect::<Vec<_>>(), [1, 5]);
        assert_eq!(first[0].data, b"abc");
        assert_eq!((first[1].key.len(), first[1].raw_len, first[1].stored_len), (0, -1, 0));
        let rest = chunk(&conn, &sql, 5, 2).unwrap();
        assert_eq!(rest.len(), 1);
        let sizes = chunk(&conn, &chunk_sql("t", Columns::Sizes, Values::InRows), 0, 10).unwrap();
        assert!(sizes.iter().all(|r| r.data.is_empty()));
        assert_eq!(sizes[0].stored_len, 3);
    }
}
