//! The open sequence: from a path and settings to a running stash.
//!
//! `open` validates every setting before it touches the disk, recognises the file from its
//! header before it takes any lock (so a path that is not a stash is left exactly as it
//! was, with no lock file beside it), and takes its hold on the stash (`lock.rs`). The
//! first handle to open a stash that nobody has open looks into an unclean shutdown and
//! rebuilds a damaged file; later handles find it done. Then the durability and codec are
//! settled against what the stash records, the pragmas applied and the writer started. A
//! stash whose file or directory cannot be written opens read-only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::check::header_mend;
use crate::check::salvage;
use crate::codec;
use crate::codec::Codec;
use crate::db::format;
use crate::db::meta;
use crate::db::meta::State;
use crate::db::readers::{ReadMap, Readers};
use crate::db::readers::{open_connection, open_error};
use crate::db::schema::{self, Schema};
use crate::error::{DbContext, Error, Result, sqlite_code};
use crate::files::lock::Hold;
use crate::files::reserve;
use crate::large::chunks;
use crate::open::header;
use crate::report::recovery::{self, RecoveryReport, Trigger};
use crate::settings::durability::Durability;
use crate::settings::layout::Layout;
use crate::settings::values::Values;
use crate::stash::{Parts, Reopen, Saving, Stash};
use crate::values::value_space;
use crate::writer::WriterConfig;

/// Every setting of an open, as the builder gathered them.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub layout: Option<Layout>,
    /// Where a new stash keeps its values.
    pub values: Values,
    pub durability: Option<Durability>,
    pub codec: Option<Codec>,
    pub reconfigure: bool,
    pub create: bool,
    pub max_object: u64,
    pub level: u32,
    pub sample_bytes: usize,
    pub batch_size: usize,
    /// Keys a young index holds before the writer moves them (`key_index.rs`).
    pub young_keys: usize,
    pub channel_capacity: usize,
    pub threads: usize,
    pub read_map: ReadMap,
    pub read_snapshot: Duration,
    pub busy_timeout: Duration,
    pub read_only: bool,
    /// A size cap to record (`evict.rs`).
    pub max_size: Option<u64>,
    /// How long after its last use an object is safe from eviction.
    pub grace: Duration,
    /// How old a use must be for a read to record a new one (`uses.rs`).
    pub use_resolution: Duration,
    /// The shared remote tier (`remote.rs`).
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteConfig>,
}

/// The settings a stash runs with once the recorded and the requested ones are settled.
#[derive(Clone, Copy, Debug)]
struct Settings {
    durability: Durability,
    codec: Codec,
}

/// What a started handle may do.
enum Access {
    Writes,
    Reads,
    /// Reads only because the disk was full; the function opens the stash for writing.
    ReadsOnFullDisk(Reopen),
}

/// A connection to a recognised, recovered, configured stash, ready to start.
struct Prepared {
    conn: Connection,
    schema: Schema,
    settings: Settings,
    recovery: Option<RecoveryReport>,
}

/// Opens (or creates) the stash at `path`, with its remote if it has one.
pub(crate) fn open(options: &Options, path: &Path) -> Result<Stash> {
    #[cfg(feature = "remote")]
    if let Some(remote) = &options.remote {
        remote.validate()?;
    }
    #[allow(unused_mut)]
    let mut stash = open_local(options, path)?;
    #[cfg(feature = "remote")]
    if let Some(remote) = &options.remote {
        stash.attach_remote(remote.clone())?;
    }
    Ok(stash)
}

/// Opens (or creates) the stash at `path`.
fn open_local(options: &Options, path: &Path) -> Result<Stash> {
    options.validate()?;
    let path = path.to_path_buf();
    check_path(&path, options.create && !options.read_only)?;
    // What can be told before any lock is taken, so that nothing is made beside a file
    // that is not a stash; `prepare` decides under the lock, where no other handle can be
    // making the stash.
    let found = header::glance(&path)?;
    if options.read_only {
        return open_read_only(options, path, None);
    }
    let mut hold = match Hold::acquire(&path, options.busy_timeout) {
        Ok(hold) => hold,
        // A directory this process cannot write: a stash there can still be read.
        Err(Error::Io { source, .. }) if found.is_some() && is_read_only_error(&source) => {
            return open_read_only(options, path, None);
        }
        Err(e) if found.is_some() && e.is_disk_full() => {
            return open_on_full_disk(options, path, e);
        }
        Err(e) => return Err(e),
    };
    let prepared = match options.prepare(&path, hold.alone()) {
        Ok(prepared) => prepared,
        Err(Error::ReadOnly { .. }) if found.is_some() => {
            hold.abandon();
            return open_read_only(options, path, None);
        }
        Err(e) if found.is_some() && e.is_disk_full() => {
            hold.abandon();
            return open_on_full_disk(options, path, e);
        }
        Err(e) => {
            hold.abandon();
            return Err(e);
        }
    };
    hold.opened(prepared.settings.durability.owned())?;
    options.start(path, prepared, Some(hold), Access::Writes)
}

/// Opens for reading a stash whose open for writing found the disk full (`failure`). A
/// closed stash is in rollback-journal mode (`Stash::mark_closed`) and one a killed process
/// left has its log's index file: either is read without a new file. Its trims spend the
/// reserve (`bound.rs`), through a handle opened for writing then.
fn open_on_full_disk(options: &Options, path: PathBuf, failure: Error) -> Result<Stash> {
    log::warn!(
        "objstash: the disk holding {} is full, so it opens for reading only: {failure}",
        path.display()
    );
    let writable = Options { create: false, ..options.clone() };
    let again = path.clone();
    let reopen: Reopen = Arc::new(move || open_local(&writable, &again));
    open_read_only(options, path, Some(reopen))
}

/// Opens the stash at `path` for reading only: no writer, no recovery, and the lock taken
/// only where its file can be opened (a handle that reads still keeps a rebuild from
/// replacing the file under it). `full_disk` opens it for writing, for a handle that reads
/// only because the disk was full.
fn open_read_only(options: &Options, path: PathBuf, full_disk: Option<Reopen>) -> Result<Stash> {
    // Without lock files no objstash has ever opened the file, so none can be making it
    // now: it can be recognised before the hold makes them. With them, once the hold has
    // waited for any open under way.
    if !Hold::exists(&path) && header::recognise(&path)?.is_none() {
        return Err(Error::NotFound { path });
    }
    let hold = Hold::acquire_read_only(&path, options.busy_timeout)?;
    let Some(header) = header::recognise(&path)? else { return Err(Error::NotFound { path }) };
    format::check_readable(&path, header.user_version)?;
    let statements = Schema::most_statements();
    let conn = open_connection(&path, true, statements, options.busy_timeout)?;
    let layout = meta::read_layout(&conn)?.unwrap_or_default();
    check_layout(&path, options.layout, layout)?;
    let (durability, codec) = (
        meta::read_setting(&conn, "durability").ok().flatten(),
        meta::read_setting(&conn, "codec").ok().flatten(),
    );
    let settings = options.settle(&path, durability, codec)?;
    // A handle that cannot write cannot record a change: it would report a setting the
    // stash does not have.
    if settings.durability != durability.unwrap_or_default()
        || settings.codec != codec.unwrap_or_default()
    {
        return Err(match full_disk {
            Some(_) => Error::DiskFull { reserve: reserve::kept(&path), path },
            None => Error::ReadOnly { path },
        });
    }
    let schema = Schema::read(&conn, layout)?;
    let prepared = Prepared { conn, schema, settings, recovery: None };
    let access = match full_disk {
        Some(reopen) => Access::ReadsOnFullDisk(reopen),
        None => Access::Reads,
    };
    options.start(path, prepared, hold, access)
}

/// Refuses a requested layout other than the recorded one.
fn check_layout(path: &Path, requested: Option<Layout>, stored: Layout) -> Result<()> {
    match requested {
        Some(requested) if requested != stored => {
            Err(Error::LayoutMismatch { path: path.to_path_buf(), stored, requested })
        }
        _ => Ok(()),
    }
}

/// Whether an I/O error says the file system or directory cannot be written.
fn is_read_only_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
    )
}

impl Options {
    /// Starts a stash on a prepared connection, building what each part of the handle needs
    /// from the settings.
    fn start(
        &self,
        path: PathBuf,
        prepared: Prepared,
        hold: Option<Hold>,
        access: Access,
    ) -> Result<Stash> {
        let read_only = !matches!(access, Access::Writes);
        let Prepared { conn, schema, settings, recovery } = prepared;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.threads)
            .thread_name(|i| format!("objstash-worker-{i}"))
            .build()
            .map_err(|e| {
                Error::io(
                    format!("starting {} worker threads", self.threads),
                    std::io::Error::other(e),
                )
            })?;
        let statements = schema.statement_count();
        // In rollback-journal mode (owned) a held read transaction would block the writer.
        let held_for =
            if settings.durability.owned() { Duration::ZERO } else { self.read_snapshot };
        let map = self.read_map.for_values(schema.stored());
        let readers = Readers::new(path.clone(), statements, map, self.busy_timeout, held_for)?;
        // A writable open has given the tables their use column (`migrate`).
        let shared =
            Stash::shared(path, self.busy_timeout, schema, &conn, !read_only, self.use_resolution)?;
        let writer = (!read_only).then_some(WriterConfig {
            batch_size: self.batch_size,
            young_keys: self.young_keys as u64,
            capacity: self.channel_capacity,
            grace: self.grace,
        });
        let saving = Saving {
            level: self.level,
            codec: settings.codec,
            max_object: self.max_object,
            sample_bytes: self.sample_bytes,
        };
        Stash::start(Parts {
            shared,
            conn,
            durability: settings.durability,
            saving,
            writer,
            readers,
            pool,
            recovery,
            hold,
            full_disk: match access {
                Access::ReadsOnFullDisk(reopen) => Some(reopen),
                Access::Writes | Access::Reads => None,
            },
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
            ("young index size", self.young_keys),
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
        if self.max_size == Some(0) {
            return Err(Error::config(
                "a size cap of 0 bytes cannot hold anything: give at least 1 byte".to_string(),
            ));
        }
        if self.max_object == 0 {
            return Err(Error::config(
                "a maximum object size of 0 bytes refuses every object: give at least 1 byte"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// Opens the writer connection on a recognised, recovered, configured stash: each step
    /// its own function below.
    ///
    /// Only a handle that is `alone` with the stash looks into an unclean shutdown and may
    /// rebuild the file: with another handle open, the shutdown it would see is that
    /// handle's running session, and the file must not be replaced under it.
    fn prepare(&self, path: &Path, alone: bool) -> Result<Prepared> {
        let mut header = header::recognise(path)?;
        // A header whose page size its pages deny would have SQLite read every page at the
        // wrong place: the stash is rebuilt from its pages before SQLite reads it.
        let mut mended = None;
        if header.is_some() && alone {
            let reading = |e| Error::io(format!("reading the header of {}", path.display()), e);
            if let Some(problem) = header_mend::damage(path).map_err(reading)? {
                mended = Some(salvage::salvage(path, self.layout, Trigger::DamageFound, problem)?);
                header = header::recognise(path)?;
            }
        }
        // Read before SQLite opens the log: a torn one is checked whatever the state says.
        let torn_log = alone && header.is_some() && header::log_is_torn(path);
        let conn = self.connect(path)?;
        let Some(header) = header else { return self.create(conn, path, alone) };
        format::check_readable(path, header.user_version)?;
        let found = assess(&conn, path, alone, torn_log)?;
        if let Some(stored) = found.layout {
            check_layout(path, self.layout, stored)?;
        }
        // Read before any salvage, which builds a new meta table: the settings are carried
        // over by `configure`.
        let settings = self.settle(
            path,
            meta::read_setting(&conn, "durability").ok().flatten(),
            meta::read_setting(&conn, "codec").ok().flatten(),
        )?;
        if settings.durability.owned() && !alone {
            // Owning a stash needs every other handle gone.
            return Err(Error::Owned { path: path.to_path_buf() });
        }
        let (conn, recovery) = self.recover(conn, path, found)?;
        let recovery = recovery.or(mended);
        let schema = Schema::read(&conn, meta::read_layout(&conn)?.unwrap_or_default())?;
        for step in schema.migrate(&conn, crate::cache::uses::now())? {
            log::info!("objstash: {} {step}", path.display());
        }
        if alone {
            reclaim(&conn, path, &schema)?;
        }
        let conn = configure(conn, path, settings, alone, self.max_size)?;
        index_removals_if_capped(&conn, path, &schema)?;
        Ok(Prepared { conn, schema, settings, recovery })
    }

    /// The writer's connection; [`Error::ReadOnly`] where the file cannot be written.
    fn connect(&self, path: &Path) -> Result<Connection> {
        let statements = Schema::most_statements();
        let conn = open_connection(path, false, statements, self.busy_timeout)?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(Error::ReadOnly { path: path.to_path_buf() });
        }
        Ok(conn)
    }

    /// Makes a new stash in an empty file.
    fn create(&self, conn: Connection, path: &Path, alone: bool) -> Result<Prepared> {
        let schema = Schema::fresh(self.layout.unwrap_or_default(), self.values);
        conn.pragma_update(None, "page_size", schema::PAGE_SIZE)
            .context(|| format!("setting the page size of {}", path.display()))?;
        schema.create(&conn, &value_space::tables(self.values))?;
        let settings = self.settle(path, None, None)?;
        let conn = configure(conn, path, settings, alone, self.max_size)?;
        index_removals_if_capped(&conn, path, &schema)?;
        Ok(Prepared { conn, schema, settings, recovery: None })
    }

    /// Rebuilds the file if the assessment found it damaged, or reports a sound file after
    /// an unclean shutdown.
    fn recover(
        &self,
        conn: Connection,
        path: &Path,
        found: Assessment,
    ) -> Result<(Connection, Option<RecoveryReport>)> {
        match found.problem {
            Some(problem) => {
                // Committed pages still in the write-ahead log go into the file, which the
                // salvage's page reader reads directly (on a damaged file this may fail).
                let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                drop(conn);
                let layout = found.layout.or(self.layout);
                let trigger =
                    if found.unclean { Trigger::UncleanShutdown } else { Trigger::DamageFound };
                let report = salvage::salvage(path, layout, trigger, problem)?;
                Ok((self.connect(path)?, Some(report)))
            }
            None if found.unclean => {
                let layout = found.layout.unwrap_or_default();
                let schema = Schema::read(&conn, layout)?;
                // A full disk (what may have cut the log) keeps the recount from being
                // stored: the stash still opens, for reads and a trim, with the count.
                let totals = match crate::check::totals::recount_totals(&conn, &schema) {
                    Err(e) if e.is_disk_full() => {
                        log::warn!(
                            "objstash: {}: the recounted totals wait for room: {e}",
                            path.display()
                        );
                        crate::check::totals::count_totals(&conn, &schema)?
                    }
                    counted => counted?,
                };
                log::warn!(
                    "objstash: {} was not closed cleanly; the file checked sound and holds {} \
                     objects",
                    path.display(),
                    totals.objects
                );
                let report = RecoveryReport::sound(Trigger::UncleanShutdown, totals.objects);
                Ok((conn, Some(report)))
            }
            None => Ok((conn, None)),
        }
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

/// What an open of an existing stash found before recovering it.
struct Assessment {
    /// The recorded layout, when the meta table can be read.
    layout: Option<Layout>,
    /// Whether the last fast-mode session ended with the machine (the check ran).
    unclean: bool,
    /// What is wrong with the file, if the check found anything.
    problem: Option<String>,
}

/// Reads what the stash records and, when the last session may have left damage, checks
/// the file. A stash damaged by a crash in mid-commit may not even list its schema; that is
/// a case for recovery, not an error, once the header says the file is ours.
fn assess(conn: &Connection, path: &Path, alone: bool, torn_log: bool) -> Result<Assessment> {
    let damage = match schema::schema_object_count(conn) {
        Ok(_) => None,
        Err(e) if is_corruption(&e) => Some(format!("its schema cannot be read: {e}")),
        Err(e) => return Err(open_error(path, "reading its schema", e)),
    };
    let recorded = match (meta::read_state(conn), meta::read_layout(conn)) {
        _ if damage.is_some() => None,
        // Every writer reads the totals as it starts: rows of them that cannot be read are
        // a damaged meta table too.
        _ if matches!(meta::read_totals(conn), Err(Error::Database { .. })) => None,
        (Ok(state), Ok(Some(layout))) => Some((state, layout)),
        (Err(Error::Database { .. }), _) | (_, Err(Error::Database { .. })) | (_, Ok(None)) => None,
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    // After a fast-mode session that did not close, the file can only be damaged if the
    // machine stopped (WAL survives a killed process whatever `synchronous` says): the
    // check is needed when the boot it recorded is not this one.
    // An owned stash has no log to recover from: a kill can leave a commit half-written.
    let unclean = alone
        && (torn_log
            || match recorded {
                Some((State::OpenFast, _)) => {
                    meta::read_boot(conn).ok().flatten().is_none_or(|boot| Some(boot) != boot_id())
                }
                Some((State::OpenOwned, _)) => true,
                // A writer met damage: check it now, not only after a stop of the machine.
                Some((State::Damaged, _)) => true,
                _ => false,
            });
    let problem = match recorded {
        None => Some(damage.unwrap_or_else(|| "its meta table cannot be read".to_string())),
        Some(_) if unclean => recovery::check(conn),
        Some(_) => None,
    };
    if let Some(problem) = problem.as_ref().filter(|_| !alone) {
        // Another handle has it open: the file cannot be rebuilt under it.
        return Err(Error::Damaged {
            context: format!("opening {}", path.display()),
            reason: problem.clone(),
        });
    }
    Ok(Assessment { layout: recorded.map(|(_, layout)| layout), unclean, problem })
}

/// Gives back the chunks of large saves killed before their manifest (`chunks.rs`): only
/// a handle alone with the stash knows that no save is under way.
fn reclaim(conn: &Connection, path: &Path, schema: &Schema) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .context(|| format!("reclaiming the chunks of unfinished saves in {}", path.display()))?;
    let reclaimed = chunks::reclaim(conn).and_then(|reclaimed| {
        let assemblies = crate::db::models::reclaim(conn, schema, crate::cache::uses::now())?;
        if assemblies > 0 {
            log::info!(
                "objstash: {}: gave up {assemblies} assemblies of models whose root never came",
                path.display()
            );
        }
        Ok(reclaimed)
    });
    let end = conn.execute_batch(if reclaimed.is_ok() { "COMMIT" } else { "ROLLBACK" });
    let reclaimed = reclaimed?;
    end.context(|| format!("reclaiming the chunks of unfinished saves in {}", path.display()))?;
    if reclaimed.chunks > 0 {
        log::info!(
            "objstash: {}: gave back {} chunks ({} bytes) of large saves that did not finish",
            path.display(),
            reclaimed.chunks,
            reclaimed.bytes
        );
    }
    Ok(())
}

/// Applies the durability pragmas and records the settings; the first handle to open the
/// stash (`alone`) also marks it open, with the boot it runs in.
fn configure(
    conn: Connection,
    path: &Path,
    settings: Settings,
    alone: bool,
    max_size: Option<u64>,
) -> Result<Connection> {
    let durability = settings.durability;
    let (journal, synchronous) = durability.pragmas();
    // Before the journal mode: the switch of a closed stash (in rollback mode) back to WAL
    // rewrites the header page, and with SQLite's default (FULL) it synced twice, a third
    // of an open. Fast promises nothing of a power loss until the next boot's check.
    conn.pragma_update(None, "synchronous", synchronous)
        .context(|| format!("configuring {}", path.display()))?;
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
    conn.pragma_update(None, "temp_store", "MEMORY")
        // Deleted cells are zeroed where their page is written anyway; pages freed whole
        // are on the freelist, which salvage's page scan skips: removed objects are not
        // resurrected, and a delete does not write every page it frees (`ON` did: a trim
        // of large objects logged as many bytes as it freed, which a full disk lacks).
        .and_then(|()| conn.pragma_update(None, "secure_delete", "FAST"))
        .context(|| format!("configuring {}", path.display()))?;
    for (name, value) in [("durability", durability.as_str()), ("codec", settings.codec.as_str())] {
        if meta::read_setting::<String>(&conn, name)?.as_deref() != Some(value) {
            meta::write_setting(&conn, name, value)?;
        }
    }
    if let Some(cap) = max_size
        && meta::read_max_size(&conn)? != Some(cap)
    {
        meta::write_max_size(&conn, Some(cap))?;
    }
    if alone {
        let state = match durability {
            Durability::Fast => State::OpenFast,
            Durability::Safe => State::OpenSafe,
            Durability::Owned => State::OpenOwned,
        };
        meta::write_state(&conn, state)?;
        meta::write_setting(&conn, "boot", boot_id().as_deref().unwrap_or(""))?;
    } else if durability == Durability::Fast
        && !matches!(meta::read_state(&conn)?, State::OpenFast | State::Damaged)
    {
        // A handle that opened first in safe mode marked the stash for a session that a
        // power loss cannot damage; this one does not sync, so the next open after a stop
        // of the machine must check the file.
        meta::write_state(&conn, State::OpenFast)?;
    }
    Ok(conn)
}

/// Gives a capped stash the index of uses its evictions read, if it has none yet (it is
/// built at a stash's first cap or eviction, `schema.rs`); one pass over the tables, once.
/// A stash whose meta table or schema cannot be read here opens as it did before: the
/// writer indexes its uses before its first eviction.
fn index_removals_if_capped(conn: &Connection, path: &Path, schema: &Schema) -> Result<()> {
    let needed = matches!(meta::read_max_size(conn), Ok(Some(_)))
        && matches!(schema::has_uses(conn, schema), Ok(true))
        && matches!(schema.removals_indexed(conn), Ok(false));
    if !needed {
        return Ok(());
    }
    log::info!(
        "objstash: indexing the uses of the objects of {} for eviction (once)",
        path.display()
    );
    let what = || format!("indexing the uses and names of {}", path.display());
    conn.execute_batch("BEGIN IMMEDIATE").context(what)?;
    let indexed =
        schema.index_removals(conn).and_then(|()| conn.execute_batch("COMMIT").context(what));
    if indexed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    indexed
}

/// An id of the running boot of the machine, where the system tells one (Linux); `None`
/// elsewhere, which makes every unclean shutdown of a fast-mode stash be checked.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|id| !id.is_empty())
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
