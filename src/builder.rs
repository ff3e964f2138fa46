//! The configurable way to open a stash, and the open sequence itself.
//!
//! `open` validates every setting before it touches the disk, takes the write lock,
//! recognises (or creates) the database, recovers it if the last fast-mode writer died,
//! applies the durability pragmas and starts the writer. A file that is not a stash is
//! reported and left byte-for-byte untouched.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::codec;
use crate::dict::{self, Codec};
use crate::durability::Durability;
use crate::error::{DbContext, Error, Result, sqlite_code};
use crate::layout::Layout;
use crate::lock;
use crate::readers::{open_connection, open_error};
use crate::recovery::{self, RecoveryReport};
use crate::schema::{self, APPLICATION_ID, FORMAT_VERSION, Schema, State};
use crate::stash::Stash;

/// Default gzip level; see notes/compression.md.
pub(crate) const DEFAULT_LEVEL: u32 = 2;
/// Default rows per writer transaction; see notes/schema.md.
pub(crate) const DEFAULT_BATCH: usize = 100_000;
/// Default capacity of the channel to the writer, in objects.
pub(crate) const DEFAULT_CAPACITY: usize = 4_096;

/// Settings for opening a stash. Made by [`Stash::builder`], ended by [`StashBuilder::open`].
#[derive(Clone, Debug)]
#[must_use]
pub struct StashBuilder {
    layout: Option<Layout>,
    durability: Durability,
    level: u32,
    codec: Codec,
    sample_bytes: usize,
    batch_size: usize,
    channel_capacity: usize,
    threads: usize,
    read_mmap: u64,
}

impl Default for StashBuilder {
    fn default() -> Self {
        StashBuilder {
            layout: None,
            durability: Durability::default(),
            level: DEFAULT_LEVEL,
            codec: Codec::Gzip,
            sample_bytes: dict::SAMPLE_BYTES,
            batch_size: DEFAULT_BATCH,
            channel_capacity: DEFAULT_CAPACITY,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            read_mmap: 0,
        }
    }
}

impl StashBuilder {
    /// The table layout of a new stash. An existing stash keeps the layout it was created
    /// with; asking for another one is [`Error::LayoutMismatch`].
    ///
    /// Default: the recorded layout for an existing stash, [`Layout::Single`] for a new one.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// What acknowledged writes survive.
    ///
    /// Default: [`Durability::Fast`].
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How new objects are compressed: [`Codec::Gzip`] (the default) or
    /// [`Codec::ZstdDict`]. Every stash reads rows of either codec whatever this says, so a
    /// stash can switch codecs between opens; rows already stored keep theirs.
    pub fn codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// With [`Codec::ZstdDict`] and no dictionary yet: how many bytes of the first objects
    /// saved are sampled to train one (they are gzipped meanwhile). Training runs on its
    /// own thread once the sample is full. Ignored once a dictionary exists; call
    /// [`Stash::train`](crate::Stash::train) to retrain.
    ///
    /// Default: 4 MiB (notes/compression.md).
    pub fn dictionary_sample(mut self, bytes: usize) -> Self {
        self.sample_bytes = bytes;
        self
    }

    /// The gzip level of new objects, 0 (store) to 9 (smallest). Objects already stored keep
    /// theirs; every level reads back the same.
    ///
    /// Default: 2 (measured: the fastest level at full ratio; see notes/compression.md).
    pub fn compression_level(mut self, level: u32) -> Self {
        self.level = level;
        self
    }

    /// The most objects the writer commits in one transaction.
    ///
    /// Default: 100,000 (a batch also ends at 32 MiB of compressed rows).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// How many objects may wait for the writer before savers block: this bounds memory
    /// when producers outrun the disk.
    ///
    /// Default: 4,096.
    pub fn channel_capacity(mut self, capacity: usize) -> Self {
        self.channel_capacity = capacity;
        self
    }

    /// Threads that hash and compress for [`Stash::save_all`] and decompress for
    /// [`Stash::get_many`] and [`Stash::verify`].
    ///
    /// Default: the number of CPUs.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Lets each read connection map up to `bytes` of the database file into memory
    /// (SQLite's `mmap_size`) instead of copying pages into its own cache: `get` of a random
    /// key no longer copies its pages out of the OS page cache, which makes it faster once
    /// the stash is far larger than the readers' page caches (figures in
    /// notes/performance.md). The cost is in how memory is counted: every mapped page a
    /// read touches counts towards the process's resident memory, up to `bytes`, although
    /// the kernel can drop those pages at any time. SQLite maps at most the first 2 GiB of
    /// the file; pages beyond are read as without a map.
    ///
    /// Default: 0 (no mapping; each reader copies pages into an 8 MiB cache).
    pub fn read_mmap_size(mut self, bytes: u64) -> Self {
        self.read_mmap = bytes;
        self
    }

    /// Opens the stash at `path`, creating it (and its directory) if it does not exist.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a setting out of range; [`Error::InvalidPath`] for a
    /// directory; [`Error::NotADatabase`], [`Error::ForeignDatabase`],
    /// [`Error::UnsupportedFormat`] or [`Error::LayoutMismatch`] for a file that is not a
    /// stash this handle can open (the file is left untouched); [`Error::Locked`] when
    /// another handle has it open; [`Error::Io`] or [`Error::Database`] when the file cannot
    /// be created or read.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Stash> {
        self.validate()?;
        let path = path.as_ref().to_path_buf();
        check_path(&path)?;
        let lock = lock::acquire(&path)?;
        let (conn, schema, recovery) = self.prepare(&path)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .thread_name(|i| format!("objstash-worker-{i}"))
            .build()
            .map_err(|e| {
                Error::config(format!("cannot start {} worker threads: {e}", self.threads))
            })?;
        Stash::start(crate::stash::Parts {
            path,
            conn,
            schema,
            durability: self.durability,
            level: self.level,
            codec: self.codec,
            sample_bytes: self.sample_bytes,
            batch_size: self.batch_size,
            capacity: self.channel_capacity,
            read_mmap: self.read_mmap,
            pool,
            recovery,
            lock,
        })
    }

    fn validate(&self) -> Result<()> {
        if self.level > codec::MAX_LEVEL {
            return Err(Error::config(format!(
                "compression level {} is out of range: use 0 to {}",
                self.level,
                codec::MAX_LEVEL
            )));
        }
        for (name, value) in [
            ("dictionary sample", self.sample_bytes),
            ("batch size", self.batch_size),
            ("channel capacity", self.channel_capacity),
            ("thread count", self.threads),
        ] {
            if value == 0 {
                return Err(Error::config(format!("the {name} must be at least 1")));
            }
        }
        if self.threads > 1024 {
            return Err(Error::config(format!(
                "{} threads is too many: use at most 1024",
                self.threads
            )));
        }
        Ok(())
    }

    /// Opens the writer connection on a recognised, recovered, configured stash.
    fn prepare(&self, path: &Path) -> Result<(Connection, Schema, Option<RecoveryReport>)> {
        let statements = Schema::new(Layout::Bucketed).statement_count();
        let header = schema::read_header(path)?;
        let conn = open_connection(path, false, statements)?;
        let header = match header {
            Some(header) if header.application_id == APPLICATION_ID => header,
            Some(header) if header.application_id != 0 => {
                return Err(Error::ForeignDatabase { path: path.to_path_buf() });
            }
            // An empty file, or a SQLite database without an application id: a new stash
            // if it holds nothing, someone else's database if it holds anything.
            _ => {
                let objects = schema::schema_object_count(&conn)
                    .map_err(|e| open_error(path, "reading its schema", e))?;
                if objects > 0 {
                    return Err(Error::ForeignDatabase { path: path.to_path_buf() });
                }
                let layout = self.layout.unwrap_or_default();
                let schema = Schema::new(layout);
                conn.pragma_update(None, "page_size", schema::PAGE_SIZE)
                    .context(|| format!("setting the page size of {}", path.display()))?;
                schema.create(&conn)?;
                return Ok((self.configure(conn, path)?, schema, None));
            }
        };
        if header.user_version > FORMAT_VERSION {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: header.user_version,
                supported: FORMAT_VERSION,
            });
        }
        // A stash damaged by a crash in mid-commit may not even list its schema; that is a
        // case for recovery, not an error, once the header says the file is ours.
        let damage = match schema::schema_object_count(&conn) {
            Ok(_) => None,
            Err(e) if is_corruption(&e) => Some(format!("its schema cannot be read: {e}")),
            Err(e) => return Err(open_error(path, "reading its schema", e)),
        };
        let recorded = match (schema::read_state(&conn), schema::read_layout(&conn)) {
            _ if damage.is_some() => None,
            (Ok(state), Ok(Some(layout))) => Some((state, layout)),
            (Err(Error::Database { .. }), _) | (_, Err(Error::Database { .. })) | (_, Ok(None)) => {
                None
            }
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let layout = recorded.map(|(_, layout)| layout);
        if let (Some(requested), Some(stored)) = (self.layout, layout)
            && requested != stored
        {
            return Err(Error::LayoutMismatch { path: path.to_path_buf(), stored, requested });
        }
        let problem = match recorded {
            None => Some(damage.unwrap_or_else(|| "its meta table cannot be read".to_string())),
            Some((State::OpenFast, _)) => recovery::check(&conn),
            Some(_) => None,
        };
        let unclean = matches!(recorded, Some((State::OpenFast, _)));
        let (conn, report) = match problem {
            Some(problem) => {
                drop(conn);
                let report = recovery::salvage(path, layout.or(self.layout), problem)?;
                (open_connection(path, false, statements)?, Some(report))
            }
            None if unclean => {
                let totals =
                    schema::recount_totals(&conn, &Schema::new(layout.unwrap_or_default()))?;
                log::warn!(
                    "objstash: {} was not closed cleanly; the file checked sound and holds {} objects",
                    path.display(),
                    totals.objects
                );
                (conn, Some(RecoveryReport::sound(totals.objects)))
            }
            None => (conn, None),
        };
        let layout = schema::read_layout(&conn)?.unwrap_or_default();
        Ok((self.configure(conn, path)?, Schema::new(layout), report))
    }

    /// Applies the durability pragmas and marks the stash open.
    fn configure(&self, conn: Connection, path: &Path) -> Result<Connection> {
        let (journal, synchronous) = self.durability.pragmas();
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", journal, |r| r.get(0))
            .map_err(|e| open_error(path, "setting the journal mode", e))?;
        if !mode.eq_ignore_ascii_case(journal) {
            return Err(Error::InvalidPath {
                path: path.to_path_buf(),
                reason: format!(
                    "SQLite could not switch it to journal_mode {journal} (it stays {mode}); \
                     {} durability needs a file system that supports it",
                    self.durability
                ),
            });
        }
        conn.pragma_update(None, "synchronous", synchronous)
            .and_then(|()| conn.pragma_update(None, "temp_store", "MEMORY"))
            // Zeroed deleted content keeps salvage's page scan from resurrecting removed
            // objects; removes are rare in a cache, so the extra writes are too.
            .and_then(|()| conn.pragma_update(None, "secure_delete", "ON"))
            .context(|| format!("configuring {}", path.display()))?;
        let state = match self.durability {
            Durability::Fast => State::OpenFast,
            Durability::Safe => State::OpenSafe,
        };
        schema::write_state(&conn, state)?;
        Ok(conn)
    }
}

/// Rejects a directory and creates a missing parent directory.
fn check_path(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(Error::InvalidPath {
            path: PathBuf::new(),
            reason: "the path is empty".to_string(),
        });
    }
    if path.is_dir() {
        return Err(Error::InvalidPath {
            path: path.to_path_buf(),
            reason: "it is a directory; give the path of a file, e.g. DIR/objects.db".to_string(),
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("creating directory {}", parent.display()), e))?;
    }
    Ok(())
}

/// Whether SQLite found the file damaged.
fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(sqlite_code(e), Some(rusqlite::ErrorCode::DatabaseCorrupt))
}
