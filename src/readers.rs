//! Connections: how each one is opened, and the pool of read connections.
//!
//! Reads never use the writer's connection: each reading thread takes a connection of its
//! own from the pool (opening one when none is idle) and puts it back when done, so reads
//! proceed in parallel with each other and with the writer's open transaction. Read
//! connections are `query_only`; they keep their prepared statements between uses.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{DbContext, Error, Result, sqlite_code};

/// Page cache of the writer connection, in KiB (negative `cache_size`): it holds the index
/// pages a batch dirties; see notes/design.md.
pub(crate) const WRITER_CACHE_KIB: i64 = 16 * 1024;
/// Page cache of each read connection, in KiB. Reads are point lookups; the OS page cache
/// serves the rest, and there is one read connection per reading thread, so this is what
/// bounds the readers' memory.
pub(crate) const READER_CACHE_KIB: i64 = 8 * 1024;
/// Idle read connections kept open beyond this are closed.
const MAX_IDLE: usize = 16;

/// Opens a connection to `path` with the crate's settings.
pub(crate) fn open_connection(
    path: &Path,
    read_only: bool,
    statements: usize,
    busy: Duration,
) -> Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn =
        Connection::open_with_flags(path, flags).map_err(|e| open_error(path, "connecting", e))?;
    conn.set_prepared_statement_cache_capacity(statements);
    let cache = if read_only { READER_CACHE_KIB } else { WRITER_CACHE_KIB };
    // This pragma reads the schema: on a file damaged by a crash it fails, and the open
    // sequence then finds the damage itself and recovers, so the failure is not an error here.
    // It runs before the busy timeout is set: a read connection opened while the writer
    // commits must not wait for the commit here (saving never waits for one).
    if let Err(e) = conn.pragma_update(None, "cache_size", -cache) {
        log::debug!("objstash: cache_size on {} failed: {e}", path.display());
    }
    conn.busy_timeout(busy)
        .context(|| format!("setting the busy timeout on {}", path.display()))?;
    Ok(conn)
}

/// Maps an error met while opening or first reading a database to the user's terms.
pub(crate) fn open_error(path: &Path, what: &str, e: rusqlite::Error) -> Error {
    match sqlite_code(&e) {
        Some(rusqlite::ErrorCode::NotADatabase) => Error::NotADatabase { path: path.to_path_buf() },
        Some(rusqlite::ErrorCode::CannotOpen) | Some(rusqlite::ErrorCode::ReadOnly) => Error::db(
            format!(
                "cannot open {} for writing: check that its directory exists and is writable",
                path.display()
            ),
            e,
        ),
        _ => Error::db(format!("opening {} ({what})", path.display()), e),
    }
}

/// Idle read connections of one stash.
#[derive(Debug)]
pub(crate) struct Readers {
    path: PathBuf,
    statements: usize,
    /// `mmap_size` of each connection, in bytes; 0 reads through the page cache only.
    mmap: u64,
    busy: Duration,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    pub(crate) fn new(path: PathBuf, statements: usize, mmap: u64, busy: Duration) -> Self {
        Readers { path, statements, mmap, busy, idle: Mutex::new(Vec::new()) }
    }

    /// An idle read connection, or a new one; it goes back to the pool when dropped.
    pub(crate) fn checkout(&self) -> Result<Reader<'_>> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let conn = open_connection(&self.path, true, self.statements, self.busy)?;
                let context = || format!("making a read connection to {}", self.path.display());
                conn.pragma_update(None, "query_only", true).context(context)?;
                if self.mmap > 0 {
                    // SQLite caps it far below i64::MAX (2 GiB).
                    let bytes = i64::try_from(self.mmap).unwrap_or(i64::MAX);
                    conn.pragma_update(None, "mmap_size", bytes).context(context)?;
                }
                conn
            }
        };
        Ok(Reader { pool: self, conn: Some(conn) })
    }

    /// Closes every idle connection (before files are replaced or the stash closes).
    pub(crate) fn close_all(&self) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// A read connection on loan from [`Readers`].
pub(crate) struct Reader<'a> {
    pool: &'a Readers,
    conn: Option<Connection>,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("the connection is only taken in drop")
    }
}

impl Reader<'_> {
    /// Runs `f` inside one read transaction (see [`in_read_transaction`]).
    pub(crate) fn in_transaction<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        in_read_transaction(self, f)
    }
}

/// Runs `f` inside one read transaction on `conn`: SQLite takes its file lock once for all
/// of `f`'s statements instead of once per statement, and they all read one snapshot.
pub(crate) fn in_read_transaction<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    conn.execute_batch("BEGIN").context(|| "starting a read transaction".to_string())?;
    let result = f(conn);
    let end = conn.execute_batch(if result.is_ok() { "COMMIT" } else { "ROLLBACK" });
    let value = result?;
    end.context(|| "ending a read transaction".to_string())?;
    Ok(value)
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // A connection left inside a transaction by a failed statement is not reused.
        if conn.is_autocommit() {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
    }
}
