//! Checking a stash after an unclean shutdown, and carrying what survives into a new file.
//!
//! In fast mode SQLite keeps its rollback journal in memory, so a process that dies in the
//! middle of a commit can leave the file with half a transaction. The writer records
//! `open-fast` in the meta table while it runs; an open that finds that marker runs
//! `PRAGMA integrity_check`. A damaged file is salvaged: every row that can still be read is
//! decompressed and hash-checked, the ones that verify go into a fresh stash built beside
//! the damaged one, and the fresh file atomically replaces it. The damaged file is kept
//! under another name whenever objects were or may have been lost. A kill at any point of this leaves either the damaged
//! file in place (and the next open salvages again) or the finished new one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, params};

use crate::codec;
use crate::dict::Dictionaries;
use crate::error::{DbContext, Error, Result};
use crate::files::{JOURNALS, sibling};
use crate::key::Key;
use crate::layout::Layout;
use crate::names;
use crate::pagescan;
use crate::readers::open_connection;
use crate::scan::{self, Columns, ScannedRow};
use crate::schema::{self, Schema};
use crate::uses::{self, PINNED};

/// Rows read per query while salvaging; each query restarts past damage.
const CHUNK: usize = 512;
/// Rows inserted per transaction into the new file.
const INSERT_BATCH: usize = 10_000;

/// Why a stash was checked and, if need be, rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// An open found that the previous fast-mode session did not close.
    UncleanShutdown,
    /// [`repair`](crate::repair) was called.
    Repair,
}

/// What a check of a stash found, and what rebuilding it kept and lost: after an open
/// found the previous fast-mode session did not close, or after [`repair`](crate::repair).
///
/// Writes that session had not committed are gone whatever the report says; `flush`
/// acknowledgements are what [`Durability::Safe`](crate::Durability::Safe) makes durable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Why the stash was checked.
    pub trigger: Trigger,
    /// What the check found wrong with the file; `None` when it checked sound and was kept
    /// as it was.
    pub problem: Option<String>,
    /// Objects in the stash after the check: all of them when it was sound, else those that
    /// verified and were carried into the new file.
    pub recovered: u64,
    /// Rows that were read but failed to decompress or to match their key; they are gone.
    /// A row whose key bytes are damaged can be read twice under different keys (once
    /// through SQLite, once from its page), so this can exceed the rows really lost.
    pub dropped: u64,
    /// Objects the damaged file's totals claimed, when they could be read: see
    /// [`RecoveryReport::lost`].
    pub claimed: Option<u64>,
    /// Where the damaged file was kept: only when objects or names were or may have been
    /// lost.
    pub damaged_copy: Option<PathBuf>,
    /// Names carried into the new file (each pointing to a recovered object).
    pub names_recovered: u64,
    /// Names the damaged file's totals claimed, when they could be read.
    pub names_claimed: Option<u64>,
}

impl RecoveryReport {
    /// The report of a check that found the file sound.
    pub(crate) fn sound(trigger: Trigger, objects: u64) -> Self {
        RecoveryReport {
            trigger,
            problem: None,
            recovered: objects,
            dropped: 0,
            claimed: None,
            damaged_copy: None,
            names_recovered: 0,
            names_claimed: None,
        }
    }

    /// Objects the stash recorded before the damage that are not in it now, when the old
    /// totals could be read.
    #[must_use]
    pub fn lost(&self) -> Option<u64> {
        self.claimed.map(|claimed| claimed.saturating_sub(self.recovered))
    }

    /// Whether the stash was rebuilt and objects were, or may have been, lost: rows
    /// dropped, objects missing against the old totals, or old totals that could not be
    /// read. This is the news a user must always get.
    #[must_use]
    pub fn lost_objects(&self) -> bool {
        self.problem.is_some() && (self.dropped > 0 || self.lost().is_none_or(|lost| lost > 0))
    }

    /// Names the stash recorded before the damage that are not in it now (their objects
    /// were lost, or the names table was damaged), when the old totals could be read.
    #[must_use]
    pub fn lost_names(&self) -> Option<u64> {
        self.names_claimed.map(|claimed| claimed.saturating_sub(self.names_recovered))
    }

    /// Whether the stash was rebuilt and objects or names were, or may have been, lost.
    #[must_use]
    pub fn lost_anything(&self) -> bool {
        self.lost_objects() || (self.problem.is_some() && self.lost_names() != Some(0))
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(problem) = &self.problem else {
            return match self.trigger {
                Trigger::UncleanShutdown => write!(
                    f,
                    "the stash was not closed cleanly; it checked sound and holds {} objects",
                    self.recovered
                ),
                Trigger::Repair => write!(
                    f,
                    "the stash checked sound ({} objects, all intact): nothing to repair",
                    self.recovered
                ),
            };
        };
        write!(f, "rebuilt a damaged stash ({problem}): kept {} objects", self.recovered)?;
        match self.lost() {
            Some(0) => write!(f, ", all it recorded")?,
            Some(lost) => write!(
                f,
                " of the {} it recorded: {lost} objects are lost",
                self.claimed.unwrap_or_default()
            )?,
            None => write!(f, "; what it held before is unknown, so objects may be lost")?,
        }
        if self.dropped > 0 {
            write!(f, "; {} damaged rows dropped", self.dropped)?;
        }
        match self.lost_names() {
            Some(0) if self.names_recovered == 0 => {}
            Some(0) => write!(f, "; kept all {} names", self.names_recovered)?,
            Some(lost) => write!(
                f,
                "; kept {} of {} names: {lost} names are lost",
                self.names_recovered,
                self.names_claimed.unwrap_or_default()
            )?,
            None => write!(f, "; kept {} names, of an unknown number", self.names_recovered)?,
        }
        match &self.damaged_copy {
            Some(copy) => write!(f, "; the damaged file is kept at {}", copy.display()),
            None => write!(f, "; nothing was lost, so the old file was not kept"),
        }
    }
}

/// Runs SQLite's integrity check; `None` when the file is sound, else what is wrong.
pub(crate) fn check(conn: &Connection) -> Option<String> {
    let result: rusqlite::Result<Vec<String>> = (|| {
        let mut stmt = conn.prepare("PRAGMA integrity_check(20)")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect()
    })();
    match result {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => None,
        Ok(lines) => Some(format!("integrity check: {}", lines.join("; "))),
        Err(e) => Some(format!("integrity check failed to run: {e}")),
    }
}

/// Replaces the damaged stash at `path` by a new one holding every object that verifies.
pub(crate) fn salvage(
    path: &Path,
    layout_hint: Option<Layout>,
    trigger: Trigger,
    problem: String,
) -> Result<RecoveryReport> {
    log::warn!("objstash: {} is damaged ({problem}); salvaging what verifies", path.display());
    let fresh_path = sibling(path, ".recovering");
    remove_if_present(&fresh_path)?;
    remove_if_present(&sibling(&fresh_path, "-journal"))?;

    let damaged = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| Error::db(format!("opening damaged {} to salvage it", path.display()), e))?;
    let layout = schema::read_layout(&damaged).ok().flatten().or(layout_hint).unwrap_or_default();
    let claimed = schema::read_totals(&damaged).ok().map(|t| t.objects);

    let target = Schema::new(layout);
    let fresh =
        open_connection(&fresh_path, false, target.statement_count(), Duration::from_secs(10))?;
    fresh
        .execute_batch(&format!(
            "PRAGMA page_size = {}; PRAGMA journal_mode = OFF;",
            schema::PAGE_SIZE
        ))
        .context(|| format!("preparing {}", fresh_path.display()))?;
    target.create(&fresh)?;
    // Zstd rows need their dictionaries to be checked; every readable one is carried over.
    let dicts = Dictionaries::load(&damaged).unwrap_or_else(|e| {
        log::warn!("objstash salvage: the dictionaries cannot be read ({e}); zstd rows are lost");
        Dictionaries::default()
    });
    dicts.store_all(&fresh)?;

    let mut salvager = Salvager {
        dicts: &dicts,
        fresh: &fresh,
        target: &target,
        rows: Vec::new(),
        recovered: 0,
        dropped: 0,
        dropped_keys: HashSet::new(),
    };
    for name in object_tables(&damaged, layout) {
        salvager.table(&damaged, &name)?;
    }
    salvager.write()?;
    // Rows below a torn interior page are out of SQLite's reach; read the pages directly.
    let mut scan_error = None;
    let scanned = pagescan::scan(path, |(key, raw_len, data)| {
        if scan_error.is_none() && !salvager.seen(&key) {
            salvager.take(key, raw_len, &data);
            scan_error = salvager.write_if_full().err();
        }
    });
    if let Err(e) = scanned {
        log::warn!("objstash salvage: scanning the pages of {} stopped: {e}", path.display());
    }
    if let Some(e) = scan_error {
        return Err(e);
    }
    salvager.write()?;
    // A lookup through the index (what `get` does) can reach a row that every scan missed;
    // the index pages name the keys to look up.
    let mut lookup_error = None;
    let looked_up = pagescan::scan_index_keys(path, |key| {
        if lookup_error.is_some() || salvager.seen(&key) {
            return;
        }
        let table = &target.tables[layout.table_of(&key)];
        let row = damaged.prepare_cached(&table.select).and_then(|mut stmt| {
            stmt.query_row([&key.as_bytes()[..]], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
        });
        if let Ok((raw_len, data)) = row {
            salvager.take(key, raw_len, &data);
            lookup_error = salvager.write_if_full().err();
        }
    });
    if let Err(e) = looked_up {
        log::warn!("objstash salvage: reading the index pages of {} stopped: {e}", path.display());
    }
    if let Some(e) = lookup_error {
        return Err(e);
    }
    salvager.write()?;
    let (recovered, dropped) = (salvager.recovered, salvager.dropped);
    salvage_pins(&damaged, &fresh, &target);
    let names_recovered = salvage_names(&damaged, &fresh, &target)?;
    let names_claimed = if names::table_exists(&damaged).unwrap_or(true) {
        schema::read_totals(&damaged).ok().map(|t| t.names)
    } else {
        Some(0)
    };
    schema::recount_totals(&fresh, &target)?;
    drop(damaged);
    fresh.close().map_err(|(_, e)| Error::db(format!("closing {}", fresh_path.display()), e))?;
    fs::File::open(&fresh_path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(format!("syncing {}", fresh_path.display()), e))?;

    let mut report = RecoveryReport {
        trigger,
        problem: Some(problem),
        recovered,
        dropped,
        claimed,
        damaged_copy: None,
        names_recovered,
        names_claimed,
    };
    if report.lost_anything() {
        report.damaged_copy = Some(keep_damaged(path)?);
    } else {
        // The old file's journals must not be applied to the new one.
        for suffix in JOURNALS {
            remove_if_present(&sibling(path, suffix))?;
        }
    }
    fs::rename(&fresh_path, path)
        .map_err(|e| Error::io(format!("moving the recovered stash onto {}", path.display()), e))?;
    sync_dir(path);
    log::warn!("objstash: {report}");
    Ok(report)
}

/// Pins again in the fresh file every recovered object whose pin the damaged file's use
/// index still shows (the index is read; damage there can lose a pin, never an object).
fn salvage_pins(damaged: &Connection, fresh: &Connection, target: &Schema) {
    for table in &target.tables {
        let pinned: rusqlite::Result<Vec<Vec<u8>>> = damaged
            .prepare(&format!("SELECT key FROM {} WHERE used = {PINNED}", table.name))
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect());
        let Ok(pinned) = pinned else { continue };
        for key in pinned {
            let repinned = fresh.prepare_cached(&table.pin).and_then(|mut s| {
                let mut rows = s.query([&key[..]])?;
                while rows.next()?.is_some() {}
                Ok(())
            });
            if let Err(e) = repinned {
                log::warn!("objstash salvage: a pin could not be carried over: {e}");
            }
        }
    }
}

/// Copies every name of the damaged file that SQLite can still read and whose object was
/// recovered into the fresh file; returns how many. Damage can cut any path through a
/// B-tree, so names are read four ways: the names table forwards and backwards, and its key
/// index (which holds each name beside its key) forwards and backwards. The report counts
/// what none of them reached.
fn salvage_names(damaged: &Connection, fresh: &Connection, target: &Schema) -> Result<u64> {
    if !names::table_exists(damaged).unwrap_or(false) {
        return Ok(0);
    }
    names::create(fresh)?;
    let mut found: HashMap<Vec<u8>, Key> = HashMap::new();
    let table = names::TABLE;
    for (source, order) in [
        (table.to_string(), "name ASC"),
        (table.to_string(), "name DESC"),
        (format!("{table} INDEXED BY {table}_key"), "key ASC"),
        (format!("{table} INDEXED BY {table}_key"), "key DESC"),
    ] {
        let read = (|| -> rusqlite::Result<()> {
            let mut stmt =
                damaged.prepare(&format!("SELECT name, key FROM {source} ORDER BY {order}"))?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let (name, key): (Vec<u8>, Vec<u8>) = (row.get(0)?, row.get(1)?);
                if let Some(key) = Key::from_slice(&key) {
                    found.entry(name).or_insert(key);
                }
            }
            Ok(())
        })();
        if let Err(e) = read {
            log::warn!("objstash salvage: reading the names ({order}) stopped: {e}");
        }
    }
    let tx = fresh.unchecked_transaction().context(|| "starting to copy names".to_string())?;
    let mut copied = 0;
    for (name, key) in found {
        let table = &target.tables[target.layout.table_of(&key)];
        copied += tx
            .prepare_cached(&names::NameSql::insert(&table.name))
            .and_then(|mut s| s.execute(params![name, &key.as_bytes()[..]]))
            .context(|| format!("copying the names of {key}"))? as u64;
    }
    tx.commit().context(|| "committing the copied names".to_string())?;
    Ok(copied)
}

struct Salvager<'a> {
    dicts: &'a Dictionaries,
    fresh: &'a Connection,
    target: &'a Schema,
    rows: Vec<(Key, i64, Vec<u8>)>,
    recovered: u64,
    dropped: u64,
    /// Keys of dropped rows, so a row both SQLite and the page scan find counts once.
    dropped_keys: HashSet<Key>,
}

impl Salvager<'_> {
    /// Reads every row of `table` that SQLite can still reach.
    ///
    /// Damage can cut any path through a B-tree, so rows are looked for four ways: the
    /// key index forwards and backwards (it lists rowids), the table forwards in rowid
    /// order, probing past each damaged stretch, and the table backwards from its end.
    /// Rowids the index listed that no scan reached are then fetched one by one.
    fn table(&mut self, damaged: &Connection, table: &str) -> Result<()> {
        let mut listed = BTreeSet::new();
        for order in ["ASC", "DESC"] {
            let sql =
                format!("SELECT rowid FROM {table} INDEXED BY {table}_key ORDER BY key {order}");
            let _ = (|| -> rusqlite::Result<()> {
                let mut stmt = damaged.prepare(&sql)?;
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    listed.insert(row.get::<_, i64>(0)?);
                }
                Ok(())
            })();
        }
        let max: Option<i64> = damaged
            .query_row(&format!("SELECT max(rowid) FROM {table}"), [], |r| r.get(0))
            .ok()
            .flatten();
        let end = max.into_iter().chain(listed.last().copied()).max().unwrap_or(0);

        let mut done = HashSet::new();
        let forward = scan::chunk_sql(table, Columns::Values);
        let (mut after, mut skip) = (0i64, 1i64);
        while after < end {
            match self.rows(damaged, &forward, after, &mut done) {
                Ok(Some((_, last))) => (after, skip) = (last, 1),
                Ok(None) => break,
                Err(_) => {
                    after = after.saturating_add(skip);
                    skip = skip.saturating_mul(2);
                }
            }
            self.write_if_full()?;
        }
        let backward = format!(
            "SELECT rowid, key, raw_len, length(data), data FROM {table} WHERE rowid < ?1 \
             ORDER BY rowid DESC LIMIT ?2"
        );
        let mut before = end.saturating_add(1);
        while let Ok(Some((_, last))) = self.rows(damaged, &backward, before, &mut done) {
            before = last;
            self.write_if_full()?;
        }
        let one = format!(
            "SELECT rowid, key, raw_len, length(data), data FROM {table} WHERE rowid = ?1 \
             LIMIT ?2"
        );
        for rowid in listed {
            if !done.contains(&rowid) {
                let _ = self.rows(damaged, &one, rowid, &mut done);
                self.write_if_full()?;
            }
        }
        Ok(())
    }

    /// Takes the rows `sql` returns for `bound`; returns the first and last rowid read, or
    /// `None` when there were none.
    fn rows(
        &mut self,
        damaged: &Connection,
        sql: &str,
        bound: i64,
        done: &mut HashSet<i64>,
    ) -> rusqlite::Result<Option<(i64, i64)>> {
        let mut stmt = damaged.prepare_cached(sql)?;
        let mut rows = stmt.query(params![bound, CHUNK as i64])?;
        let mut span = None;
        while let Some(row) = rows.next()? {
            let row = ScannedRow::read(row)?;
            span = Some((span.map_or(row.rowid, |(first, _)| first), row.rowid));
            if !done.insert(row.rowid) {
                continue;
            }
            match row.key() {
                Some(key) => self.take(key, row.raw_len, &row.data),
                // A key of the wrong length: the row is gone, and there is no key to name.
                None => self.dropped += 1,
            }
        }
        Ok(span)
    }

    /// Keeps a row that verifies; counts one that does not, once per key.
    fn take(&mut self, key: Key, raw_len: i64, data: &[u8]) {
        if codec::decode_checked(&key, raw_len, data, self.dicts).is_ok() {
            self.rows.push((key, raw_len, data.to_vec()));
        } else if self.dropped_keys.insert(key) {
            self.dropped += 1;
        }
    }

    /// Whether a row of `key` was already kept or dropped.
    fn seen(&self, key: &Key) -> bool {
        self.dropped_keys.contains(key) || self.has(key)
    }

    /// Whether `key` is already in the new file (rows not yet written may repeat; they are
    /// verified again and inserted once).
    fn has(&self, key: &Key) -> bool {
        let table = &self.target.tables[self.target.layout.table_of(key)];
        self.fresh
            .prepare_cached(&table.exists)
            .and_then(|mut s| s.exists([&key.as_bytes()[..]]))
            .unwrap_or(false)
    }

    fn write_if_full(&mut self) -> Result<()> {
        if self.rows.len() >= INSERT_BATCH { self.write() } else { Ok(()) }
    }

    fn write(&mut self) -> Result<()> {
        let tx = self
            .fresh
            .unchecked_transaction()
            .context(|| "starting a salvage batch".to_string())?;
        // Salvaged objects count as used now; pins are carried over by `salvage_pins`.
        let now = uses::now();
        for (key, raw_len, data) in self.rows.drain(..) {
            let table = &self.target.tables[self.target.layout.table_of(&key)];
            let added = tx
                .prepare_cached(&table.insert)
                .and_then(|mut s| s.execute(params![&key.as_bytes()[..], raw_len, data, now]))
                .context(|| format!("copying {key} into the recovered stash"))?;
            self.recovered += added as u64;
        }
        tx.commit().context(|| "committing a salvage batch".to_string())
    }
}

/// The object tables of a damaged file: the layout's, or whatever its schema still names.
fn object_tables(conn: &Connection, layout: Layout) -> Vec<String> {
    let listed: rusqlite::Result<Vec<String>> = (|| {
        let mut stmt = conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND (name = 'objects' OR name GLOB 'objects_[0-9a-f][0-9a-f]') ORDER BY name",
        )?;
        let names = stmt.query_map([], |r| r.get(0))?;
        names.collect()
    })();
    match listed {
        Ok(names) if !names.is_empty() => names,
        _ => (0..layout.table_count()).map(|i| layout.table_name(i)).collect(),
    }
}

/// Keeps the damaged file under a new name (a hard link, so the original path can be
/// replaced atomically), with any WAL files SQLite would otherwise apply to the new one.
fn keep_damaged(path: &Path) -> Result<PathBuf> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut n = 0;
    let copy = loop {
        let candidate = sibling(
            path,
            &format!(".damaged-{secs}{}", if n == 0 { String::new() } else { format!("-{n}") }),
        );
        if !candidate.exists() {
            break candidate;
        }
        n += 1;
    };
    if fs::hard_link(path, &copy).is_err() {
        fs::copy(path, &copy)
            .map_err(|e| Error::io(format!("keeping a copy of damaged {}", path.display()), e))?;
    }
    for suffix in JOURNALS {
        let side = sibling(path, suffix);
        if side.exists() {
            fs::rename(&side, sibling(&copy, suffix))
                .map_err(|e| Error::io(format!("moving {} aside", side.display()), e))?;
        }
    }
    Ok(copy)
}

pub(crate) fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing stale {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Err(e) = fs::File::open(dir).and_then(|d| d.sync_all()) {
            log::warn!("objstash: could not sync directory {}: {e}", dir.display());
        }
    }
}
