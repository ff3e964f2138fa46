//! Names: the caller's own ids for objects (Speckle's ids, paths, anything up to
//! [`MAX_NAME_LEN`] bytes), each mapping to one content key; several names may share one
//! object.
//!
//! Names live in one `objstash_names(name, key)` table, whatever the layout, and an index
//! on the key lets removing an object drop its names in the same transaction. The table is
//! made by the first named save. The index by key is half of what a name costs (78 of 157
//! bytes for a name of 32 characters, `experiments/name_bytes`) and only removals read it,
//! so it is built with the other indexes removals read, at the stash's first cap, eviction
//! or removal (`Schema::index_removals`).
//!
//! Tables made since then (format 6, `format.rs`) also store a name of lowercase hex digits
//! (an even number of them: Speckle's ids, digests) as the bytes they spell, behind a tag
//! byte ([`NameForm::Packed`]): 17 bytes for a 32-character id instead of 32, 61 bytes a
//! name in all instead of 78. The stash's meta table records the form (`names_form`).
//! Tables made before (format 3, always indexed by key) hold names as given
//! ([`NameForm::Raw`]) and are read and written as they are; older versions refuse format
//! 6, as they would not find packed names and would read the whole table for each object
//! they removed.
//!
//! A name is only ever committed in a transaction where its object exists: the writer
//! inserts it with `WHERE EXISTS` on the object's row, after the run of rows that may
//! hold it. After a crash, in either mode, a name never points to an absent object.
//! Until then, the pending-names map makes a named save visible to every read at once,
//! as the pending map does for rows.

use std::borrow::Cow;

use rusqlite::{Connection, OptionalExtension};

use crate::db::format;
use crate::db::key_index::KeyIndex;
use crate::error::{DbContext, Error, Result};
use crate::key::Key;

/// The longest name, in bytes. Names are keys of a B-tree: beyond a few hundred bytes they
/// spill onto overflow pages and every lookup reads more.
pub const MAX_NAME_LEN: usize = 1024;

/// The names table.
pub(crate) const TABLE: &str = "objstash_names";

/// How a names table stores names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameForm {
    /// As given (tables made before format 6).
    Raw,
    /// A name of an even number of lowercase hex digits as the bytes they spell after
    /// [`PACKED`]; any other name as given, after [`ESCAPED`] if it begins with either tag.
    Packed,
}

/// The tag of a name stored as the bytes its hex digits spell.
const PACKED: u8 = 0x01;
/// The tag of a name stored as given that begins with a tag byte.
const ESCAPED: u8 = 0x00;
/// The meta row that records a names table's form.
const FORM_SETTING: &str = "names_form";

impl NameForm {
    /// The bytes the table holds for `name`.
    pub(crate) fn store(self, name: &[u8]) -> Cow<'_, [u8]> {
        if self == NameForm::Raw {
            return Cow::Borrowed(name);
        }
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        if name.len().is_multiple_of(2) && name.iter().all(|&b| digit(b).is_some()) {
            let mut packed = Vec::with_capacity(1 + name.len() / 2);
            packed.push(PACKED);
            packed.extend(
                name.chunks(2)
                    .map(|pair| digit(pair[0]).unwrap_or(0) << 4 | digit(pair[1]).unwrap_or(0)),
            );
            return Cow::Owned(packed);
        }
        match name.first() {
            Some(&(PACKED | ESCAPED)) => Cow::Owned([&[ESCAPED], name].concat()),
            _ => Cow::Borrowed(name),
        }
    }

    /// The name whose stored bytes are `stored`.
    pub(crate) fn name(self, stored: &[u8]) -> Vec<u8> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        match (self, stored.split_first()) {
            (NameForm::Packed, Some((&PACKED, bytes))) => bytes
                .iter()
                .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
                .collect(),
            (NameForm::Packed, Some((&ESCAPED, rest))) => rest.to_vec(),
            _ => stored.to_vec(),
        }
    }

    /// The form of the names table on `conn` (which must have one).
    pub(crate) fn read(conn: &Connection) -> Result<NameForm> {
        let form: Option<String> = crate::db::meta::read_setting(conn, FORM_SETTING)?;
        Ok(if form.as_deref() == Some("packed") { NameForm::Packed } else { NameForm::Raw })
    }
}

/// Checks a caller's name: not empty, at most [`MAX_NAME_LEN`] bytes.
pub(crate) fn check(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::BadName { len: name.len(), limit: MAX_NAME_LEN });
    }
    Ok(())
}

/// Whether the stash on `conn` has a names table.
pub(crate) fn table_exists(conn: &Connection) -> Result<bool> {
    format::has_table(conn, TABLE)
}

/// Makes the names table and its total inside the writer's open transaction, if it is not
/// there, with its index by key if `by_key` (the stash has the indexes removals read), and
/// raises the format.
pub(crate) fn create(conn: &Connection, by_key: bool) -> Result<()> {
    if table_exists(conn)? {
        return Ok(());
    }
    let mut sql = format!(
        "CREATE TABLE {TABLE}(name BLOB PRIMARY KEY, key BLOB NOT NULL) WITHOUT ROWID;\n\
         INSERT OR IGNORE INTO {META}(name, value) VALUES ('names', 0);\n\
         INSERT OR REPLACE INTO {META}(name, value) VALUES ('{FORM_SETTING}', 'packed');\n",
        META = crate::db::meta::META
    );
    if by_key {
        sql += &index_by_key();
    }
    conn.execute_batch(&sql).context(|| "making the names table".to_string())?;
    format::raise(conn, format::PACKED_NAMES)
}

/// The statement that indexes the names by key, unless they are.
pub(crate) fn index_by_key() -> String {
    format!("CREATE INDEX IF NOT EXISTS {TABLE}_key ON {TABLE}(key);\n")
}

/// Whether the names are indexed by key.
pub(crate) fn indexed_by_key(conn: &Connection) -> Result<bool> {
    format::has_index(conn, &format!("{TABLE}_key"))
}

/// The key `name` maps to in the database, whose names table stores names in `form`.
/// Every name with its key, as given (in the table's order).
pub(crate) fn all(conn: &Connection, form: NameForm) -> Result<Vec<(Vec<u8>, Key)>> {
    let rows: Vec<(Vec<u8>, Vec<u8>)> = conn
        .prepare(&format!("SELECT name, key FROM {TABLE}"))
        .and_then(|mut stmt| stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .context(|| "listing the names".to_string())?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, key)| Some((form.name(&name), Key::from_slice(&key)?)))
        .collect())
}

pub(crate) fn lookup(conn: &Connection, form: NameForm, name: &[u8]) -> Result<Option<Key>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT key FROM {TABLE} WHERE name = ?1"))
        .context(|| "preparing a name lookup".to_string())?;
    let key: Option<Vec<u8>> = stmt
        .query_row([&form.store(name)[..]], |r| r.get(0))
        .optional()
        .context(|| "looking up a name".to_string())?;
    Ok(key.and_then(|bytes| Key::from_slice(&bytes)))
}

/// Statements the writer runs on names.
pub(crate) struct NameSql;

impl NameSql {
    /// Adds a name for an object of `table` if that object exists; 1 change if added.
    pub(crate) fn insert(table: &str, key_index: KeyIndex) -> String {
        format!(
            "INSERT OR IGNORE INTO {TABLE}(name, key) SELECT ?1, ?2 \
             WHERE EXISTS (SELECT 1 FROM {table} WHERE {})",
            key_index.matches("?2")
        )
    }

    /// Points an existing name at another object of `table`, if that object exists.
    pub(crate) fn repoint(table: &str, key_index: KeyIndex) -> String {
        format!(
            "UPDATE {TABLE} SET key = ?2 WHERE name = ?1 AND key != ?2 \
             AND EXISTS (SELECT 1 FROM {table} WHERE {})",
            key_index.matches("?2")
        )
    }

    /// Adds a name for an object the transaction has just written or found.
    pub(crate) const INSERT_KNOWN: &str =
        "INSERT OR IGNORE INTO objstash_names(name, key) VALUES (?1, ?2)";
    /// Points an existing name at an object the transaction has just written or found.
    pub(crate) const REPOINT_KNOWN: &str =
        "UPDATE objstash_names SET key = ?2 WHERE name = ?1 AND key != ?2";

    pub(crate) const DELETE_BY_KEY: &str = "DELETE FROM objstash_names WHERE key = ?1";
    pub(crate) const DELETE: &str = "DELETE FROM objstash_names WHERE name = ?1";
}

/// How many names the stash holds, counted (0 without a names table).
pub(crate) fn count(conn: &Connection) -> Result<u64> {
    if !table_exists(conn)? {
        return Ok(0);
    }
    let names: i64 = conn
        .query_row(&format!("SELECT count(*) FROM {TABLE}"), [], |r| r.get(0))
        .context(|| "counting names".to_string())?;
    Ok(names as u64)
}

/// Calls `f` with every name and its key (names whose key has the wrong length are left
/// out).
#[cfg(feature = "remote")]
pub(crate) fn each(conn: &Connection, mut f: impl FnMut(&[u8], Key)) -> Result<()> {
    if !table_exists(conn)? {
        return Ok(());
    }
    let form = NameForm::read(conn)?;
    let mut stmt = conn
        .prepare(&format!("SELECT name, key FROM {TABLE}"))
        .context(|| "preparing a scan of the names".to_string())?;
    let mut rows = stmt.query([]).context(|| "scanning the names".to_string())?;
    while let Some(row) = rows.next().context(|| "scanning the names".to_string())? {
        let name = row.get_ref(0).ok().and_then(|v| v.as_blob().ok());
        let key = row.get_ref(1).ok().and_then(|v| v.as_blob().ok()).and_then(Key::from_slice);
        if let (Some(name), Some(key)) = (name, key) {
            f(&form.name(name), key);
        }
    }
    Ok(())
}

/// Calls `f` with the key of every name (`None` for a key of the wrong length).
pub(crate) fn each_key(conn: &Connection, mut f: impl FnMut(Option<Key>)) -> Result<()> {
    if !table_exists(conn)? {
        return Ok(());
    }
    let mut stmt = conn
        .prepare(&format!("SELECT key FROM {TABLE}"))
        .context(|| "preparing a scan of the names".to_string())?;
    let mut rows = stmt.query([]).context(|| "scanning the names".to_string())?;
    while let Some(row) = rows.next().context(|| "scanning the names".to_string())? {
        let key = row.get_ref(0).ok().and_then(|v| v.as_blob().ok()).and_then(Key::from_slice);
        f(key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_stored_apart_and_read_back() {
        let names: [&[u8]; 10] = [
            b"8f2a",
            b"0123456789abcdef0123456789abcdef",
            b"8F2A",
            b"8f2",
            b"wall",
            b"\x01ab",
            b"\x00",
            b"\x01",
            b"ab\x00",
            b"g0",
        ];
        let mut stored = std::collections::HashSet::new();
        for name in names {
            assert_eq!(NameForm::Raw.store(name), name);
            let packed = NameForm::Packed.store(name);
            assert_eq!(NameForm::Packed.name(&packed), name, "{name:?}");
            assert!(stored.insert(packed.to_vec()), "{name:?} stored as another name");
        }
        let id = NameForm::Packed.store(b"0123456789abcdef0123456789abcdef");
        assert_eq!(id.len(), 17);
        assert_eq!(NameForm::Packed.store(b"wall"), &b"wall"[..]);
    }

    #[test]
    fn names_are_checked() {
        assert!(check(b"").is_err());
        assert!(check(&[b'a'; MAX_NAME_LEN]).is_ok());
        assert!(check(&[b'a'; MAX_NAME_LEN + 1]).is_err());
    }
}
