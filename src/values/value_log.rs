//! The file of values beside the database (format 9, a stash made with
//! [`Values::InFile`](crate::Values::InFile)).
//!
//! A row of such a stash holds its key, raw length and last use, and the place of its
//! stored bytes in this file instead of the bytes: the database holds about 116 bytes a
//! row, small enough for a reader to map whole, and a read copies the value's own bytes
//! out of the OS page cache instead of an 8 KiB leaf page (`notes/experiments.md`, "A
//! value log's reads": 1.57x-1.64x the reads of rows that hold their values, at ten
//! million objects).
//!
//! The file is written only by a writer holding SQLite's write lock: it appends a batch's
//! values at the position recorded in the meta table, which the same transaction moves
//! past them (`value_space.rs`, which also frees the space of deleted values). Bytes past
//! the recorded position (a writer killed before its commit) are no one's and are written
//! over by the next batch; a reader only follows places of rows its snapshot holds, which
//! were written before their commit, and reads them inside that snapshot's transaction. In
//! Safe mode the file is synced before the commit that records its rows.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::db::row::Place;
use crate::error::{Error, Result};
use crate::files;
use crate::key::Key;

/// The open file of values of one stash.
#[derive(Debug)]
pub(crate) struct ValueLog {
    file: File,
    path: PathBuf,
}

impl ValueLog {
    /// The path of the file of values of the database at `db`.
    pub(crate) fn path_of(db: &Path) -> PathBuf {
        files::sibling(db, files::VALUES)
    }

    /// Opens (creating it if `writable` and it is not there) the file of values of the
    /// database at `db`.
    pub(crate) fn open(db: &Path, writable: bool) -> Result<Self> {
        let path = Self::path_of(db);
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .create(writable)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(format!("opening the values file {}", path.display()), e))?;
        Ok(ValueLog { file, path })
    }

    /// The value at `place`. A file shorter than the place (damage, or a stash whose file
    /// was lost) reads as an error the caller reports against the row's key.
    pub(crate) fn read(&self, place: Place) -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0; place.len];
        self.file.read_exact_at(&mut bytes, place.at)?;
        Ok(bytes)
    }

    /// Writes `bytes` at `at`.
    pub(crate) fn write(&self, at: u64, bytes: &[u8]) -> Result<()> {
        self.file.write_all_at(bytes, at).map_err(|e| {
            Error::io(format!("writing {} bytes to {}", bytes.len(), self.path.display()), e)
        })
    }

    /// The open file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Syncs the file's data (Safe mode, before the commit that records its values).
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(format!("syncing {}", self.path.display()), e))
    }
}

/// The stored bytes of `key`'s row, whose place column holds `packed`, read from `log`:
/// [`Error::Corrupt`] when they cannot be there (no file, a file shorter than the place, a
/// place that is no place), [`Error::Io`] when reading fails.
pub(crate) fn read_value(log: Option<&ValueLog>, key: &Key, packed: i64) -> Result<Vec<u8>> {
    let Some(place) = Place::unpack(packed) else {
        return Err(Error::corrupt(
            *key,
            format!("its row names no place in the values file ({packed})"),
        ));
    };
    let Some(log) = log else {
        return Err(Error::corrupt(*key, "its row names a place in a values file the stash lacks"));
    };
    log.read(place).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::corrupt(
            *key,
            format!(
                "its value at {}..{} is past the end of {}",
                place.at,
                place.end(),
                log.path.display()
            ),
        ),
        _ => Error::io(format!("reading {key}'s value from {}", log.path.display()), e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_written_at_places_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let log = ValueLog::open(&db, true).unwrap();
        log.write(0, b"hello").unwrap();
        log.write(5, b"world").unwrap();
        assert_eq!(log.read(Place { at: 3, len: 4 }).unwrap(), b"lowo");
        assert!(log.read(Place { at: 8, len: 4 }).is_err(), "past the end");
        let reader = ValueLog::open(&db, false).unwrap();
        assert_eq!(reader.read(Place { at: 5, len: 5 }).unwrap(), b"world");
    }
}
