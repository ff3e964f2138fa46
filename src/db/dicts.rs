//! The dictionary table, `objstash_dicts` (format 2): every zstd dictionary a stash has
//! used (`codec/zstd_dict.rs`), never deleted, so that every row stays readable; and how a
//! handle reads the ones other handles store after it opened.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, params};

use crate::codec::zstd_dict::{Dictionaries, Dictionary, Source};
use crate::db::format;
use crate::error::{DbContext, Error, Result};

/// The table holding every dictionary a stash has used.
pub(crate) const TABLE: &str = "objstash_dicts";

/// The dictionaries stored in `conn`'s database, for a file nothing else writes
/// (salvage, repair): these are all it will ever hold.
pub(crate) fn load(conn: &Connection) -> Result<Dictionaries> {
    Ok(Dictionaries::new(read_stored(conn, None)?, None))
}

/// The dictionaries of the live stash at `path`, read on `conn`; dictionaries other
/// handles store later are read from `path` when a row names one.
pub(crate) fn open(conn: &Connection, path: PathBuf, busy: Duration) -> Result<Dictionaries> {
    Ok(Dictionaries::new(read_stored(conn, None)?, Some(Box::new(StashFile { path, busy }))))
}

/// Stores every dictionary of `dicts` in `conn`'s database, the current one last
/// (salvage).
pub(crate) fn store_all(dicts: &Dictionaries, conn: &Connection) -> Result<()> {
    for dict in dicts.all() {
        store(conn, &dict, 0)?;
    }
    Ok(())
}

/// The stash's file, read for dictionaries stored after a handle opened.
#[derive(Debug)]
struct StashFile {
    path: PathBuf,
    busy: Duration,
}

impl Source for StashFile {
    /// On a read connection of its own: a lookup happens once per dictionary a handle meets.
    fn read(&self, id: Option<u32>) -> Result<Vec<Arc<Dictionary>>> {
        let conn = crate::db::readers::open_connection(&self.path, true, 4, self.busy)?;
        read_stored(&conn, id)
    }
}

/// Whether `conn`'s database has the dictionary table (every stash using zstd does).
fn table_exists(conn: &Connection) -> Result<bool> {
    format::has_table(conn, TABLE)
}

/// The dictionaries stored in `conn`'s database, oldest first (only the one of `id` if
/// given). One that zstd rejects is logged and left out: its rows read as damaged.
fn read_stored(conn: &Connection, id: Option<u32>) -> Result<Vec<Arc<Dictionary>>> {
    if !table_exists(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare(&format!("SELECT bytes FROM {TABLE} WHERE ?1 IS NULL OR id = ?1 ORDER BY seq"))
        .context(|| "reading the dictionaries".to_string())?;
    let rows = stmt
        .query_map([id.map(i64::from)], |r| r.get::<_, Vec<u8>>(0))
        .context(|| "reading the dictionaries".to_string())?;
    let mut dicts = Vec::new();
    for bytes in rows {
        let bytes = bytes.context(|| "reading a dictionary".to_string())?;
        match Dictionary::new(bytes) {
            Ok(dict) => dicts.push(Arc::new(dict)),
            Err(reason) => log::warn!("objstash: a stored dictionary is unusable: {reason}"),
        }
    }
    Ok(dicts)
}

/// How many dictionaries `conn`'s database holds.
pub(crate) fn count(conn: &Connection) -> Result<usize> {
    if !table_exists(conn)? {
        return Ok(0);
    }
    let n: i64 = conn
        .query_row(&format!("SELECT count(*) FROM {TABLE}"), [], |r| r.get(0))
        .context(|| "counting the dictionaries".to_string())?;
    Ok(n.max(0) as usize)
}

/// Creates the dictionary table if needed and stores `dict` in it, marking the file with
/// the format version that knows zstd rows. Runs inside the writer's transaction, before
/// any row compressed with `dict`.
///
/// # Errors
/// [`Error::Training`] if the stash holds another dictionary with the same id (trained by
/// another process on another sample): rows compressed with `dict` could never be read,
/// so the transaction that would commit them must fail.
pub(crate) fn store(conn: &Connection, dict: &Dictionary, samples: usize) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE}(seq INTEGER PRIMARY KEY, id INTEGER NOT NULL UNIQUE, \
         bytes BLOB NOT NULL, samples INTEGER NOT NULL, created INTEGER NOT NULL);"
    ))
    .context(|| "creating the dictionary table".to_string())?;
    format::raise(conn, format::DICTS)?;
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let added = conn
        .execute(
            &format!(
                "INSERT OR IGNORE INTO {TABLE}(id, bytes, samples, created) \
                 VALUES (?1, ?2, ?3, ?4)"
            ),
            params![i64::from(dict.id), dict.bytes, samples as i64, created],
        )
        .context(|| format!("storing dictionary {}", dict.id))?;
    if added == 0 {
        let stored: Vec<u8> = conn
            .query_row(&format!("SELECT bytes FROM {TABLE} WHERE id = ?1"), [dict.id], |r| r.get(0))
            .context(|| format!("reading dictionary {}", dict.id))?;
        if stored != dict.bytes {
            return Err(Error::training(format!(
                "the stash already holds another dictionary with id {}; the objects \
                 compressed with the new one since it was trained were not stored: save \
                 them again",
                dict.id
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Vec<u8>> {
        (0..500)
            .map(|i| {
                format!("{{\"speckle_type\":\"Line\",\"x\":{i}.25,\"layer\":\"A-{}\"}}", i % 7)
            })
            .map(String::into_bytes)
            .collect()
    }

    #[test]
    fn a_second_dictionary_with_a_taken_id_is_refused() {
        let conn = Connection::open_in_memory().unwrap();
        let first = Dictionary::train(&samples()).unwrap();
        let other: Vec<Vec<u8>> =
            samples().into_iter().map(|s| s.into_iter().rev().collect()).collect();
        let mut bytes = Dictionary::train(&other).unwrap().bytes;
        bytes[4..8].copy_from_slice(&first.id.to_le_bytes());
        let twin = Dictionary::new(bytes).unwrap();
        assert_eq!(twin.id, first.id);
        store(&conn, &first, 1).unwrap();
        store(&conn, &first, 1).unwrap();
        let refused = store(&conn, &twin, 1).unwrap_err();
        assert!(refused.to_string().contains("another dictionary"), "{refused}");
        assert_eq!(count(&conn).unwrap(), 1);
    }

    #[test]
    fn stored_dictionaries_load_in_order_and_store_again() {
        let conn = Connection::open_in_memory().unwrap();
        let first = Dictionary::train(&samples()).unwrap();
        let other: Vec<Vec<u8>> =
            samples().into_iter().map(|s| s.into_iter().rev().collect()).collect();
        let second = Dictionary::train(&other).unwrap();
        store(&conn, &first, 1).unwrap();
        store(&conn, &second, 1).unwrap();
        let dicts = load(&conn).unwrap();
        assert_eq!(dicts.current().map(|d| d.id), Some(second.id), "the newest is current");
        let fresh = Connection::open_in_memory().unwrap();
        store_all(&dicts, &fresh).unwrap();
        assert_eq!(load(&fresh).unwrap().current().map(|d| d.id), Some(second.id));
        assert_eq!(count(&fresh).unwrap(), 2);
    }
}
