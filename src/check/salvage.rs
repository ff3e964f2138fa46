//! Carrying what survives of a damaged stash into a new file.
//!
//! Every row that can still be read is decompressed and hash-checked, the ones that verify
//! go into a fresh stash built beside the damaged one, and the fresh file atomically
//! replaces it. The damaged file is kept under another name whenever objects were or may
//! have been lost. A kill at any point leaves either the damaged file in place (and the
//! next open salvages again) or the finished new one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};

use crate::cache::uses;
use crate::check::header_mend;
use crate::check::pagescan::{self, Indexed};
use crate::codec;
use crate::codec::zstd_dict::Dictionaries;
use crate::db::dicts;
use crate::db::first_generation::Generation;
use crate::db::meta;
use crate::db::models::{self, State};
use crate::db::names::{self, NameForm};
use crate::db::readers::open_connection;
use crate::db::row::PINNED;
use crate::db::row::{Column, Columns, Place};
use crate::db::scan;
use crate::db::schema::{self, Insert, KeyIndex, Schema};
use crate::error::{DbContext, Error, Result};
use crate::files::{self, JOURNALS, sibling};
use crate::key::Key;
use crate::large::chunks;
use crate::large::manifest::{self, ChunkRef, Manifest};
use crate::report::recovery::{RecoveryReport, Trigger};
use crate::settings::layout::Layout;
use crate::settings::values::Values;
use crate::values::value_log::ValueLog;
use crate::values::value_space::{self, LiveValues};

/// Rows read per query while salvaging; each query restarts past damage.
const CHUNK: usize = 512;
/// Rows inserted per transaction into the new file.
const INSERT_BATCH: usize = 10_000;

/// Replaces the damaged stash at `path` by a new one holding every object that verifies.
pub(crate) fn salvage(
    path: &Path,
    layout_hint: Option<Layout>,
    trigger: Trigger,
    problem: String,
) -> Result<RecoveryReport> {
    log::warn!("objstash: {} is damaged ({problem}); salvaging what verifies", path.display());
    let fresh_path = sibling(path, files::RECOVERING);
    let mut report = copy_intact(path, &fresh_path, layout_hint, trigger, problem)?;
    if report.lost_anything() {
        report.damaged_copy = Some(files::keep_damaged(path)?);
    } else {
        // The old file's journals must not be applied to the new one.
        for suffix in JOURNALS {
            files::remove_if_present(&sibling(path, suffix))?;
        }
    }
    fs::rename(&fresh_path, path)
        .map_err(|e| Error::io(format!("moving the recovered stash onto {}", path.display()), e))?;
    files::sync_dir(path);
    log::warn!("objstash: {report}");
    Ok(report)
}

/// Writes a stash at `into` holding every object of the damaged stash at `path` that
/// verifies, with its names, models, pins and settings, and leaves `path` as it is: what
/// [`repair`](crate::repair) would keep, for a caller that may not or need not replace the
/// damaged file (an export of a damaged stash, or a check that says what a repair would
/// keep). `into` must not be a stash in use; whatever is there is replaced. The report's
/// `damaged_copy` is `None`.
///
/// # Errors
/// [`Error::Io`] or [`Error::Database`] if the copy cannot be written (a full disk, say),
/// or the damaged file cannot be opened at all.
pub fn rescue(path: impl AsRef<Path>, into: impl AsRef<Path>) -> Result<RecoveryReport> {
    let (path, into) = (path.as_ref(), into.as_ref());
    // Values kept in a file stay where they are in a copy of it.
    let values = ValueLog::path_of(path);
    if values.exists() {
        fs::copy(&values, ValueLog::path_of(into))
            .map_err(|e| Error::io(format!("copying {}", values.display()), e))?;
    }
    let problem = "read as far as it can be".to_string();
    copy_intact(path, into, None, Trigger::DamageFound, problem)
}

/// Builds at `fresh_path` a stash of every object of `path` that verifies; the report
/// counts what was kept and what was claimed.
fn copy_intact(
    path: &Path,
    fresh_path: &Path,
    layout_hint: Option<Layout>,
    trigger: Trigger,
    problem: String,
) -> Result<RecoveryReport> {
    let fresh_path = fresh_path.to_path_buf();
    files::remove_if_present(&fresh_path)?;
    for suffix in JOURNALS {
        files::remove_if_present(&sibling(&fresh_path, suffix))?;
    }

    // A damaged header is rebuilt from the pages in a copy, which everything below reads:
    // trusting it would read every page at the wrong place.
    let mended = header_mend::mend(path)?;
    let problem = match &mended {
        Some(mended) if !problem.contains(&mended.problem) => {
            format!("{problem}; {}", mended.problem)
        }
        _ => problem,
    };
    let source = mended.as_ref().map_or(path, |m| m.path.as_path());
    let damaged = Connection::open_with_flags(source, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| Error::db(format!("opening damaged {} to salvage it", path.display()), e))?;
    let layout = meta::read_layout(&damaged).ok().flatten().or(layout_hint).unwrap_or_default();
    let claimed = meta::read_totals(&damaged).ok().map(|t| t.objects);

    // A stash whose values are in a file keeps the file: the rows that verify keep their
    // places in it, and only the database is rebuilt.
    let stored = Schema::read(&damaged, layout).map(|s| s.stored()).unwrap_or_else(|_| {
        if ValueLog::path_of(path).exists() { Values::InFile } else { Values::InRows }
    });
    let log = match stored {
        Values::InFile => ValueLog::open(path, false)
            .inspect_err(|e| log::warn!("objstash salvage: {e}; the values there are lost"))
            .ok(),
        Values::InRows => None,
    };
    let target = Schema::fresh(layout, stored);
    let fresh =
        open_connection(&fresh_path, false, target.statement_count(), Duration::from_secs(10))?;
    fresh
        .execute_batch(&format!(
            "PRAGMA page_size = {}; PRAGMA journal_mode = OFF;",
            schema::PAGE_SIZE
        ))
        .context(|| format!("preparing {}", fresh_path.display()))?;
    target.create(&fresh, &value_space::tables(stored))?;
    // Zstd rows need their dictionaries to be checked; every readable one is carried over.
    let dicts = dicts::load(&damaged).unwrap_or_else(|e| {
        log::warn!("objstash salvage: the dictionaries cannot be read ({e}); zstd rows are lost");
        Dictionaries::default()
    });
    dicts::store_all(&dicts, &fresh)?;

    // Chunks first: a chunked object's row is kept only if all its chunks are.
    let chunks = salvage_chunks(&damaged, &fresh)?;
    let mut salvager = Salvager {
        chunks: &chunks,
        dicts: &dicts,
        fresh: &fresh,
        target: &target,
        log: log.as_ref(),
        live: LiveValues::default(),
        rows: Vec::new(),
        recovered: 0,
        dropped: 0,
        dropped_keys: HashSet::new(),
        was_at: HashMap::new(),
    };
    for name in object_tables(&damaged, layout) {
        salvager.table(&damaged, &name)?;
    }
    salvager.write()?;
    // Rows below a torn interior page are out of SQLite's reach; read the pages directly.
    salvager.offer_all("scanning the pages", path, |offer| {
        pagescan::scan(source, stored, |rowid, (key, raw_len, data, place)| {
            let mut data = Some(data);
            offer(key, &mut || data.take().map(|data| (raw_len, data, place, Some(rowid))));
        })
    })?;
    // A lookup through the index (what `get` does) can reach a row that every scan missed;
    // the index pages name the keys to look up (or, for prefix indexes, the rowids).
    salvager.offer_all("reading the index pages", path, |offer| {
        pagescan::scan_index(source, |entry| match entry {
            Indexed::Key(key) => offer(key, &mut || {
                let select = target.table(&key).select(Generation::Young, false);
                damaged
                    .prepare_cached(select)
                    .and_then(|mut stmt| {
                        stmt.query_row([&key.as_bytes()[..]], |r| {
                            let row = select.columns.read(r);
                            Ok((row.raw_len()?, row.data()?.to_vec(), row.place()?, None))
                        })
                    })
                    .ok()
            }),
            Indexed::Prefix(prefix, rowid) => {
                let table = target.table(&Indexed::table_key(prefix));
                let read = Columns::new(
                    stored,
                    &[Column::Key, Column::RawLen, Column::Data, Column::Place],
                );
                let row = damaged
                    .prepare_cached(&format!(
                        "SELECT {} FROM {} WHERE rowid = ?1",
                        read.sql(),
                        table.name
                    ))
                    .and_then(|mut stmt| {
                        stmt.query_row([rowid], |r| {
                            let row = read.read(r);
                            Ok((row.key()?, row.raw_len()?, row.data()?.to_vec(), row.place()?))
                        })
                    });
                if let Ok((Some(key), raw_len, data, place)) = row {
                    let mut data = Some(data);
                    offer(key, &mut || data.take().map(|data| (raw_len, data, place, Some(rowid))));
                }
            }
        })
    })?;
    let (recovered, dropped) = (salvager.recovered, salvager.dropped);
    let carried = carried_models(&damaged, &mut salvager);
    if log.is_some() {
        salvager.live.restore(&fresh)?;
    }
    let kept_apart = models::restore(&fresh, &target, &carried)?;
    if !kept_apart.is_empty() {
        log::warn!(
            "objstash salvage: {} of {} models lost objects; their roots read as absent until \
             the objects are saved again",
            kept_apart.len(),
            carried.len()
        );
    }
    salvage_pins(&damaged, &fresh, &target);
    salvage_settings(&damaged, &fresh);
    let names_recovered = salvage_names(&damaged, source, &fresh, &target, &kept_apart)?;
    let names_claimed = if names::table_exists(&damaged).unwrap_or(true) {
        meta::read_totals(&damaged).ok().map(|t| t.names)
    } else {
        Some(0)
    };
    if !chunks.is_empty() {
        chunks::recount_refs(&fresh, &target)?;
    }
    crate::check::totals::recount_totals(&fresh, &target)?;
    drop(damaged);
    drop(mended);
    fresh.close().map_err(|(_, e)| Error::db(format!("closing {}", fresh_path.display()), e))?;
    fs::File::open(&fresh_path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(format!("syncing {}", fresh_path.display()), e))?;

    Ok(RecoveryReport {
        trigger,
        problem: Some(problem),
        recovered,
        dropped,
        claimed,
        damaged_copy: None,
        names_recovered,
        names_claimed,
    })
}

/// The damaged file's models, to carry into the fresh one (`models::restore`): each lists
/// the rows it listed that were kept, by key, and counts the rows lost with their keys, so
/// that the root of a model that lost a member reads as absent. A root the model kept apart
/// is carried if it verifies. A model being assembled or evicted is not carried: what it
/// held stays, loose. Models that cannot be read are lost with a warning, their objects
/// loose.
fn carried_models(damaged: &Connection, salvager: &mut Salvager) -> Vec<models::Carried> {
    if !models::exist(damaged).unwrap_or(false) {
        return Vec::new();
    }
    let all = match models::all(damaged) {
        Ok(all) => all,
        Err(e) => {
            log::warn!(
                "objstash salvage: the models cannot be read ({e}); their objects stay, loose"
            );
            return Vec::new();
        }
    };
    let mut carried = Vec::new();
    for model in all {
        let (Some(root), State::Complete | State::Incomplete) = (model.root, model.state) else {
            continue;
        };
        let mut members = Vec::with_capacity(model.runs.len() as usize);
        let mut unknown = 0;
        for at in model.runs.rows() {
            // A row no read kept or dropped may still have a readable key.
            let key = salvager.was_at.get(&at).copied().or_else(|| {
                let name = salvager.target.layout.table_name(usize::from(at.0));
                damaged
                    .query_row(&format!("SELECT key FROM {name} WHERE rowid = ?1"), [at.1], |r| {
                        r.get::<_, Vec<u8>>(0)
                    })
                    .ok()
                    .and_then(|k| Key::from_slice(&k))
            });
            match key {
                Some(key) => members.push(key),
                None => unknown += 1,
            }
        }
        members.extend(models::missing_keys(damaged, model.id).unwrap_or_default());
        let hidden = models::hidden_root(damaged, model.id, false).ok().flatten().filter(|h| {
            let place = h.place.and_then(Place::unpack);
            let intact = salvager.verified(&root, h.raw_len, &h.data, place).is_some();
            if let (true, Some(place)) = (intact, place) {
                salvager.live.add(place);
            }
            intact
        });
        carried.push(models::Carried {
            root,
            name: model.name.clone(),
            pinned: model.pinned,
            used: model.used,
            members,
            unknown,
            hidden,
        });
    }
    carried
}

/// Records in the fresh file the durability, codec and size cap the damaged file records,
/// where its meta table can still be read: a rebuilt stash keeps its settings.
fn salvage_settings(damaged: &Connection, fresh: &Connection) {
    for name in ["durability", "codec"] {
        if let Ok(Some(value)) = meta::read_setting::<String>(damaged, name)
            && let Err(e) = meta::write_setting(fresh, name, &value)
        {
            log::warn!("objstash salvage: the {name} setting could not be carried over: {e}");
        }
    }
    if let Ok(Some(cap)) = meta::read_max_size(damaged)
        && let Err(e) = meta::write_max_size(fresh, Some(cap))
    {
        log::warn!("objstash salvage: the size cap could not be carried over: {e}");
    }
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
/// B-tree, so names are read up to five ways: the names table forwards and backwards, its
/// index by key (which holds each name beside its key, where the stash has it) forwards and
/// backwards, and the index pages of the file themselves (`pagescan::scan_names`). The
/// report counts what none of them reached.
fn salvage_names(
    damaged: &Connection,
    damaged_path: &Path,
    fresh: &Connection,
    target: &Schema,
    kept_apart: &[Key],
) -> Result<u64> {
    if !names::table_exists(damaged).unwrap_or(false) {
        return Ok(0);
    }
    names::create(fresh, false)?;
    // Names as given: read in the damaged file's form, stored in the fresh file's. A
    // damaged meta table leaves the format to tell: every names table of format 6 or
    // newer was made packed.
    let was = NameForm::read(damaged).unwrap_or_else(|_| {
        let version = damaged.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
        if version.is_ok_and(|v| v >= crate::db::format::PACKED_NAMES) {
            NameForm::Packed
        } else {
            NameForm::Raw
        }
    });
    let form = NameForm::read(fresh)?;
    let mut found: HashMap<Vec<u8>, Key> = HashMap::new();
    let table = names::TABLE;
    let by_key = names::indexed_by_key(damaged).unwrap_or(false);
    for (source, order) in [
        (table.to_string(), "name ASC"),
        (table.to_string(), "name DESC"),
        (format!("{table} INDEXED BY {table}_key"), "key ASC"),
        (format!("{table} INDEXED BY {table}_key"), "key DESC"),
    ]
    .into_iter()
    .filter(|(source, _)| by_key || !source.contains("INDEXED BY"))
    {
        let read = (|| -> rusqlite::Result<()> {
            let mut stmt =
                damaged.prepare(&format!("SELECT name, key FROM {source} ORDER BY {order}"))?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let (name, key): (Vec<u8>, Vec<u8>) = (row.get(0)?, row.get(1)?);
                if let Some(key) = Key::from_slice(&key) {
                    found.entry(was.name(&name)).or_insert(key);
                }
            }
            Ok(())
        })();
        if let Err(e) = read {
            log::warn!("objstash salvage: reading the names ({order}) stopped: {e}");
        }
    }
    // The pages themselves: names on leaf pages that a damaged interior page hides from
    // the reads above (and the entries of the index by key, where the stash has it).
    let mut scanned: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let Err(e) = pagescan::scan_names(damaged_path, |first, second| {
        scanned.push((first.to_vec(), second.to_vec()));
    }) {
        log::warn!("objstash salvage: reading the names' pages stopped: {e}");
    }
    let stored = |key: &Key| {
        let table = target.table(key);
        kept_apart.contains(key)
            || fresh
                .prepare_cached(&table.exists)
                .and_then(|mut s| s.exists([&key.as_bytes()[..]]))
                .unwrap_or(false)
    };
    for (first, second) in scanned {
        // (name, key) from the table, (key, name) from its index: the key is the blob
        // whose object was recovered.
        for (name, key) in [(&first, &second), (&second, &first)] {
            let name = was.name(name);
            if let Some(key) = Key::from_slice(key)
                && !found.contains_key(&name)
                && stored(&key)
            {
                found.insert(name, key);
                break;
            }
        }
    }
    let tx = fresh.unchecked_transaction().context(|| "starting to copy names".to_string())?;
    let mut copied = 0;
    for (name, key) in found {
        // A name is copied with its object, or with a root its model keeps aside.
        let insert = match kept_apart.contains(&key) {
            true => names::NameSql::INSERT_KNOWN,
            false => &target.table(&key).name_insert,
        };
        copied += tx
            .prepare_cached(insert)
            .and_then(|mut s| s.execute(params![&form.store(&name)[..], &key.as_bytes()[..]]))
            .context(|| format!("copying the names of {key}"))? as u64;
    }
    tx.commit().context(|| "committing the copied names".to_string())?;
    Ok(copied)
}

/// Copies every chunk of the damaged file that SQLite can still read and that checks into
/// the fresh file; their keys. Their references are recounted once the objects are in.
fn salvage_chunks(damaged: &Connection, fresh: &Connection) -> Result<HashSet<Key>> {
    let mut kept = HashSet::new();
    if !chunks::table_exists(damaged).unwrap_or(false) {
        return Ok(kept);
    }
    chunks::create(fresh)?;
    let tx = fresh.unchecked_transaction().context(|| "starting to copy chunks".to_string())?;
    let read = (|| -> rusqlite::Result<()> {
        let mut stmt =
            damaged.prepare(&format!("SELECT key, raw_len, form, data FROM {}", chunks::TABLE))?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let (key, raw_len, form, data): (Vec<u8>, i64, i64, Vec<u8>) =
                (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
            let Some(key) = Key::from_slice(&key) else { continue };
            let entry = ChunkRef { key, len: raw_len.clamp(0, i64::from(u32::MAX)) as u32 };
            if chunks::check(&entry, raw_len, form, &data).is_err() {
                continue;
            }
            tx.prepare_cached(&format!(
                "INSERT OR IGNORE INTO {}(key, raw_len, form, data) VALUES (?1, ?2, ?3, ?4)",
                chunks::TABLE
            ))?
            .execute(params![&key.as_bytes()[..], raw_len, form, data])?;
            kept.insert(key);
        }
        Ok(())
    })();
    if let Err(e) = read {
        log::warn!("objstash salvage: reading the chunks stopped: {e}");
    }
    tx.commit().context(|| "committing the copied chunks".to_string())?;
    Ok(kept)
}

struct Salvager<'a> {
    /// Chunks carried over.
    chunks: &'a HashSet<Key>,
    dicts: &'a Dictionaries,
    fresh: &'a Connection,
    target: &'a Schema,
    /// The damaged stash's file of values, if it has one and it opens.
    log: Option<&'a ValueLog>,
    /// The values kept in the file of values, by segment.
    live: LiveValues,
    /// Rows to write: key, raw length, value (empty when in the file) and place.
    rows: Vec<(Key, i64, Vec<u8>, Option<Place>)>,
    recovered: u64,
    dropped: u64,
    /// Keys of dropped rows, so a row both SQLite and the page scan find counts once.
    dropped_keys: HashSet<Key>,
    /// The key of each row met (kept or dropped) by where it was in the damaged file,
    /// `(table, rowid)`: how its models list it (`db/models.rs`).
    was_at: HashMap<(u16, i64), Key>,
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
        // The damaged file's tables have one of the two kinds of key index; the other's
        // statements do not prepare.
        let listings = [KeyIndex::Full, KeyIndex::Generations]
            .into_iter()
            .flat_map(|index| index.rowid_listings(table, Layout::bucket_of(table)));
        for sql in listings {
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
        // Every table of the stash reads the same columns: its scan's.
        let read = &self.target.tables[0].scan.columns;
        let list = read.sql();
        let forward = scan::chunk_sql(table, list);
        let (mut after, mut skip) = (0i64, 1i64);
        while after < end {
            match self.rows(damaged, &forward, read, after, &mut done) {
                Ok(Some((_, last))) if last > after => (after, skip) = (last, 1),
                Ok(None) => break,
                // A damaged page can give rows out of order: skip on, as past an error,
                // never back to rows read already.
                Ok(Some(_)) | Err(_) => {
                    after = after.saturating_add(skip);
                    skip = skip.saturating_mul(2);
                }
            }
            self.write_if_full()?;
        }
        let backward =
            format!("SELECT {list} FROM {table} WHERE rowid < ?1 ORDER BY rowid DESC LIMIT ?2");
        let mut before = end.saturating_add(1);
        while let Ok(Some((_, last))) = self.rows(damaged, &backward, read, before, &mut done) {
            if last >= before {
                break;
            }
            before = last;
            self.write_if_full()?;
        }
        let one = format!("SELECT {list} FROM {table} WHERE rowid = ?1 LIMIT ?2");
        for rowid in listed {
            if !done.contains(&rowid) {
                let _ = self.rows(damaged, &one, read, rowid, &mut done);
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
        read: &Columns,
        bound: i64,
        done: &mut HashSet<i64>,
    ) -> rusqlite::Result<Option<(i64, i64)>> {
        let mut stmt = damaged.prepare_cached(sql)?;
        let mut rows = stmt.query(params![bound, CHUNK as i64])?;
        let mut span = None;
        while let Some(row) = rows.next()? {
            let row = read.read(row).lenient()?;
            span = Some((span.map_or(row.rowid, |(first, _)| first), row.rowid));
            if !done.insert(row.rowid) {
                continue;
            }
            match row.key() {
                Some(key) => self.take(key, row.raw_len, &row.data, row.place, Some(row.rowid)),
                // A key of the wrong length: the row is gone, and there is no key to name.
                None => self.dropped += 1,
            }
        }
        Ok(span)
    }

    /// Runs a pass that offers rows by key (`scan` calls `offer` with each key and a way to
    /// read its row): every row not seen yet is taken, full batches are written as they
    /// fill. A pass that stops early is logged (what it offered is kept); a write that fails
    /// is the error.
    fn offer_all<E: std::fmt::Display>(
        &mut self,
        what: &str,
        path: &Path,
        scan: impl FnOnce(
            &mut dyn FnMut(
                Key,
                &mut dyn FnMut() -> Option<(i64, Vec<u8>, Option<Place>, Option<i64>)>,
            ),
        ) -> Result<(), E>,
    ) -> Result<()> {
        let mut failed = None;
        let scanned = scan(&mut |key, read| {
            if failed.is_some() || self.seen(&key) {
                return;
            }
            if let Some((raw_len, data, place, rowid)) = read() {
                self.take(key, raw_len, &data, place, rowid);
                failed = self.write_if_full().err();
            }
        });
        if let Err(e) = scanned {
            log::warn!("objstash salvage: {what} of {} stopped: {e}", path.display());
        }
        if let Some(e) = failed {
            return Err(e);
        }
        self.write()
    }

    /// Keeps a row that verifies; counts one that does not, once per key. A row whose value
    /// is in the file of values (`place`) is checked there and keeps its place. `rowid`,
    /// where the row was in the damaged file if known, lets its models find it again.
    fn take(
        &mut self,
        key: Key,
        raw_len: i64,
        data: &[u8],
        place: Option<Place>,
        rowid: Option<i64>,
    ) {
        if let Some(rowid) = rowid {
            self.was_at.insert((self.target.layout.table_of(&key) as u16, rowid), key);
        }
        let Some(data) = self.verified(&key, raw_len, data, place) else {
            if self.dropped_keys.insert(key) {
                self.dropped += 1;
            }
            return;
        };
        match place {
            Some(place) => {
                self.live.add(place);
                self.rows.push((key, raw_len, Vec::new(), Some(place)));
            }
            None => self.rows.push((key, raw_len, data, None)),
        }
    }

    /// The stored bytes of a row that verifies (read from the file of values where its
    /// value is there, `place`), or `None`.
    fn verified(
        &self,
        key: &Key,
        raw_len: i64,
        data: &[u8],
        place: Option<Place>,
    ) -> Option<Vec<u8>> {
        let in_file = place.and_then(|place| self.log?.read(place).ok());
        if place.is_some() && in_file.is_none() {
            // The file lacks it (lost, or shorter than the place).
            return None;
        }
        let data = in_file.unwrap_or_else(|| data.to_vec());
        let intact = if manifest::is_manifest(&data) {
            Manifest::decode(&data, raw_len)
                .is_ok_and(|m| m.chunks.iter().all(|c| self.chunks.contains(&c.key)))
        } else {
            codec::decode_checked(key, raw_len, &data, self.dicts).is_ok()
        };
        intact.then_some(data)
    }

    /// Whether a row of `key` was already kept or dropped.
    fn seen(&self, key: &Key) -> bool {
        self.dropped_keys.contains(key) || self.has(key)
    }

    /// Whether `key` is already in the new file (rows not yet written may repeat; they are
    /// verified again and inserted once).
    fn has(&self, key: &Key) -> bool {
        let table = self.target.table(key);
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
        for (key, raw_len, data, place) in self.rows.drain(..) {
            let table = self.target.table(&key);
            let added = table
                .add(&tx, &key, raw_len, &data, now, Insert { place, ..Insert::VALUE })
                .context(|| format!("copying {key} into the recovered stash"))?;
            self.recovered += added as u64;
        }
        tx.commit().context(|| "committing a salvage batch".to_string())
    }
}

/// The object tables of a damaged file: those of either layout its schema still names, or
/// the recorded layout's when the schema cannot be read.
fn object_tables(conn: &Connection, layout: Layout) -> Vec<String> {
    let listed: rusqlite::Result<HashSet<String>> = (|| {
        let mut stmt = conn.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")?;
        let names = stmt.query_map([], |r| r.get(0))?;
        names.collect()
    })();
    let of = |layout: Layout| (0..layout.table_count()).map(move |i| layout.table_name(i));
    match listed {
        Ok(listed) => {
            let found: Vec<String> = of(Layout::Single)
                .chain(of(Layout::Bucketed))
                .filter(|name| listed.contains(name))
                .collect();
            if found.is_empty() { of(layout).collect() } else { found }
        }
        Err(_) => of(layout).collect(),
    }
}
