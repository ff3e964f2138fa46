//! The object row, described once: its columns, the SQL that reads each, and the readers
//! that take a column back by its name.
//!
//! A row of an object table holds `rowid` (rows are appended in rowid order), `key` (the
//! 32-byte blake3 hash of the object), `raw_len` (the object's length), `data` (its stored
//! bytes: a gzip member, a zstd frame, or the manifest of a chunked object), `used` (its
//! last use in Unix milliseconds, [`MEMBER`] for a member of a model, or [`PINNED`]), in
//! a stash whose values are in a file (`values/`) `place` (where the stored bytes are
//! there; `data` is then empty), and in a stash with models (`models.rs`) `model` (the
//! model a member came with; added by the first model, so NULL in older rows).
//!
//! Every statement that reads object rows lists what it reads as [`Columns`], and every
//! reader takes the columns back through [`Columns::read`] by name: adding a column is
//! [`Column`], [`create_table`] and a migration step (`format.rs`), and no reader changes
//! position.

use rusqlite::types::ValueRef;

use crate::key::Key;
use crate::settings::values::Values;

/// The `used` value of a pinned object: above every time, so that eviction, which takes
/// the least recently used first, never reaches it and no later use replaces it.
pub(crate) const PINNED: i64 = i64::MAX;

/// The `used` value of a member of a model: above every time (eviction takes a model whole,
/// by its own last use, never a member alone) and below [`PINNED`]; the largest integer
/// of 6 bytes, as small on disk as a time.
pub(crate) const MEMBER: i64 = (1 << 47) - 1;

/// Bits of a [`Place`] that hold the value's length: values of [`MAX_PLACED`] bytes or more
/// stay in their row.
const LEN_BITS: u32 = 20;
/// Values this long or longer stay in their row (the writer's large rows, written through
/// blob I/O).
pub(crate) const MAX_PLACED: usize = 1 << LEN_BITS;

/// A column of an object row, or a value a statement derives from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    Rowid,
    Key,
    RawLen,
    /// The stored bytes held in the row (empty where they are in the file of values).
    Data,
    /// The stored bytes' length, wherever they are.
    StoredLen,
    /// The place of the stored bytes in the file of values; NULL where they are in the row.
    Place,
    /// The last use, or [`PINNED`].
    Used,
    /// The stored bytes if they are a manifest, else NULL (what a delete returns, so that
    /// the chunks of a chunked object can be released).
    Manifest,
    /// Whether the stored bytes are a manifest.
    IsManifest,
    /// The model a member came with (its home), NULL for a loose object.
    Model,
    /// Which generation of the key index found the row (added by `KeyIndex::select` after
    /// the other columns; `first_generation.rs`).
    Found,
}

impl Column {
    /// The SQL that reads the column from a row of a stash whose values are where `values`
    /// says.
    pub(crate) fn sql(self, values: Values) -> &'static str {
        match (self, values) {
            (Column::Rowid, _) => "rowid",
            (Column::Key, _) => "key",
            (Column::RawLen, _) => "raw_len",
            (Column::Data, _) => "data",
            (Column::StoredLen, Values::InRows) => "length(data)",
            (Column::StoredLen, Values::InFile) => "coalesce(place & 1048575, length(data))",
            (Column::Place, Values::InRows) => "NULL",
            (Column::Place, Values::InFile) => "place",
            (Column::Used, _) => "used",
            // x'4f53434d' is the manifest's magic, "OSCM" (`large/manifest.rs`).
            (Column::Manifest, _) => "CASE WHEN substr(data, 1, 4) = x'4f53434d' THEN data END",
            (Column::IsManifest, _) => "substr(data, 1, 4) = x'4f53434d'",
            (Column::Model, _) => "model",
            (Column::Found, _) => "",
        }
    }
}

/// The columns a statement reads, in order: the SQL of its column list, and where each
/// column is in the rows it returns.
#[derive(Clone, Debug)]
pub(crate) struct Columns {
    list: Vec<Column>,
    sql: String,
}

impl Columns {
    /// `list`, as read from the rows of a stash whose values are where `values` says.
    pub(crate) fn new(values: Values, list: &[Column]) -> Self {
        let listed: Vec<&str> =
            list.iter().filter(|c| **c != Column::Found).map(|c| c.sql(values)).collect();
        Columns { list: list.to_vec(), sql: listed.join(", ") }
    }

    /// The SQL of the column list (without [`Column::Found`], which the key index's query
    /// adds itself).
    pub(crate) fn sql(&self) -> &str {
        &self.sql
    }

    /// Whether the statement reads `column`.
    fn has(&self, column: Column) -> bool {
        self.list.contains(&column)
    }

    /// Where `column` is in the rows the statement returns.
    fn at(&self, column: Column) -> usize {
        self.list
            .iter()
            .position(|c| *c == column)
            .unwrap_or_else(|| panic!("a statement read {column:?}, which its columns do not list"))
    }

    /// A row the statement returned, its columns by name.
    pub(crate) fn read<'a>(&'a self, row: &'a rusqlite::Row<'a>) -> RowOf<'a> {
        RowOf { row, columns: self }
    }
}

/// A statement that reads object rows: its SQL, and the columns its rows hold (read back
/// by name through [`Columns::read`]).
#[derive(Debug)]
pub(crate) struct Sql {
    pub text: String,
    pub columns: Columns,
}

impl Sql {
    pub(crate) fn new(text: String, columns: Columns) -> Self {
        Sql { text, columns }
    }
}

impl std::ops::Deref for Sql {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

/// A row of a statement of [`Columns`]: each column by its name.
pub(crate) struct RowOf<'a> {
    row: &'a rusqlite::Row<'a>,
    columns: &'a Columns,
}

impl<'a> RowOf<'a> {
    fn get_ref(&self, column: Column) -> rusqlite::Result<ValueRef<'a>> {
        self.row.get_ref(self.columns.at(column))
    }

    pub(crate) fn rowid(&self) -> rusqlite::Result<i64> {
        self.row.get(self.columns.at(Column::Rowid))
    }

    /// The key column's bytes (32 for a sound row).
    pub(crate) fn key_bytes(&self) -> rusqlite::Result<&'a [u8]> {
        Ok(blob(self.get_ref(Column::Key)?))
    }

    /// The row's key, if its key column holds one.
    pub(crate) fn key(&self) -> rusqlite::Result<Option<Key>> {
        Ok(Key::from_slice(self.key_bytes()?))
    }

    pub(crate) fn raw_len(&self) -> rusqlite::Result<i64> {
        self.row.get(self.columns.at(Column::RawLen))
    }

    /// The stored bytes held in the row.
    pub(crate) fn data(&self) -> rusqlite::Result<&'a [u8]> {
        self.get_ref(Column::Data)?.as_blob().map_err(Into::into)
    }

    pub(crate) fn stored_len(&self) -> rusqlite::Result<i64> {
        self.row.get(self.columns.at(Column::StoredLen))
    }

    /// Where the stored bytes are in the file of values, if they are there (a value that
    /// is no place, damage, reads as none: see [`RowOf::packed_place`]).
    pub(crate) fn place(&self) -> rusqlite::Result<Option<Place>> {
        Ok(self.packed_place()?.and_then(Place::unpack))
    }

    /// The place column as it holds it, for the reads that tell a damaged place from none
    /// (`value_log::read_value`).
    pub(crate) fn packed_place(&self) -> rusqlite::Result<Option<i64>> {
        self.row.get(self.columns.at(Column::Place))
    }

    pub(crate) fn used(&self) -> rusqlite::Result<i64> {
        self.row.get(self.columns.at(Column::Used))
    }

    /// The stored bytes if they are a manifest.
    pub(crate) fn manifest(&self) -> rusqlite::Result<Option<Vec<u8>>> {
        self.row.get(self.columns.at(Column::Manifest))
    }

    /// The model the row is a member of, if any (`db/models.rs`).
    pub(crate) fn model(&self) -> rusqlite::Result<Option<i64>> {
        self.row.get(self.columns.at(Column::Model))
    }

    /// Whether the stored bytes are a manifest (not when the row has none: damage).
    pub(crate) fn is_manifest(&self) -> rusqlite::Result<bool> {
        Ok(self.row.get::<_, Option<bool>>(self.columns.at(Column::IsManifest))?.unwrap_or(false))
    }

    /// Whether the statement reads `column`.
    pub(crate) fn reads(&self, column: Column) -> bool {
        self.columns.has(column)
    }

    /// The way the key index found the row, as its column holds it.
    pub(crate) fn found(&self) -> rusqlite::Result<i64> {
        self.row.get(self.columns.at(Column::Found))
    }

    /// The row as a scan of damaged files reads it: a value of the wrong type (damage) is
    /// read as empty or -1, so that the row fails its own check instead of stopping the
    /// scan; a column the statement does not read is empty.
    pub(crate) fn lenient(&self) -> rusqlite::Result<Lenient> {
        let has = |column| self.columns.has(column);
        let int = |column| {
            if has(column) { self.get_ref(column).map(|v| v.as_i64().ok()) } else { Ok(None) }
        };
        let bytes = |column| {
            if has(column) { self.get_ref(column).map(|v| blob(v).to_vec()) } else { Ok(vec![]) }
        };
        Ok(Lenient {
            rowid: self.rowid()?,
            key: bytes(Column::Key)?,
            raw_len: int(Column::RawLen)?.unwrap_or(-1),
            stored_len: int(Column::StoredLen)?.unwrap_or(0).max(0) as u64,
            data: bytes(Column::Data)?,
            place: int(Column::Place)?.and_then(Place::unpack),
        })
    }
}

/// A row read leniently (see [`RowOf::lenient`]): what the scanners of `verify`, `entries`
/// and salvage take.
#[derive(Debug)]
pub(crate) struct Lenient {
    pub rowid: i64,
    /// The key column's bytes: 32 for a sound row.
    pub key: Vec<u8>,
    /// The recorded raw length; -1 when the value is not an integer.
    pub raw_len: i64,
    /// The stored value's length in bytes.
    pub stored_len: u64,
    /// The stored value; empty for a listing, and for a value in the file of values, which
    /// `place` then names.
    pub data: Vec<u8>,
    /// Where the value is in the file of values, if it is there.
    pub place: Option<Place>,
}

impl Lenient {
    /// The row's key, if its key column holds one.
    pub(crate) fn key(&self) -> Option<Key> {
        Key::from_slice(&self.key)
    }
}

fn blob(value: ValueRef<'_>) -> &[u8] {
    match value {
        ValueRef::Blob(b) | ValueRef::Text(b) => b,
        _ => &[],
    }
}

/// The columns of an object table, in the order of its records (what the page scanner of
/// salvage reads, `check/pagescan.rs`), each with its declaration: `place` only in a stash
/// whose values are in a file, `model` only once the stash has models (added then, so it
/// comes last).
pub(crate) const TABLE: [(Column, &str); 7] = [
    (Column::Rowid, "rowid INTEGER PRIMARY KEY"),
    (Column::Key, "key BLOB NOT NULL"),
    (Column::RawLen, "raw_len INTEGER NOT NULL"),
    (Column::Data, "data BLOB NOT NULL"),
    (Column::Used, "used INTEGER NOT NULL DEFAULT 0"),
    (Column::Place, "place INTEGER"),
    (Column::Model, "model INTEGER"),
];

/// The columns of an object table of a stash whose values are where `values` says, with
/// the `model` column if `model`, in record order.
pub(crate) fn table_columns(values: Values, model: bool) -> Vec<(Column, &'static str)> {
    table_column_list(values, model).collect()
}

/// [`table_columns`] without a vector: the writer asks it for every row it inserts.
pub(crate) fn table_column_list(
    values: Values,
    model: bool,
) -> impl Iterator<Item = (Column, &'static str)> {
    TABLE
        .iter()
        .filter(move |(column, _)| match column {
            Column::Place => values == Values::InFile,
            Column::Model => model,
            _ => true,
        })
        .copied()
}

/// The SQL that makes the object table `name` of a stash whose values are where `values`
/// says (its key index is `key_index.rs`'s); the `model` column comes with the first model
/// ([`add_model_column`]).
pub(crate) fn create_table(name: &str, values: Values) -> String {
    let columns: Vec<&str> = table_columns(values, false).iter().map(|(_, decl)| *decl).collect();
    format!("CREATE TABLE {name}({});\n", columns.join(", "))
}

/// The SQL that gives the object table `name` its `model` column (no rewrite: rows made
/// before read NULL).
pub(crate) fn add_model_column(name: &str) -> String {
    format!("ALTER TABLE {name} ADD COLUMN model INTEGER;\n")
}

/// Where `column` is in a record of an object table of that shape.
pub(crate) fn on_page(column: Column, values: Values, model: bool) -> Option<usize> {
    table_columns(values, model).iter().position(|(c, _)| *c == column)
}

/// The columns an insert names (all but the rowid, in record order), and its parameters.
pub(crate) fn insert_columns(values: Values, model: bool) -> (String, String) {
    let columns: Vec<&str> = table_columns(values, model)[1..]
        .iter()
        .map(|(column, _)| column.sql(Values::InFile))
        .collect();
    let params: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
    (format!("({})", columns.join(", ")), params.join(", "))
}

/// Where a value is in the file of values: packed into one integer column, `at << 20 |
/// len`, so that a row pays one varint for it (the file may grow to 8 TiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub at: u64,
    pub len: usize,
}

impl Place {
    /// The column's value.
    pub(crate) fn pack(self) -> i64 {
        debug_assert!(self.len < MAX_PLACED);
        ((self.at << LEN_BITS) | self.len as u64) as i64
    }

    /// The place a column's value names; `None` for a value that cannot be one (damage).
    pub(crate) fn unpack(packed: i64) -> Option<Place> {
        let packed = u64::try_from(packed).ok()?;
        Some(Place { at: packed >> LEN_BITS, len: (packed & (MAX_PLACED as u64 - 1)) as usize })
    }

    /// The offset just past the value.
    pub(crate) fn end(self) -> u64 {
        self.at + self.len as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rusqlite::Connection;

    #[test]
    fn columns_are_read_by_name_whatever_their_order() {
        for values in [Values::InRows, Values::InFile] {
            let conn = Connection::open_in_memory().unwrap();
            conn.execute_batch(&create_table("t", values)).unwrap();
            let (columns, params) = insert_columns(values, false);
            let place = Place { at: 3, len: 2 }.pack();
            let sql = format!("INSERT INTO t{columns} VALUES ({params})");
            match values {
                Values::InRows => conn.execute(&sql, rusqlite::params![[7u8; 32], 5, b"OSCMx", 9]),
                Values::InFile => {
                    conn.execute(&sql, rusqlite::params![[7u8; 32], 5, b"", 9, place])
                }
            }
            .unwrap();
            let all = [
                Column::Used,
                Column::Place,
                Column::StoredLen,
                Column::IsManifest,
                Column::Rowid,
                Column::RawLen,
                Column::Key,
                Column::Data,
            ];
            let columns = Columns::new(values, &all);
            conn.query_row(&format!("SELECT {} FROM t", columns.sql()), [], |r| {
                let row = columns.read(r);
                assert_eq!(row.key()?, Key::from_slice(&[7; 32]));
                assert_eq!((row.rowid()?, row.raw_len()?, row.used()?), (1, 5, 9));
                match values {
                    Values::InRows => {
                        assert_eq!((row.data()?, row.stored_len()?), (&b"OSCMx"[..], 5));
                        assert!(row.is_manifest()? && row.place()?.is_none());
                    }
                    Values::InFile => {
                        assert_eq!(row.stored_len()?, 2);
                        assert_eq!(row.place()?, Some(Place { at: 3, len: 2 }));
                    }
                }
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn a_place_packs_into_one_integer_and_back() {
        for place in [
            Place { at: 0, len: 0 },
            Place { at: 0, len: MAX_PLACED - 1 },
            Place { at: (1 << 43) - 1, len: 891 },
        ] {
            let packed = place.pack();
            assert!(packed >= 0);
            assert_eq!(Place::unpack(packed), Some(place));
        }
        assert_eq!(Place::unpack(-1), None);
    }

    #[test]
    fn the_stored_length_reads_the_length_out_of_a_place() {
        let conn = Connection::open_in_memory().unwrap();
        let place = Place { at: 123_456_789, len: 891 }.pack();
        let len = Column::StoredLen.sql(Values::InFile);
        let sql = format!("SELECT {len} FROM (SELECT ?1 AS place, x'0102' AS data)");
        let len: i64 = conn.query_row(&sql, [place], |r| r.get(0)).unwrap();
        assert_eq!(len, 891);
        let len: i64 = conn.query_row(&sql, [rusqlite::types::Null], |r| r.get(0)).unwrap();
        assert_eq!(len, 2, "a value in its row");
    }
}
