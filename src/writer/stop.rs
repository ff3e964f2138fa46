//! Why the writer stopped, and why a batch was not committed.
//!
//! A failed SQLite call inside the writer is a [`Stop`]: words the user can act on and the
//! error behind them. A batch whose transaction could not even start because another
//! handle held the write lock is [`Failure::Busy`]: it is kept and tried again.

use std::sync::Arc;

use crate::error::{Error, sqlite_code};

/// Why the writer stopped: words for the user and, when there was one, the error behind it.
#[derive(Clone, Debug)]
pub(crate) struct Stop {
    reason: String,
    cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    /// Whether SQLite found the file damaged.
    damaged: bool,
    /// Whether the disk had no room.
    full: bool,
}

impl Stop {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Stop { reason: reason.into(), cause: None, damaged: false, full: false }
    }

    /// A failed SQLite call, described for the user and kept as the cause.
    pub(crate) fn sqlite(what: &str, e: rusqlite::Error) -> Self {
        let damaged = sqlite_code(&e) == Some(rusqlite::ErrorCode::DatabaseCorrupt);
        let full = sqlite_code(&e) == Some(rusqlite::ErrorCode::DiskFull);
        Stop { reason: describe(what, &e), cause: Some(Arc::new(e)), damaged, full }
    }

    /// Whether the writer stopped because SQLite found the file damaged.
    pub(crate) fn damaged(&self) -> bool {
        self.damaged
    }

    /// Whether the disk had no room for what the writer wrote.
    pub(crate) fn disk_full(&self) -> bool {
        self.full
    }

    pub(crate) fn reason(&self) -> &str {
        &self.reason
    }

    /// The error a caller gets.
    pub(crate) fn into_error(self) -> Error {
        Error::WriterStopped { reason: self.reason, source: self.cause }
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        let damaged = matches!(&e, Error::Database { source, .. }
            if source.downcast_ref::<rusqlite::Error>().and_then(sqlite_code)
                == Some(rusqlite::ErrorCode::DatabaseCorrupt));
        let reason = if damaged {
            format!("{e}: the database file is damaged; {REPAIR}")
        } else {
            e.to_string()
        };
        let full = e.is_disk_full();
        Stop { reason, cause: Some(Arc::new(e)), damaged, full }
    }
}

/// Turns a SQLite result into a [`Stop`] that says what the writer was doing.
pub(crate) trait StopContext<T> {
    fn stop(self, what: impl FnOnce() -> String) -> Result<T, Stop>;
}

impl<T> StopContext<T> for rusqlite::Result<T> {
    fn stop(self, what: impl FnOnce() -> String) -> Result<T, Stop> {
        self.map_err(|e| Stop::sqlite(&what(), e))
    }
}

/// Why a batch was not committed.
pub(crate) enum Failure {
    /// Another handle held the write lock for longer than the busy timeout: the batch is
    /// kept and tried again.
    Busy,
    /// The writer cannot go on.
    Fatal(Stop),
}

impl<E: Into<Stop>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Fatal(e.into())
    }
}

/// What to do about a damaged file.
const REPAIR: &str = "close every handle and repair it (objstash repair, objstash.repair(path)): \
                      the next open alone rebuilds it from every object that verifies";

/// A writer failure in words a user can act on.
fn describe(what: &str, e: &rusqlite::Error) -> String {
    match sqlite_code(e) {
        Some(rusqlite::ErrorCode::DiskFull) => {
            format!("{what} failed because the disk is full ({e}); free space and reopen")
        }
        Some(rusqlite::ErrorCode::ReadOnly) => {
            format!("{what} failed because the database became read-only ({e})")
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            format!("{what} failed because the database file is damaged ({e}); {REPAIR}")
        }
        _ => format!("{what} failed: {e}"),
    }
}
