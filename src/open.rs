//! The open sequence: from a path and settings to a running stash.
//!
//! `open` validates every setting before it touches the disk, recognises the file from its
//! header before it takes the lock (so a path that is not a stash is left exactly as it
//! was, without a lock file beside it), takes the write lock, recovers the database if the
//! last fast-mode writer died, settles the durability and codec against what the stash
//! records, applies the durability pragmas and starts the writer.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::codec;
use crate::dict::Codec;
use crate::durability::Durability;
use crate::error::{DbContext, Error, Result, sqlite_code};
use crate::layout::Layout;
use crate::lock::Lock;
use crate::readers::{open_connection, open_error};
use crate::recovery::{self, RecoveryReport, Trigger};
use crate::schema::{self, APPLICATION_ID, FORMAT_VERSION, Schema, State};
use crate::stash::{Parts, Stash};

/// The largest object a stash can take: SQLite refuses values over 1,000,000,000 bytes,
/// and a stored value can be a little larger than its object (gzip adds at most 5 bytes
/// per 64 KiB of incompressible data, zstd 0.4%).
pub(crate) const MAX_OBJECT_LIMIT: u64 = 960_000_000;

/// Every setting of an open, as the builder gathered them.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub layout: Option<Layout>,
    pub durability: Option<Durability>,
    pub codec: Option<Codec>,
    pub reconfigure: bool,
    pub create: bool,
    pub max_object: u64,
    pub level: u32,
    pub sample_bytes: usize,
    pub batch_size: usize,
    pub channel_capacity: usize,
    pub threads: usize,
    pub read_mmap: u64,
}

/// The settings a stash runs with once the recorded and the requested ones are settled.
#[derive(Clone, Copy, Debug)]
struct Settings {
    durability: Durability,
    codec: Codec,
}

/// Opens (or creates) the stash at `path`.
pub(crate) fn open(options: &Options, path: &Path) -> Result<Stash> {
    options.validate()?;
    let path = path.to_path_buf();
    check_path(&path, options.create)?;
    // Recognise what is there before taking the lock, so that nothing is left beside a file
    // that is not a stash; `prepare` reads the header again under the lock.
    let header = schema::read_header(&path)?;
    if header.is_some_and(|h| h.application_id != APPLICATION_ID && h.application_id != 0) {
        return Err(Error::ForeignDatabase { path });
    }
    let lock = Lock::acquire(&path)?;
    let (conn, schema, settings, recovery) = match options.prepare(&path) {
        Ok(prepared) => prepared,
        Err(e) => {
            lock.abandon();
            return Err(e);
        }
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .thread_name(|i| format!("objstash-worker-{i}"))
        .build()
        .map_err(|e| {
            Error::io(
                format!("starting {} worker threads", options.threads),
                std::io::Error::other(e),
            )
        })?;
    Stash::start(Parts {
        path,
        conn,
        schema,
        durability: settings.durability,
        level: options.level,
        codec: settings.codec,
        max_object: options.max_object,
        sample_bytes: options.sample_bytes,
        batch_size: options.batch_size,
        capacity: options.channel_capacity,
        read_mmap: options.read_mmap,
        pool,
        recovery,
        lock,
    })
}

impl Options {
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
        if !(1..=MAX_OBJECT_LIMIT).contains(&self.max_object) {
            return Err(Error::config(format!(
                "a maximum object size of {} bytes is out of range: use 1 to {MAX_OBJECT_LIMIT}",
                self.max_object
            )));
        }
        Ok(())
    }

    /// Opens the writer connection on a recognised, recovered, configured stash.
    fn prepare(
        &self,
        path: &Path,
    ) -> Result<(Connection, Schema, Settings, Option<RecoveryReport>)> {
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
                let schema = Schema::new(self.layout.unwrap_or_default());
                conn.pragma_update(None, "page_size", schema::PAGE_SIZE)
                    .context(|| format!("setting the page size of {}", path.display()))?;
                schema.create(&conn)?;
                let settings = self.settle(path, None, None)?;
                return Ok((configure(conn, path, settings)?, schema, settings, None));
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
        // Read before any salvage, which builds a new meta table: the settings are carried
        // over by `configure`.
        let settings = self.settle(
            path,
            schema::read_setting(&conn, "durability").ok().flatten(),
            schema::read_setting(&conn, "codec").ok().flatten(),
        )?;
        let problem = match recorded {
            None => Some(damage.unwrap_or_else(|| "its meta table cannot be read".to_string())),
            Some((State::OpenFast, _)) => recovery::check(&conn),
            Some(_) => None,
        };
        let unclean = matches!(recorded, Some((State::OpenFast, _)));
        let (conn, report) = match problem {
            Some(problem) => {
                drop(conn);
                let report = recovery::salvage(
                    path,
                    layout.or(self.layout),
                    Trigger::UncleanShutdown,
                    problem,
                )?;
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
                (conn, Some(RecoveryReport::sound(Trigger::UncleanShutdown, totals.objects)))
            }
            None => (conn, None),
        };
        let layout = schema::read_layout(&conn)?.unwrap_or_default();
        Ok((configure(conn, path, settings)?, Schema::new(layout), settings, report))
    }

    /// The durability and codec to run with: the requested ones for a new stash, the
    /// recorded ones when none is requested, and a requested one that differs from the
    /// recorded one only with [`Options::reconfigure`].
    fn settle(
        &self,
        path: &Path,
        durability: Option<Durability>,
        codec: Option<Codec>,
    ) -> Result<Settings> {
        fn pick<T: PartialEq + std::fmt::Display + Default + Copy>(
            path: &Path,
            setting: &'static str,
            requested: Option<T>,
            stored: Option<T>,
            reconfigure: bool,
        ) -> Result<T> {
            match (requested, stored) {
                (Some(requested), Some(stored)) if requested != stored && !reconfigure => {
                    Err(Error::SettingMismatch {
                        path: path.to_path_buf(),
                        setting,
                        stored: stored.to_string(),
                        requested: requested.to_string(),
                    })
                }
                (Some(requested), stored) => {
                    if stored.is_some_and(|s| s != requested) {
                        log::info!("objstash: {} {setting} changed to {requested}", path.display());
                    }
                    Ok(requested)
                }
                (None, stored) => Ok(stored.unwrap_or_default()),
            }
        }
        Ok(Settings {
            durability: pick(path, "durability", self.durability, durability, self.reconfigure)?,
            codec: pick(path, "codec", self.codec, codec, self.reconfigure)?,
        })
    }
}

/// Applies the durability pragmas, records the settings and marks the stash open.
fn configure(conn: Connection, path: &Path, settings: Settings) -> Result<Connection> {
    let durability = settings.durability;
    let (journal, synchronous) = durability.pragmas();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", journal, |r| r.get(0))
        .map_err(|e| open_error(path, "setting the journal mode", e))?;
    if !mode.eq_ignore_ascii_case(journal) {
        return Err(Error::JournalUnsupported {
            path: path.to_path_buf(),
            wanted: journal,
            found: mode,
            durability,
        });
    }
    conn.pragma_update(None, "synchronous", synchronous)
        .and_then(|()| conn.pragma_update(None, "temp_store", "MEMORY"))
        // Zeroed deleted content keeps salvage's page scan from resurrecting removed
        // objects; removes are rare in a cache, so the extra writes are too.
        .and_then(|()| conn.pragma_update(None, "secure_delete", "ON"))
        .context(|| format!("configuring {}", path.display()))?;
    schema::write_setting(&conn, "durability", durability.as_str())?;
    schema::write_setting(&conn, "codec", settings.codec.as_str())?;
    let state = match durability {
        Durability::Fast => State::OpenFast,
        Durability::Safe => State::OpenSafe,
    };
    schema::write_state(&conn, state)?;
    Ok(conn)
}

/// Rejects an empty path and a directory; with `create`, makes a missing parent
/// directory, without it, fails when there is no stash to open.
fn check_path(path: &Path, create: bool) -> Result<()> {
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
    if !create {
        let empty = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
        if empty {
            return Err(Error::NotFound { path: path.to_path_buf() });
        }
        return Ok(());
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
