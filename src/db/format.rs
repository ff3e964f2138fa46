//! What each feature adds to a stash's format: its table, and the format version it raises
//! the stash to at its first use (`schema.rs` lists the versions), so that a stash that
//! does not use a feature stays readable by versions that do not know it.

use rusqlite::{Connection, OptionalExtension};

use crate::error::{DbContext, Result};

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
