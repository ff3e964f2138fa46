//! Connections: how each one is opened, and the pool of read connections.
//!
//! Reads never use the writer's connection: each reading thread takes a connection of its
//! own from the pool (opening one when none is idle) and puts it back when done, so reads
//! proceed in parallel with each other and with the writer's open transaction. Read
//! connections are `query_only`; they keep their prepared statements between uses.
//!
//! **Kept snapshots.** A read of one key (`get`, `contains`) does not begin and end a read
//! transaction of its own: the connection keeps its transaction (its snapshot) open between
//! reads, for at most `held_for` (`StashBuilder::read_snapshot`, default 20 ms), and the
//! next read on it reuses it. Beginning a read transaction costs SQLite two file-lock
//! system calls and a check of the log's index (notes/experiments.md has the figures). A
//! snapshot is only ever behind, never wrong, and an object never changes under its key, so
//! what a kept one can miss is bounded:
//! - this handle's own writes: the writer counts its commits ([`Commits`]) before it
//!   forgets their rows from the pending map, and a snapshot begun before the latest commit
//!   is not reused (a read that misses the pending map finds its row committed, and by then
//!   counted);
//! - other handles' and processes' writes: a read that finds nothing in a kept snapshot
//!   reads again in a new one, so an object committed before the read began is found; what
//!   a kept snapshot can still show is an object another handle removed less than
//!   `held_for` ago;
//! - checkpoints: a snapshot keeps the log from being checkpointed past it, so an idle
//!   connection gives its snapshot up once it is `held_for` old (the keeper thread ends it).
//!
//! A stash in rollback-journal mode (`Durability::Owned`) keeps none: there a read
//! transaction's lock would keep the writer from committing.
//!
//! **A map of a small file** ([`ReadMap`]). A connection opened on a file of at most
//! 64 MiB maps it and reads its pages in place; before it begins a read transaction it
//! checks the file's size, and is replaced by one without a map once the file is larger.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::error::{DbContext, Error, Result, sqlite_code};

/// Page cache of the writer connection, in KiB (negative `cache_size`): it holds the index
/// pages a batch dirties; see notes/design.md.
pub(crate) const WRITER_CACHE_KIB: i64 = 16 * 1024;
/// Page cache of each read connection, in KiB. Reads are point lookups; the OS page cache
/// serves the rest, and there is one read connection per reading thread, so this is what
/// bounds the readers' memory.
pub(crate) const READER_CACHE_KIB: i64 = 8 * 1024;
/// How much of the file a read connection maps into memory (SQLite's `mmap_size`), so that
/// its reads find their pages in the OS page cache in place, with no `pread` and no copy
/// into the connection's own cache (the largest part of a warm `get` after inflating).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadMap {
    /// The default: [`SMALL_FILE`] bytes for a connection opened while the database file
    /// fits in them, none for one opened on a larger file. A small stash is read whole and
    /// often, so the map pays and holds at most the file; a map of the first part of a
    /// large file would serve only the reads that land there, and each page fault brings
    /// in the pages around it (64 KiB), which count in the process's resident memory
    /// (notes/design.md).
    SmallFile,
    /// This many bytes whatever the file's size (0: no map), as the builder was told.
    Bytes(u64),
}

/// SQLite's largest map in the bundled build (`SQLITE_MAX_MMAP_SIZE`).
const LARGEST_MAP: u64 = 0x7fff_0000;

/// The default map's size, and the largest file it maps: python-diskcache's `mmap_size`.
const SMALL_FILE: u64 = 64 << 20;

impl ReadMap {
    /// The map of a stash whose values are where `values` says. A database whose values are
    /// in a file of their own holds about 116 bytes a row (`value_log.rs`): the default maps
    /// it whole, up to SQLite's largest map (about 18 million rows), so that a read's
    /// descents touch mapped pages and its only copy is the value's own bytes. The pages a
    /// read touches count in the process's resident memory (the OS page cache's, which the
    /// kernel drops under pressure): at most the database, about a seventh of a stash's bytes.
    pub(crate) fn for_values(self, values: crate::settings::values::Values) -> ReadMap {
        match (self, values) {
            (ReadMap::SmallFile, crate::settings::values::Values::InFile) => {
                ReadMap::Bytes(LARGEST_MAP)
            }
            (map, _) => map,
        }
    }

    /// The `mmap_size` of a connection opened now on the file at `path`.
    fn bytes(self, path: &Path) -> u64 {
        match self {
            ReadMap::Bytes(bytes) => bytes,
            ReadMap::SmallFile if small(path) => SMALL_FILE,
            ReadMap::SmallFile => 0,
        }
    }
}

/// Whether the file at `path` fits in the default map.
fn small(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() <= SMALL_FILE)
}

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

/// The longest a read connection keeps a snapshot (a read transaction) between reads,
/// unless [`StashBuilder::read_snapshot`](crate::StashBuilder::read_snapshot) says otherwise.
pub(crate) const DEFAULT_READ_SNAPSHOT: Duration = Duration::from_millis(20);

/// The commits of a handle's writer, counted: a snapshot taken before the latest one is
/// not reused, so a read that misses the pending map never misses what was committed.
#[derive(Debug, Default)]
pub(crate) struct Commits(AtomicU64);

impl Commits {
    /// Called by the writer after each commit, before it forgets the committed rows from
    /// the pending map.
    pub(crate) fn committed(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }

    /// How many commits there have been so far.
    pub(crate) fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Idle read connections of one stash, and the keeper thread that ends their snapshots.
#[derive(Debug)]
pub(crate) struct Readers {
    pool: Arc<Pool>,
    /// Taken and joined when the stash closes.
    keeper: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Pool {
    path: PathBuf,
    statements: usize,
    /// How much of the file each connection maps.
    map: ReadMap,
    busy: Duration,
    /// How long a read connection may keep a snapshot between reads; zero: not at all.
    held_for: Duration,
    idle: Mutex<Idle>,
    /// Wakes the keeper when a snapshot is pooled while it waits for one, and on close.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Idle {
    conns: Vec<Pooled>,
    /// The keeper waits for a snapshot to be pooled (rather than for one to expire).
    keeper_waiting: bool,
    closed: bool,
}

/// An idle connection and the snapshot it holds, if any.
#[derive(Debug)]
struct Pooled {
    conn: Connection,
    held: Option<Snapshot>,
    /// Mapped because the file was small when it was opened ([`ReadMap::SmallFile`]).
    small_map: bool,
}

/// A read transaction kept open between reads.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    /// The writer's commits counted before the transaction was begun.
    commits: u64,
    since: Instant,
}

impl Readers {
    /// `held_for`: how long connections may keep a snapshot between reads (zero: not at
    /// all; see the module documentation).
    pub(crate) fn new(
        path: PathBuf,
        statements: usize,
        map: ReadMap,
        busy: Duration,
        held_for: Duration,
    ) -> Result<Self> {
        let pool = Arc::new(Pool {
            path,
            statements,
            map,
            busy,
            held_for,
            idle: Mutex::new(Idle::default()),
            wake: Condvar::new(),
        });
        let keeper = if !held_for.is_zero() {
            let pool = Arc::clone(&pool);
            let thread = std::thread::Builder::new()
                .name("objstash-readers".into())
                .spawn(move || pool.keep())
                .map_err(|e| Error::io("starting the read connections' keeper thread", e))?;
            Some(thread)
        } else {
            None
        };
        Ok(Readers { pool, keeper: Mutex::new(keeper) })
    }

    /// An idle read connection, or a new one, outside any transaction; it goes back to the
    /// pool when dropped.
    pub(crate) fn checkout(&self) -> Result<Reader<'_>> {
        let (pooled, _) = self.pool.take()?;
        let mut reader = Reader::new(&self.pool, pooled);
        reader.end_snapshot()?;
        reader.unmap_if_outgrown()?;
        Ok(reader)
    }

    /// A read connection inside a snapshot no older than `held_for` that has seen every
    /// commit this handle's writer counted in `commits` (see the module documentation):
    /// the one it kept, or a new one. [`Reader::reused`] says which; a read that finds
    /// nothing in a reused snapshot should [`Reader::renew`] it and read again. On a stash
    /// that holds no snapshots the connection is outside any transaction.
    pub(crate) fn checkout_held(&self, commits: &Commits) -> Result<Reader<'_>> {
        let (pooled, closed) = self.pool.take()?;
        let mut reader = Reader::new(&self.pool, pooled);
        if self.pool.held_for.is_zero() || closed {
            reader.unmap_if_outgrown()?;
            return Ok(reader);
        }
        let current = commits.now();
        match reader.held {
            Some(s) if s.commits == current && s.since.elapsed() < self.pool.held_for => {
                reader.reused = true;
            }
            _ => reader.begin_snapshot(current)?,
        }
        Ok(reader)
    }

    /// When the stash closes: closes every idle connection and stops the keeper thread.
    /// Connections still on loan (a large object's reader outlives its stash) are closed
    /// when given back, and read without keeping snapshots. The keeper is joined here,
    /// not when the last reference goes: a Python program forks after closing its stash,
    /// and a thread of the parent cannot be joined in the child.
    pub(crate) fn close(&self) {
        {
            let mut idle = self.pool.lock();
            idle.closed = true;
            idle.conns.clear();
        }
        self.pool.wake.notify_all();
        let keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(keeper) = keeper {
            let _ = keeper.join();
        }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.close();
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection with its snapshot, or a new connection; and whether the pool
    /// is closed.
    fn take(&self) -> Result<(Pooled, bool)> {
        let (pooled, closed) = {
            let mut idle = self.lock();
            (idle.conns.pop(), idle.closed)
        };
        let pooled = match pooled {
            Some(p) => p,
            None => self.connect()?,
        };
        Ok((pooled, closed))
    }

    /// A new read connection.
    fn connect(&self) -> Result<Pooled> {
        let conn = open_connection(&self.path, true, self.statements, self.busy)?;
        let context = || format!("making a read connection to {}", self.path.display());
        conn.pragma_update(None, "query_only", true).context(context)?;
        let map = self.map.bytes(&self.path);
        if map > 0 {
            // SQLite caps it far below i64::MAX (2 GiB).
            let bytes = i64::try_from(map).unwrap_or(i64::MAX);
            conn.pragma_update(None, "mmap_size", bytes).context(context)?;
        }
        let small_map = map > 0 && self.map == ReadMap::SmallFile;
        Ok(Pooled { conn, held: None, small_map })
    }

    /// Takes a connection back; one that holds a snapshot wakes the keeper if it waits.
    fn put(&self, pooled: Pooled) {
        let mut idle = self.lock();
        if idle.closed || idle.conns.len() >= MAX_IDLE {
            return;
        }
        let held = pooled.held.is_some();
        idle.conns.push(pooled);
        if held && idle.keeper_waiting {
            idle.keeper_waiting = false;
            self.wake.notify_one();
        }
    }

    /// The keeper thread: ends the snapshots of idle connections once they are
    /// `held_for` old, so that none keeps the log from being checkpointed for longer.
    fn keep(&self) {
        let mut idle = self.lock();
        loop {
            if idle.closed {
                return;
            }
            let now = Instant::now();
            let oldest = idle.conns.iter().filter_map(|p| p.held.map(|s| s.since)).min();
            match oldest {
                None => {
                    idle.keeper_waiting = true;
                    idle = self.wake.wait(idle).unwrap_or_else(|p| p.into_inner());
                }
                Some(since) if now.duration_since(since) >= self.held_for => {
                    idle.conns.retain_mut(|pooled| match pooled.held {
                        Some(s) if now.duration_since(s.since) >= self.held_for => {
                            pooled.held = None;
                            // A connection whose transaction would not end is dropped.
                            pooled.conn.execute_batch("ROLLBACK").is_ok()
                                && pooled.conn.is_autocommit()
                        }
                        _ => true,
                    });
                }
                Some(since) => {
                    let left = self.held_for - now.duration_since(since);
                    idle = self.wake.wait_timeout(idle, left).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
        }
    }
}

/// A read connection on loan from [`Readers`].
pub(crate) struct Reader<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
    /// The snapshot this connection holds between reads.
    held: Option<Snapshot>,
    /// Whether `held` was kept from an earlier read (rather than begun for this one).
    reused: bool,
    /// As [`Pooled::small_map`], for the connection on loan.
    small_map: bool,
}

impl<'a> Reader<'a> {
    fn new(pool: &'a Pool, pooled: Pooled) -> Self {
        let Pooled { conn, held, small_map } = pooled;
        Reader { pool, conn: Some(conn), held, reused: false, small_map }
    }
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

    /// Whether the snapshot was kept from an earlier read (rather than begun for this one).
    pub(crate) fn reused(&self) -> bool {
        self.reused
    }

    /// Ends the snapshot and begins a new one: after a read that found nothing in a reused
    /// snapshot, to see what other processes committed since.
    pub(crate) fn renew(&mut self, commits: &Commits) -> Result<()> {
        self.begin_snapshot(commits.now())
    }

    fn begin_snapshot(&mut self, commits: u64) -> Result<()> {
        self.end_snapshot()?;
        self.unmap_if_outgrown()?;
        // BEGIN is deferred: the snapshot is taken by the first read, after `commits` was
        // counted.
        self.execute_batch("BEGIN").context(|| "starting a read transaction".to_string())?;
        self.held = Some(Snapshot { commits, since: Instant::now() });
        self.reused = false;
        Ok(())
    }

    /// Replaces a connection mapped while the file was small by one without a map once the
    /// file has outgrown it ([`ReadMap::SmallFile`]). Called outside any transaction, before
    /// one begins: one `stat` per transaction, not per read of a kept snapshot.
    fn unmap_if_outgrown(&mut self) -> Result<()> {
        if self.small_map && !small(&self.pool.path) {
            self.replace()?;
        }
        Ok(())
    }

    fn replace(&mut self) -> Result<()> {
        let fresh = self.pool.connect()?;
        self.conn = Some(fresh.conn);
        self.small_map = fresh.small_map;
        Ok(())
    }

    fn end_snapshot(&mut self) -> Result<()> {
        if self.held.take().is_some() && !self.is_autocommit() {
            // A read transaction has nothing to commit. One that met a damaged page may
            // refuse to end ("malformed"): the connection is then replaced, so that the
            // damage one read met never fails another.
            if self.execute_batch("ROLLBACK").is_err() || !self.is_autocommit() {
                self.replace()?;
            }
        }
        Ok(())
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
        // A connection left inside a transaction by a failed statement is not reused; one
        // inside its held snapshot keeps it.
        let small_map = self.small_map;
        if conn.is_autocommit() {
            self.pool.put(Pooled { conn, held: None, small_map });
        } else if let Some(held) = self.held {
            self.pool.put(Pooled { conn, held: Some(held), small_map });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `mmap_size` of the connection `readers` lends next.
    fn map_of(readers: &Readers) -> i64 {
        let reader = readers.checkout().unwrap();
        reader.pragma_query_value(None, "mmap_size", |r| r.get(0)).unwrap()
    }

    #[test]
    fn the_default_map_serves_a_small_file_and_is_dropped_once_the_file_outgrows_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let writer = Connection::open(&path).unwrap();
        writer.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(b BLOB)").unwrap();
        let busy = Duration::from_secs(5);
        let small = Readers::new(path.clone(), 4, ReadMap::SmallFile, busy, Duration::ZERO);
        let small = small.unwrap();
        let told = Readers::new(path.clone(), 4, ReadMap::Bytes(1 << 20), busy, Duration::ZERO);
        let told = told.unwrap();
        let none = Readers::new(path.clone(), 4, ReadMap::Bytes(0), busy, Duration::ZERO);
        let none = none.unwrap();
        // Snapshots kept far longer than the test: a kept one is only renewed on a commit.
        let held =
            Readers::new(path.clone(), 4, ReadMap::SmallFile, busy, Duration::from_secs(3600));
        let held = held.unwrap();
        let commits = Commits::default();
        let held_map = |commits: &Commits| -> i64 {
            let reader = held.checkout_held(commits).unwrap();
            reader.pragma_query_value(None, "mmap_size", |r| r.get(0)).unwrap()
        };
        assert_eq!(held_map(&commits), SMALL_FILE as i64);
        assert_eq!(map_of(&small), SMALL_FILE as i64);
        assert_eq!(map_of(&told), 1 << 20);
        assert_eq!(map_of(&none), 0);

        // The file grows past the map (checkpointed, so that the database file itself does).
        let blob = (SMALL_FILE + (1 << 20)) as i64;
        writer.execute("INSERT INTO t VALUES (zeroblob(?1))", [blob]).unwrap();
        writer.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > SMALL_FILE);
        // The pooled connection that was mapped is replaced by one without a map; a
        // map the builder asked for stays whatever the size.
        assert_eq!(map_of(&small), 0);
        assert_eq!(small.pool.lock().conns.len(), 1, "the mapped connection is not kept");
        assert_eq!(map_of(&told), 1 << 20);
        // A kept snapshot is read as it is; the one begun after a commit is not mapped.
        assert_eq!(held_map(&commits), SMALL_FILE as i64);
        commits.committed();
        assert_eq!(held_map(&commits), 0);
        let read: i64 = small
            .checkout()
            .unwrap()
            .query_row("SELECT length(b) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(read, blob);
    }
}
