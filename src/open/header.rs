//! What a path holds, told from the first 100 bytes of the file before SQLite or any lock
//! touches it: nothing (a new stash goes there), a stash, another application's SQLite
//! database, or no database at all.

use std::io::Read;
use std::path::Path;

use rusqlite::Connection;

use crate::check::header_mend;
use crate::db::format::APPLICATION_ID;
use crate::db::meta::META;
use crate::error::{Error, Result};

/// What the first 100 bytes of a database file say, read without SQLite so that a file
/// whose schema is damaged can still be recognised as a stash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub application_id: i32,
    pub user_version: i64,
}

/// What `path` holds: `Ok(None)` when there is no file or an empty one (a new stash goes
/// there), the header of a stash, or `NotADatabase` / `ForeignDatabase`. A SQLite file is
/// a stash only if it says so: its application id is [`APPLICATION_ID`] (or, for the
/// stashes made before the id was written, 0 with a meta table). A SQLite file of no
/// tables is someone else's too.
///
/// While another handle makes a stash its file can show a header without the id for a
/// moment: this is only decided where no handle can be making it (under the open gate,
/// `lock.rs`, or where no lock file says an objstash was ever there). [`glance`] is what
/// can be decided before.
pub(crate) fn recognise(path: &Path) -> Result<Option<Header>> {
    let Some(header) = glance(path)? else { return Ok(None) };
    match header.application_id {
        APPLICATION_ID => Ok(Some(header)),
        _ if has_meta_table(path) => Ok(Some(header)),
        _ => Err(Error::ForeignDatabase { path: path.to_path_buf() }),
    }
}

/// What can be told of `path` at any moment, before taking a lock: a file that is not
/// SQLite, or one another application has marked as its own, is no stash. A header
/// without an application id passes (see [`recognise`]).
pub(crate) fn glance(path: &Path) -> Result<Option<Header>> {
    let header = read_header(path)?;
    if header.is_some_and(|h| h.application_id != APPLICATION_ID && h.application_id != 0) {
        return Err(Error::ForeignDatabase { path: path.to_path_buf() });
    }
    Ok(header)
}

/// Whether the SQLite file at `path` has the meta table, read without locking or making
/// any file beside it (`immutable`).
fn has_meta_table(path: &Path) -> bool {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    let mut uri = String::from("file:");
    for byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || b"/._-~".contains(byte) {
            uri.push(char::from(*byte));
        } else {
            uri += &format!("%{byte:02X}");
        }
    }
    uri += "?immutable=1";
    let found = Connection::open_with_flags(&uri, flags).and_then(|conn| {
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [META],
            |r| r.get::<_, i64>(0),
        )
    });
    matches!(found, Ok(1))
}

/// Reads the header of the database at `path`: `Ok(None)` when the file does not exist or
/// is empty, `Err(NotADatabase)` when it is not a SQLite file.
fn read_header(path: &Path) -> Result<Option<Header>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let mut header = Vec::with_capacity(100);
    (&mut file)
        .take(100)
        .read_to_end(&mut header)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if header.is_empty() {
        return Ok(None);
    }
    if header.len() < 100 || !header.starts_with(b"SQLite format 3\0") {
        // A stash whose header alone is damaged is told from its pages, so that the user
        // is sent to repair it rather than to delete it.
        if let Ok(Some(reason)) = header_mend::damage(path) {
            return Err(Error::DamagedHeader { path: path.to_path_buf(), reason });
        }
        return Err(Error::NotADatabase { path: path.to_path_buf() });
    }
    let be32 = |at: usize| i32::from_be_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    Ok(Some(Header { application_id: be32(68), user_version: i64::from(be32(60)) }))
}

/// Whether the stash's write-ahead log ends in part of a frame (or its header is not a
/// log's): a full disk, a power loss, or something that cut the file. SQLite drops the
/// frames past the last whole commit without a word, and if a checkpoint had copied any of
/// them into the file, the file mixes two moments: the next open checks it. One end is not
/// a cut: SQLite writes a frame as two writes (its 24-byte header, then the page), so a
/// process killed between them leaves one frame header past the last whole frame.
pub(crate) fn log_is_torn(path: &Path) -> bool {
    let wal = crate::files::sibling(path, "-wal");
    let Ok(mut file) = std::fs::File::open(&wal) else { return false };
    let Ok(len) = file.metadata().map(|m| m.len()) else { return false };
    if len == 0 {
        return false;
    }
    let mut head = [0u8; 32];
    if file.read_exact(&mut head).is_err() {
        return true;
    }
    let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let page_size = u64::from(u32::from_be_bytes([head[8], head[9], head[10], head[11]]));
    if magic & !1 != 0x377f_0682 || !(512..=65_536).contains(&page_size) {
        return true;
    }
    let past_whole_frames = (len - 32) % (FRAME_HEADER + page_size);
    past_whole_frames != 0 && past_whole_frames != FRAME_HEADER
}

/// Bytes of the header SQLite writes before each page of its log.
const FRAME_HEADER: u64 = 24;
