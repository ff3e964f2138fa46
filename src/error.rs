//! The one error type of the crate.
//!
//! Every variant says what went wrong in the user's terms and what to do next, in the
//! library's own terms (its methods and settings), and keeps the underlying error as its
//! source; each front end (the command line, Python) adds what to do in its own. Database and I/O errors carry the path or the
//! operation they happened in, so a message read in a log is enough to act on.

use std::path::PathBuf;
use std::sync::Arc;

use crate::key::Key;
use crate::settings::layout::Layout;

/// The result type of objstash.
pub type Result<T, E = Error> = std::result::Result<T, E>;

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong when opening, writing or reading a stash.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting is out of range.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and what is allowed.
        reason: String,
    },

    /// There is no stash at the path, and the open was not allowed to create one.
    #[error(
        "there is no stash at {}: check the path, or open it with creating allowed \
         (StashBuilder::create)",
        path.display()
    )]
    NotFound {
        /// The path given to `open`.
        path: PathBuf,
    },

    /// The path cannot hold a stash (a directory, say).
    #[error("cannot use {}: {reason}", path.display())]
    InvalidPath {
        /// The path given to `open`.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },

    /// The file exists but is not a SQLite database.
    #[error(
        "{} is not a SQLite database, so it is not a stash; pass the path of a stash or of a \
         file that does not exist yet",
        path.display()
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
    },

    /// The file's header (its first 100 bytes) is damaged, but its pages hold a stash:
    /// nothing was changed, and [`repair`](crate::repair) rebuilds the stash from them.
    #[error(
        "{} is a stash, but {reason}; its objects are still in its pages and nothing was \
         changed: repair it (objstash::repair) to rebuild it from them",
        path.display()
    )]
    DamagedHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong with the header.
        reason: String,
    },

    /// The file is a SQLite database that belongs to another application.
    #[error(
        "{} is a SQLite database of another application, not a stash; objstash leaves it \
         untouched: pass another path",
        path.display()
    )]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
    },

    /// The stash was written by a newer objstash with a format this version cannot read.
    #[error(
        "{} has stash format {found}, this objstash reads format {supported} and older: \
         upgrade objstash to open it",
        path.display()
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The format recorded in the file.
        found: i64,
        /// The newest format this version reads.
        supported: i64,
    },

    /// The builder asked for a layout other than the one the stash was created with.
    #[error(
        "{} was created with the {stored} layout and cannot be opened as {requested}: leave \
         the layout unset to use the recorded one, or create a new stash",
        path.display()
    )]
    LayoutMismatch {
        /// The file.
        path: PathBuf,
        /// The layout recorded in the file.
        stored: Layout,
        /// The layout the builder asked for.
        requested: Layout,
    },

    /// The builder asked for a durability or codec other than the one the stash records.
    #[error(
        "{} records {setting} {stored} and was opened asking for {requested}: leave the \
         {setting} unset to use the recorded one, or change it deliberately with \
         StashBuilder::reconfigure",
        path.display()
    )]
    SettingMismatch {
        /// The file.
        path: PathBuf,
        /// Which setting: `durability` or `codec`.
        setting: &'static str,
        /// The value recorded in the stash.
        stored: String,
        /// The value the builder asked for.
        requested: String,
    },

    /// The file system under the stash cannot give the journal its durability needs.
    #[error(
        "{} cannot use journal_mode {wanted} (SQLite left it {found}): {durability} durability \
         needs a file system that supports it; move the stash or choose the other durability",
        path.display()
    )]
    JournalUnsupported {
        /// The file.
        path: PathBuf,
        /// The journal mode the durability needs.
        wanted: &'static str,
        /// The journal mode SQLite kept.
        found: String,
        /// The durability asked for.
        durability: crate::settings::durability::Durability,
    },

    /// An object is larger than the stash accepts; nothing of it was stored.
    #[error(
        "an object of {size} bytes is larger than this stash's limit of {limit} bytes; \
         split it, or raise the limit with StashBuilder::max_object_size"
    )]
    TooLarge {
        /// The object's size.
        size: u64,
        /// The largest object the stash accepts.
        limit: u64,
    },

    /// A name is empty or longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes; nothing
    /// of the call is stored.
    #[error("a name must be 1 to {limit} bytes long, not {len}")]
    BadName {
        /// The name's length in bytes.
        len: usize,
        /// The longest name accepted.
        limit: usize,
    },

    /// A dictionary could not be trained ([`Codec::ZstdDict`](crate::Codec)).
    #[error("cannot train a dictionary: {reason}")]
    Training {
        /// Why not.
        reason: String,
    },

    /// Another handle kept the stash locked for longer than the busy timeout. Nothing
    /// stored or queued was lost: saves stay queued and are written once it lets go.
    #[error(
        "{}: {what} for longer than {waited:?}; nothing stored or queued was lost: try again, \
         or raise StashBuilder::busy_timeout",
        path.display()
    )]
    Busy {
        /// The file.
        path: PathBuf,
        /// How long this handle waited.
        waited: std::time::Duration,
        /// What the other handle was doing.
        what: &'static str,
    },

    /// The stash was opened read-only (by choice, or because its file or directory cannot
    /// be written): it cannot save or remove.
    #[error(
        "{} is open read-only (its file or directory cannot be written, or the builder asked \
         for read_only): it cannot save or remove",
        path.display()
    )]
    ReadOnly {
        /// The file.
        path: PathBuf,
    },

    /// What should be a JSON object is not, or its `"__closure"` is neither an object of
    /// ids nor `null` ([`closure_ids`](crate::closure_ids)).
    #[error("not a JSON object with a closure of ids: {reason}")]
    BadJson {
        /// What the parser found.
        reason: String,
    },

    /// The disk holding the stash is full. The stash opened for reading all the same (it
    /// needs no new file to be read); what writes waits for room. A stash of 64 MiB or
    /// more keeps a reserve of disk space that [`Stash::trim_to`](crate::Stash::trim_to)
    /// spends on such a disk to give space back; a smaller one needs room made first.
    #[error(
        "the disk holding {} is full{}",
        path.display(),
        if *reserve {
            ": the stash opened for reading only; a trim gives space back (the stash keeps a \
             reserve of disk space for it), or free space on the disk and open it again"
        } else {
            " and the stash keeps no reserve of disk space (one under 64 MiB keeps none): free \
             a few MB on the disk, then trim or save again"
        }
    )]
    DiskFull {
        /// The file.
        path: PathBuf,
        /// Whether the stash has a reserve of disk space for a trim to spend.
        reserve: bool,
    },

    /// The operation needs the stash closed everywhere (a repair replaces the file), and
    /// a handle in this or another process has it open.
    #[error(
        "{} is open in a process (this one or another); close every handle first: a repair \
         replaces the file",
        path.display()
    )]
    Locked {
        /// The file.
        path: PathBuf,
    },

    /// The stash is owned by another handle ([`Durability::Owned`](crate::Durability)),
    /// in this process or another: no other handle opens it until that one closes.
    #[error(
        "{} is owned by another handle (durability owned), in this process or another; it \
         opens once that handle closes",
        path.display()
    )]
    Owned {
        /// The file.
        path: PathBuf,
    },

    /// A stored object failed its check: it does not decompress, or its bytes do not hash to
    /// its key. The bytes are never returned.
    #[error(
        "object {key} is corrupt ({reason}); remove it and save it again, or run verify to \
         find every damaged object"
    )]
    Corrupt {
        /// The key of the damaged object.
        key: Key,
        /// What failed.
        reason: String,
    },

    /// The remote (feature `remote`) could not be reached or refused a request. Nothing
    /// local is affected: reads of stored objects and saves go on; retry the push or the
    /// read later.
    #[error(
        "the remote failed while {operation}: {source}; the local stash is unaffected: \
         retry once the remote is reachable"
    )]
    Remote {
        /// What was being done, with the remote's path.
        operation: String,
        /// The client's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// An object read from a remote pack failed its check (it does not inflate, or its
    /// bytes do not hash to its key). It was neither returned nor stored.
    #[error(
        "object {key} in remote pack {pack} is damaged ({reason}); it was neither returned \
         nor stored: push it again from a stash that holds it"
    )]
    RemoteCorrupt {
        /// The key asked for.
        key: Key,
        /// The pack's name on the remote.
        pack: String,
        /// What failed.
        reason: String,
    },

    /// The writer thread stopped after a failure; no write is accepted any more.
    #[error(
        "the stash's writer stopped: {reason}; writes since the last successful flush may be \
         lost: reopen the stash once the cause is fixed"
    )]
    WriterStopped {
        /// Why the writer stopped.
        reason: String,
        /// The error that stopped it, when there was one (SQLite's, say).
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    },

    /// The database file is damaged beyond single objects (a B-tree a scan cannot follow).
    #[error("{context}: the file is damaged ({reason}); run verify, then repair")]
    Damaged {
        /// What was being done, with the table.
        context: String,
        /// What was found.
        reason: String,
    },

    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// SQLite reported an error.
    #[error("{context}: {source}")]
    Database {
        /// What was being done, with the path or table.
        context: String,
        /// SQLite's error.
        #[source]
        source: Source,
    },
}

impl Error {
    /// Whether the file system had no room for what was written (also when that stopped
    /// the writer). A trim works on a full disk where the stash keeps a reserve
    /// ([`Stash::trim_to`](crate::Stash::trim_to)); other writes need space freed first.
    #[must_use]
    pub fn is_disk_full(&self) -> bool {
        if matches!(self, Error::DiskFull { .. }) {
            return true;
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(sqlite) = e.downcast_ref::<rusqlite::Error>()
                && sqlite_code(sqlite) == Some(rusqlite::ErrorCode::DiskFull)
            {
                return true;
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::StorageFull
            {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// Whether the error is damage to the stash: an object that does not verify
    /// ([`Error::Corrupt`]), a file SQLite finds malformed, or [`Error::Damaged`]. What
    /// still verifies can be read with [`rescue`](crate::rescue) or kept by
    /// [`repair`](crate::repair).
    #[must_use]
    pub fn is_damage(&self) -> bool {
        if matches!(self, Error::Corrupt { .. } | Error::Damaged { .. }) {
            return true;
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(sqlite) = e.downcast_ref::<rusqlite::Error>()
                && sqlite_code(sqlite) == Some(rusqlite::ErrorCode::DatabaseCorrupt)
            {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// The library's error inside an `io::Error` of an
    /// [`ObjectReader`](crate::ObjectReader) (a damaged chunk: [`Error::Corrupt`]), or the
    /// `io::Error` itself when it carries none.
    ///
    /// # Errors
    /// The `io::Error` given, when it carries no library error.
    pub fn from_io(e: std::io::Error) -> std::result::Result<Error, std::io::Error> {
        if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let inner = e.into_inner().expect("checked above");
            return Ok(*inner.downcast::<Error>().expect("checked above"));
        }
        Err(e)
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    pub(crate) fn db(context: impl Into<String>, source: rusqlite::Error) -> Self {
        Error::Database { context: context.into(), source: Box::new(source) }
    }

    pub(crate) fn corrupt(key: Key, reason: impl Into<String>) -> Self {
        Error::Corrupt { key, reason: reason.into() }
    }

    #[cfg(feature = "remote")]
    pub(crate) fn remote(
        operation: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Remote { operation: operation.into(), source: Arc::new(source) }
    }

    /// The same error again, for each of several calls one failure answers (the objects
    /// of a pack that could not be read).
    #[cfg(feature = "remote")]
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Error::Remote { operation, source } => {
                Error::Remote { operation: operation.clone(), source: Arc::clone(source) }
            }
            Error::RemoteCorrupt { key, pack, reason } => {
                Error::RemoteCorrupt { key: *key, pack: pack.clone(), reason: reason.clone() }
            }
            other => Error::Remote {
                operation: "reading".to_string(),
                source: Arc::new(std::io::Error::other(other.to_string())),
            },
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig { reason: reason.into() }
    }

    pub(crate) fn training(reason: impl Into<String>) -> Self {
        Error::Training { reason: reason.into() }
    }
}

/// Adds context to rusqlite results inside the crate.
pub(crate) trait DbContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> DbContext<T> for rusqlite::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::db(what(), e))
    }
}

/// The SQLite primary result code of an error, if it came from SQLite.
pub(crate) fn sqlite_code(e: &rusqlite::Error) -> Option<rusqlite::ErrorCode> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        _ => None,
    }
}
