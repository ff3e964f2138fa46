//! Every format version of a stash, in one place: what each adds, when a stash reaches it,
//! and how an older stash is read or brought up to date. fjall's `FormatVersion` is the
//! model.
//!
//! A stash is a SQLite file whose `application_id` is [`APPLICATION_ID`] and whose
//! `user_version` is its format version. A feature that needs a newer format raises the
//! version only at its first use ([`raise`], in the transaction that makes its table), so
//! that a stash that does not use it stays readable by versions that do not know it; a
//! version reads every older format as it is, and refuses a newer one
//! (`Error::UnsupportedFormat`).
//!
//! | version | adds | reached |
//! |---|---|---|
//! | [`BASE`] 1 | the meta table; object tables with a unique index on the whole key | every stash |
//! | [`DICTS`] 2 | `objstash_dicts`: zstd dictionaries (`codec/zstd_dict.rs`) | the first dictionary stored |
//! | [`NAMES`] 3 | `objstash_names`, names as given, indexed by key (`names.rs`) | the first name, before 6 |
//! | [`CHUNKS`] 4 | `objstash_chunks`: chunks of large objects (`large/chunks.rs`) | the first chunked save |
//! | [`GENERATIONS`] 5 | generations of key-prefix indexes, young and old (`key_index.rs`) | creation |
//! | [`PACKED_NAMES`] 6 | names packed, indexed by key only once removals need it | the first name |
//! | [`COUNTED_MOVES`] 7 | the young index's moves counted, for the writer's filter (`key_filter.rs`) | creation, or the first move |
//! | [`USES_APART`] 8 | narrow tables of uses beside the object tables (`use_table.rs`) | creation |
//! | [`VALUES_IN_FILE`] 9 | values in a file beside the database, rows hold a `place` (`values/`) | creation with `Values::InFile` |
//! | [`MODELS`] 10 | models: `objstash_models`, `objstash_model_missing`, and a `model` column of the object tables (`models.rs`) | the first model |
//!
//! What is no format change, and how an older stash gets it at its next writable open:
//! - the `used` column of each object row (`row.rs`): [`add_uses`], every row counting as
//!   used at the open; versions that do not know the column read and write such a table as
//!   before (their new rows get use 0, the first to be evicted);
//! - the index of uses that eviction reads and the names' index by key that removals read,
//!   built at a stash's first cap, eviction or removal (`Schema::index_removals`).
//!
//! Adding a format: a constant below with its row in the table, [`NEWEST`] moved to it,
//! and the feature's first use calling [`raise`] (or `Schema::create` writing it). Adding a
//! step that is no format change: its SQL here, and the step in `Schema::migrate`.

use rusqlite::{Connection, OptionalExtension};

use crate::error::{DbContext, Error, Result};

/// `PRAGMA application_id` of every stash: "obst" in ASCII.
pub(crate) const APPLICATION_ID: i32 = 0x6f62_7374;

/// Object tables with a unique key index, the meta table: what every version reads.
pub(crate) const BASE: i64 = 1;
/// A stash that stores zstd dictionaries (rows older versions cannot decode).
pub(crate) const DICTS: i64 = 2;
/// A stash with names as given, indexed by key. This version reads it and makes 6 instead.
#[allow(dead_code)]
pub(crate) const NAMES: i64 = 3;
/// A stash that holds chunked objects.
pub(crate) const CHUNKS: i64 = 4;
/// Object tables found through generations of key-prefix indexes. This version reads it
/// and makes 7 or newer instead.
#[allow(dead_code)]
pub(crate) const GENERATIONS: i64 = 5;
/// Names packed and indexed by key only once needed.
pub(crate) const PACKED_NAMES: i64 = 6;
/// The young index's moves counted (what the writer's filter of keys needs).
pub(crate) const COUNTED_MOVES: i64 = 7;
/// Narrow tables of uses beside the object tables.
pub(crate) const USES_APART: i64 = 8;
/// Values in a file beside the database.
pub(crate) const VALUES_IN_FILE: i64 = 9;
/// Models: members kept and evicted with their root, roots of incomplete models kept out
/// of the object tables (older versions would evict members alone and serve such roots).
pub(crate) const MODELS: i64 = 10;
/// The newest format this version reads and writes.
pub(crate) const NEWEST: i64 = MODELS;

/// The format a new stash is made in: the newest its settings need.
pub(crate) fn of_new(values_in_file: bool, uses_apart: bool, generations: bool) -> i64 {
    match (values_in_file, uses_apart, generations) {
        (true, _, _) => VALUES_IN_FILE,
        (false, true, _) => USES_APART,
        // Made with its moves counted, so that its writer can keep a filter of its keys
        // from the first row (`key_filter.rs`).
        (false, false, true) => COUNTED_MOVES,
        (false, false, false) => BASE,
    }
}

/// Refuses a stash of a format newer than this version reads.
pub(crate) fn check_readable(path: &std::path::Path, version: i64) -> Result<()> {
    if version > NEWEST {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: version,
            supported: NEWEST,
        });
    }
    Ok(())
}

/// The SQL that gives an object table made before uses were recorded its `used` column;
/// the rows it holds count as used at `now`.
pub(crate) fn add_uses(table: &str, now: i64) -> String {
    format!("ALTER TABLE {table} ADD COLUMN used INTEGER NOT NULL DEFAULT {now};\n")
}

/// Whether the database on `conn` has the table `name`.
pub(crate) fn has_table(conn: &Connection, name: &str) -> Result<bool> {
    has(conn, "table", name)
}

/// Whether the database on `conn` has the index `name`.
pub(crate) fn has_index(conn: &Connection, name: &str) -> Result<bool> {
    has(conn, "index", name)
}

fn has(conn: &Connection, kind: &str, name: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM sqlite_schema WHERE type = ?1 AND name = ?2")
        .and_then(|mut stmt| stmt.query_row([kind, name], |_| Ok(())).optional())
        .map(|found| found.is_some())
        .context(|| format!("looking for the {kind} {name}"))
}

/// Raises the format version to `version` unless it is newer already; inside the caller's
/// transaction, with the feature's table.
pub(crate) fn raise(conn: &Connection, version: i64) -> Result<()> {
    let current: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .context(|| "reading the format version".to_string())?;
    if current < version {
        conn.pragma_update(None, "user_version", version)
            .context(|| "raising the format version".to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_only_goes_up_and_tables_are_found_by_name() {
        let conn = Connection::open_in_memory().unwrap();
        assert!(!has_table(&conn, "t").unwrap());
        conn.execute_batch("CREATE TABLE t(x)").unwrap();
        assert!(has_table(&conn, "t").unwrap());
        raise(&conn, 3).unwrap();
        raise(&conn, 2).unwrap();
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, 3);
    }
}
