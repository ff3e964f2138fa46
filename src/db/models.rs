//! The model tables (format 10): a model is a root object and the objects it lists, kept,
//! evicted and reported together, so that a cache never answers for a root without the
//! whole model.
//!
//! `objstash_models` holds one row per model: its root's key, its state, its members as
//! runs of rows (`runs.rs`), their count and stored bytes, the members not stored, its last
//! use and whether it is pinned. `objstash_model_missing` lists the members a model names
//! that are not stored, by key. A member's row says which model it came with (`model`,
//! its home) and has `used` = [`MEMBER`](crate::db::row::MEMBER), so that eviction, which
//! takes rows by last use, never takes a member alone; a model is evicted whole, by its own
//! last use.
//!
//! **The invariant**: in every snapshot of every process, a root that can be read has its
//! whole model stored. The writer keeps it in every transaction that changes a model's
//! rows: a model that loses a member (a remove, damage, a salvage) becomes incomplete in the
//! same transaction, and its root's row leaves the object table for the model's row
//! (`hidden_*`), so that every read reports the root absent; once every member is stored
//! again the root's row goes back. A model is evicted root first. A model being assembled
//! (`Assembling`, its objects saved or held before its root is declared) has no root yet.
//!
//! The tables, the `model` column of the object tables and the format are made by the
//! first model (`ensure`), so a stash without models stays as it was.

use rusqlite::{Connection, OptionalExtension, params};

use crate::db::format;
use crate::db::runs::Runs;
use crate::db::schema::Schema;
use crate::error::{DbContext, Result};
use crate::key::Key;

/// The models.
pub(crate) const MODELS: &str = "objstash_models";
/// The members models name that are not stored.
pub(crate) const MISSING: &str = "objstash_model_missing";
/// Who holds each assembly (`files/owners.rs`): made by the first assembly with an owner.
pub(crate) const OWNERS: &str = "objstash_assembly_owners";

/// Where a model is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Objects are being saved or held for it; its root is not declared yet.
    Assembling = 0,
    /// Its root and every member are stored: the root can be read.
    Complete = 1,
    /// A member is not stored: the root is kept out of the object table.
    Incomplete = 2,
    /// Eviction took its root out and is taking its members.
    Evicting = 3,
}

impl State {
    fn of(value: i64) -> Option<State> {
        Some(match value {
            0 => State::Assembling,
            1 => State::Complete,
            2 => State::Incomplete,
            3 => State::Evicting,
            _ => return None,
        })
    }
}

/// A model as its row holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelRow {
    pub id: i64,
    /// The root's key; `None` while it is assembled.
    pub root: Option<Key>,
    pub state: State,
    /// Members stored, the root included while it is in the object table.
    pub runs: Runs,
    /// Members named, stored or not (the root included).
    pub objects: u64,
    /// Members named that are not stored (the root is not counted: an incomplete model
    /// keeps it).
    pub missing: u64,
    /// Stored bytes of the members stored.
    pub bytes: u64,
    /// Its last use (`uses.rs`'s clock), the latest of its members'.
    pub used: i64,
    pub pinned: bool,
    /// The name it was declared under, if any (a Speckle id, say).
    pub name: Option<Vec<u8>>,
}

/// The root's row, kept in its model's row while the model is incomplete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HiddenRoot {
    pub raw_len: i64,
    pub data: Vec<u8>,
    /// Its place in the file of values, when its value is there.
    pub place: Option<i64>,
}

/// Whether the stash has models (the tables exist).
pub(crate) fn exist(conn: &Connection) -> Result<bool> {
    format::has_table(conn, MODELS)
}

/// Makes the model tables, unless they exist, and raises the format; inside the writer's
/// transaction. The object tables' `model` column is the caller's (`Schema::migrate`).
pub(crate) fn ensure(conn: &Connection) -> Result<()> {
    if exist(conn)? {
        return Ok(());
    }
    conn.execute_batch(&format!(
        "CREATE TABLE {MODELS}(id INTEGER PRIMARY KEY AUTOINCREMENT, root BLOB, state INTEGER NOT NULL, \
         objects INTEGER NOT NULL DEFAULT 0, missing INTEGER NOT NULL DEFAULT 0, \
         bytes INTEGER NOT NULL DEFAULT 0, used INTEGER NOT NULL DEFAULT 0, \
         pinned INTEGER NOT NULL DEFAULT 0, runs BLOB NOT NULL DEFAULT x'00', name BLOB, \
         hidden_raw_len INTEGER, hidden_data BLOB, hidden_place INTEGER);\n\
         CREATE UNIQUE INDEX {MODELS}_root ON {MODELS}(root) WHERE root IS NOT NULL;\n\
         CREATE INDEX {MODELS}_used ON {MODELS}(used);\n\
         CREATE TABLE {MISSING}(key BLOB NOT NULL, model INTEGER NOT NULL, \
         PRIMARY KEY(key, model)) WITHOUT ROWID;\n\
         CREATE INDEX {MISSING}_model ON {MISSING}(model);\n"
    ))
    .context(|| "making the model tables".to_string())?;
    format::raise(conn, format::MODELS)
}

const COLUMNS: &str = "id, root, state, objects, missing, bytes, used, pinned, runs, name";

fn read_row(r: &rusqlite::Row) -> rusqlite::Result<Option<ModelRow>> {
    let root: Option<Vec<u8>> = r.get(1)?;
    let (Some(state), Some(runs)) = (State::of(r.get(2)?), Runs::decode(&r.get::<_, Vec<u8>>(8)?))
    else {
        return Ok(None);
    };
    Ok(Some(ModelRow {
        id: r.get(0)?,
        root: root.as_deref().and_then(Key::from_slice),
        state,
        runs,
        objects: r.get::<_, i64>(3)?.max(0) as u64,
        missing: r.get::<_, i64>(4)?.max(0) as u64,
        bytes: r.get::<_, i64>(5)?.max(0) as u64,
        used: r.get(6)?,
        pinned: r.get::<_, i64>(7)? != 0,
        name: r.get(9)?,
    }))
}

/// The model of id `id`.
pub(crate) fn by_id(conn: &Connection, id: i64) -> Result<Option<ModelRow>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM {MODELS} WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], read_row).optional())
        .map(Option::flatten)
        .context(|| format!("reading model {id}"))
}

/// The model whose root is `root`.
pub(crate) fn by_root(conn: &Connection, root: &Key) -> Result<Option<ModelRow>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM {MODELS} WHERE root = ?1"))
        .and_then(|mut stmt| stmt.query_row([&root.as_bytes()[..]], read_row).optional())
        .map(Option::flatten)
        .context(|| format!("reading the model of {root}"))
}

/// Whether a model is being evicted (a table that is not there holds none).
pub(crate) fn evicting(conn: &Connection) -> Result<bool> {
    if !exist(conn)? {
        return Ok(false);
    }
    conn.prepare_cached(&format!("SELECT 1 FROM {MODELS} WHERE state = ?1 LIMIT 1"))
        .and_then(|mut stmt| stmt.exists([State::Evicting as i64]))
        .context(|| "looking for a model being evicted".to_string())
}

/// Every model, least recently used first (a row that cannot be read is left out).
pub(crate) fn all(conn: &Connection) -> Result<Vec<ModelRow>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM {MODELS} ORDER BY used, id"))
        .context(|| "listing the models".to_string())?;
    let rows = stmt
        .query_map([], read_row)
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .context(|| "listing the models".to_string())?;
    Ok(rows.into_iter().flatten().collect())
}

/// A new model row in `state` (assembling, or declared with `root`); its id.
pub(crate) fn insert(
    conn: &Connection,
    root: Option<&Key>,
    state: State,
    used: i64,
) -> Result<i64> {
    conn.prepare_cached(&format!("INSERT INTO {MODELS}(root, state, used) VALUES (?1, ?2, ?3)"))
        .and_then(|mut stmt| {
            stmt.execute(params![root.map(|k| &k.as_bytes()[..]), state as i64, used])
        })
        .context(|| "recording a model".to_string())?;
    Ok(conn.last_insert_rowid())
}

/// Writes `model` back (all but its hidden root).
pub(crate) fn update(conn: &Connection, model: &ModelRow) -> Result<()> {
    conn.prepare_cached(&format!(
        "UPDATE {MODELS} SET root = ?2, state = ?3, objects = ?4, missing = ?5, bytes = ?6, \
         used = ?7, pinned = ?8, runs = ?9, name = ?10 WHERE id = ?1"
    ))
    .and_then(|mut stmt| {
        stmt.execute(params![
            model.id,
            model.root.as_ref().map(|k| &k.as_bytes()[..]),
            model.state as i64,
            model.objects as i64,
            model.missing as i64,
            model.bytes as i64,
            model.used,
            i64::from(model.pinned),
            model.runs.encode(),
            model.name,
        ])
    })
    .context(|| format!("writing model {}", model.id))?;
    Ok(())
}

/// Records a use of model `id` at `used`, unless a later one is recorded.
pub(crate) fn touch(conn: &Connection, id: i64, used: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(&format!("UPDATE {MODELS} SET used = ?2 WHERE id = ?1 AND used < ?2"))?
        .execute(params![id, used])?;
    Ok(())
}

/// Deletes model `id` and its list of missing members.
pub(crate) fn delete(conn: &Connection, id: i64) -> Result<()> {
    conn.prepare_cached(&format!("DELETE FROM {MISSING} WHERE model = ?1"))
        .and_then(|mut stmt| stmt.execute([id]))
        .and_then(|_| conn.prepare_cached(&format!("DELETE FROM {MODELS} WHERE id = ?1")))
        .and_then(|mut stmt| stmt.execute([id]))
        .context(|| format!("deleting model {id}"))?;
    Ok(())
}

/// Keeps the root's row in the model's row, while the model is incomplete.
pub(crate) fn hide_root(conn: &Connection, id: i64, root: &HiddenRoot) -> Result<()> {
    conn.prepare_cached(&format!(
        "UPDATE {MODELS} SET hidden_raw_len = ?2, hidden_data = ?3, hidden_place = ?4 \
         WHERE id = ?1"
    ))
    .and_then(|mut stmt| stmt.execute(params![id, root.raw_len, root.data, root.place]))
    .context(|| format!("keeping the root of model {id}"))?;
    Ok(())
}

/// The root's row a model keeps, if it keeps one; taken out of the model's row if `take`.
pub(crate) fn hidden_root(conn: &Connection, id: i64, take: bool) -> Result<Option<HiddenRoot>> {
    let hidden = conn
        .prepare_cached(&format!(
            "SELECT hidden_raw_len, hidden_data, hidden_place FROM {MODELS} \
             WHERE id = ?1 AND hidden_raw_len IS NOT NULL"
        ))
        .and_then(|mut stmt| {
            stmt.query_row([id], |r| {
                Ok(HiddenRoot { raw_len: r.get(0)?, data: r.get(1)?, place: r.get(2)? })
            })
            .optional()
        })
        .context(|| format!("reading the root of model {id}"))?;
    if take && hidden.is_some() {
        conn.prepare_cached(&format!(
            "UPDATE {MODELS} SET hidden_raw_len = NULL, hidden_data = NULL, \
             hidden_place = NULL WHERE id = ?1"
        ))
        .and_then(|mut stmt| stmt.execute([id]))
        .context(|| format!("taking the root of model {id} back"))?;
    }
    Ok(hidden)
}

/// Records `owner` as the holder of assembly `id`.
pub(crate) fn set_owner(conn: &Connection, id: i64, owner: &str) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {OWNERS}(model INTEGER PRIMARY KEY, owner TEXT NOT NULL)"
    ))
    .and_then(|()| {
        conn.prepare_cached(&format!(
            "INSERT OR REPLACE INTO {OWNERS}(model, owner) VALUES (?1, ?2)"
        ))?
        .execute(params![id, owner])
    })
    .context(|| format!("recording the owner of assembly {id}"))?;
    Ok(())
}

/// Forgets the owner of `id`, an assembly no more (declared or given up).
pub(crate) fn forget_owner(conn: &Connection, id: i64) -> Result<()> {
    if !format::has_table(conn, OWNERS)? {
        return Ok(());
    }
    conn.prepare_cached(&format!("DELETE FROM {OWNERS} WHERE model = ?1"))
        .and_then(|mut stmt| stmt.execute([id]))
        .context(|| format!("forgetting the owner of assembly {id}"))?;
    Ok(())
}

/// The assemblies under way that have an owner, with it.
pub(crate) fn owned_assemblies(conn: &Connection) -> Result<Vec<(i64, String)>> {
    if !format::has_table(conn, OWNERS)? {
        return Ok(Vec::new());
    }
    conn.prepare_cached(&format!(
        "SELECT o.model, o.owner FROM {OWNERS} o JOIN {MODELS} m ON m.id = o.model \
         WHERE m.state = {}",
        State::Assembling as i64
    ))
    .and_then(|mut stmt| stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
    .context(|| "reading the owners of assemblies".to_string())
}

/// Every root kept with its model (out of the object table while the model is
/// incomplete), with its row: a check counts it as stored, with its names and chunks.
pub(crate) fn hidden_roots(conn: &Connection) -> Result<Vec<(Key, HiddenRoot)>> {
    if !exist(conn)? {
        return Ok(Vec::new());
    }
    let rows: Vec<(Vec<u8>, HiddenRoot)> = conn
        .prepare_cached(&format!(
            "SELECT root, hidden_raw_len, hidden_data, hidden_place FROM {MODELS} \
             WHERE hidden_raw_len IS NOT NULL AND root IS NOT NULL"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([], |r| {
                let hidden = HiddenRoot { raw_len: r.get(1)?, data: r.get(2)?, place: r.get(3)? };
                Ok((r.get(0)?, hidden))
            })?
            .collect()
        })
        .context(|| "reading the roots models keep".to_string())?;
    Ok(rows.into_iter().filter_map(|(k, h)| Some((Key::from_slice(&k)?, h))).collect())
}

/// Records `key` as a member of model `id` that is not stored.
pub(crate) fn add_missing(conn: &Connection, id: i64, key: &Key) -> Result<bool> {
    let added = conn
        .prepare_cached(&format!("INSERT OR IGNORE INTO {MISSING}(key, model) VALUES (?1, ?2)"))
        .and_then(|mut stmt| stmt.execute(params![&key.as_bytes()[..], id]))
        .context(|| format!("recording a member of model {id} as missing"))?;
    Ok(added == 1)
}

/// The models that miss `key`; forgets that they do when `take`.
pub(crate) fn missing_in(conn: &Connection, key: &Key, take: bool) -> Result<Vec<i64>> {
    let ids = conn
        .prepare_cached(&format!("SELECT model FROM {MISSING} WHERE key = ?1"))
        .and_then(|mut stmt| {
            stmt.query_map([&key.as_bytes()[..]], |r| r.get(0))?.collect::<rusqlite::Result<_>>()
        })
        .context(|| format!("reading the models that miss {key}"))?;
    if take {
        conn.prepare_cached(&format!("DELETE FROM {MISSING} WHERE key = ?1"))
            .and_then(|mut stmt| stmt.execute([&key.as_bytes()[..]]))
            .context(|| format!("recording {key} as stored"))?;
    }
    Ok(ids)
}

/// The members of model `id` that are not stored.
pub(crate) fn missing_keys(conn: &Connection, id: i64) -> Result<Vec<Key>> {
    let keys: Vec<Vec<u8>> = conn
        .prepare_cached(&format!("SELECT key FROM {MISSING} WHERE model = ?1"))
        .and_then(|mut stmt| stmt.query_map([id], |r| r.get(0))?.collect())
        .context(|| format!("reading the missing members of model {id}"))?;
    Ok(keys.iter().filter_map(|k| Key::from_slice(k)).collect())
}

/// A model carried into a rebuilt stash (`check/salvage.rs`): what it lists, by key.
#[derive(Debug)]
pub(crate) struct Carried {
    pub root: Key,
    pub name: Option<Vec<u8>>,
    pub pinned: bool,
    pub used: i64,
    /// Every member it listed whose key is known (stored or not).
    pub members: Vec<Key>,
    /// Members whose rows were lost with their keys: missing for good.
    pub unknown: u64,
    /// The root's row it kept apart, if it did.
    pub hidden: Option<HiddenRoot>,
}

/// Declares `carried` in the stash on `conn` as the writer would (`writer/models.rs`),
/// inside one transaction: each model lists its stored members, misses the others, and
/// keeps its root out of the object table while it misses any. Returns the keys of the
/// roots kept apart (their names stay).
pub(crate) fn restore(conn: &Connection, schema: &Schema, carried: &[Carried]) -> Result<Vec<Key>> {
    let mut kept = Vec::new();
    if carried.is_empty() {
        return Ok(kept);
    }
    let tx = conn.unchecked_transaction().context(|| "starting to carry the models".into())?;
    ensure(&tx)?;
    schema.add_model_columns(&tx)?;
    for model in carried {
        let id = insert(&tx, Some(&model.root), State::Complete, model.used)?;
        let mut row = by_id(&tx, id)?.expect("inserted above");
        let mut seen = std::collections::HashSet::new();
        let mut root_at = None;
        for key in model.members.iter().chain(std::iter::once(&model.root)) {
            if !seen.insert(*key) {
                continue;
            }
            let table = schema.table(key);
            let found = stored_row(&tx, table, key)?;
            match found {
                Some((rowid, home, stored)) => {
                    if home.is_none() {
                        tx.execute(&table.models.tag, params![rowid, id])
                            .context(|| format!("carrying {key} into its model"))?;
                    }
                    row.runs.insert(schema.layout.table_of(key) as u16, rowid);
                    row.bytes += stored.max(0) as u64;
                    if *key == model.root {
                        root_at = Some(rowid);
                    }
                }
                None if *key == model.root && model.hidden.is_some() => {}
                None => {
                    add_missing(&tx, id, key)?;
                    row.missing += 1;
                }
            }
        }
        row.objects = seen.len() as u64 + model.unknown;
        row.missing += model.unknown;
        row.name = model.name.clone();
        row.pinned = model.pinned;
        if row.missing > 0 {
            row.state = State::Incomplete;
            let table = schema.table(&model.root);
            let hidden = match (root_at, &model.hidden) {
                (Some(rowid), _) => {
                    let sql = &table.models.by_rowid;
                    let hidden = tx
                        .query_row(sql, [rowid], |r| {
                            let read = sql.columns.read(r);
                            Ok(HiddenRoot {
                                raw_len: read.raw_len()?,
                                data: read.data()?.to_vec(),
                                place: read.packed_place()?,
                            })
                        })
                        .context(|| format!("reading the root {}", model.root))?;
                    tx.execute(&format!("DELETE FROM {} WHERE rowid = ?1", table.name), [rowid])
                        .and_then(|_| table.unindex(&tx, &model.root, rowid))
                        .context(|| format!("keeping the root {} apart", model.root))?;
                    row.runs.remove(schema.layout.table_of(&model.root) as u16, rowid);
                    Some(hidden)
                }
                (None, hidden) => hidden.clone(),
            };
            if let Some(hidden) = hidden {
                hide_root(&tx, id, &hidden)?;
                kept.push(model.root);
            }
        } else if let (None, Some(hidden)) = (root_at, &model.hidden) {
            // Every member kept and the root kept apart: it goes back.
            let table = schema.table(&model.root);
            let place = hidden.place.and_then(crate::db::row::Place::unpack);
            let how = crate::db::schema::Insert {
                place,
                model: Some(id),
                ..crate::db::schema::Insert::VALUE
            };
            if table
                .add(&tx, &model.root, hidden.raw_len, &hidden.data, crate::db::row::MEMBER, how)
                .context(|| format!("putting the root {} back", model.root))?
                == 1
            {
                row.runs.insert(schema.layout.table_of(&model.root) as u16, tx.last_insert_rowid());
            }
        }
        update(&tx, &row)?;
    }
    tx.commit().context(|| "committing the carried models".into())?;
    Ok(kept)
}

/// The rowid, home model and stored length of the row of `key` in `table`.
fn stored_row(
    conn: &Connection,
    table: &crate::db::table::TableSql,
    key: &Key,
) -> Result<Option<(i64, Option<i64>, i64)>> {
    let sql = &table.models.find;
    conn.prepare_cached(sql)
        .and_then(|mut stmt| {
            stmt.query_row([&key.as_bytes()[..]], |r| {
                let row = sql.columns.read(r);
                Ok((row.rowid()?, row.model()?, row.stored_len()?))
            })
            .optional()
        })
        .context(|| format!("looking {key} up"))
}

/// Every key some model misses (what the writer checks the rows it inserts against).
pub(crate) fn every_missing(conn: &Connection) -> Result<Vec<Key>> {
    let keys: Vec<Vec<u8>> = conn
        .prepare_cached(&format!("SELECT DISTINCT key FROM {MISSING}"))
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .context(|| "reading the missing members of models".to_string())?;
    Ok(keys.iter().filter_map(|k| Key::from_slice(k)).collect())
}

/// Whether `key` is the root of a model that must not be read (incomplete, or being
/// evicted), as `conn`'s snapshot says.
pub(crate) fn root_withheld(conn: &Connection, key: &Key) -> Result<bool> {
    conn.prepare_cached(&format!(
        "SELECT 1 FROM {MODELS} WHERE root = ?1 AND state IN ({}, {})",
        State::Incomplete as i64,
        State::Evicting as i64
    ))
    .and_then(|mut stmt| stmt.query_row([&key.as_bytes()[..]], |_| Ok(())).optional())
    .map(|found| found.is_some())
    .context(|| format!("looking {key} up among the models' roots"))
}

/// The roots that must not be read: of the models incomplete or being evicted.
pub(crate) fn withheld_roots(conn: &Connection) -> Result<Vec<Key>> {
    let keys: Vec<Vec<u8>> = conn
        .prepare_cached(&format!(
            "SELECT root FROM {MODELS} WHERE state IN ({}, {}) AND root IS NOT NULL",
            State::Incomplete as i64,
            State::Evicting as i64
        ))
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .context(|| "reading the roots of incomplete models".to_string())?;
    Ok(keys.iter().filter_map(|k| Key::from_slice(k)).collect())
}

/// Gives up the assemblies of writers that are gone (a process killed before it declared
/// its root): what each held goes back to being loose, or to another model that lists it.
/// Only a handle alone with the stash knows that no assembly is under way. Inside the
/// caller's transaction; how many it gave up.
pub(crate) fn reclaim(conn: &Connection, schema: &Schema, now: i64) -> Result<u64> {
    if !exist(conn)? {
        return Ok(0);
    }
    let all = all(conn)?;
    let mut given_up = 0;
    for model in all.iter().filter(|m| m.state == State::Assembling) {
        for (table, rowid) in model.runs.rows() {
            let sql = &schema.tables[usize::from(table)];
            let other = all
                .iter()
                .find(|m| {
                    m.id != model.id
                        && m.state != State::Assembling
                        && m.runs.contains(table, rowid)
                })
                .map(|m| m.id);
            let home: Option<i64> = conn
                .query_row(
                    &format!("SELECT model FROM {} WHERE rowid = ?1", sql.name),
                    [rowid],
                    |r| r.get(0),
                )
                .optional()
                .context(|| format!("reading row {rowid} of {}", sql.name))?
                .flatten();
            if home != Some(model.id) {
                continue;
            }
            let (statement, value) = match other {
                Some(other) => (&sql.models.rehome, other),
                None => (&sql.models.untag, now),
            };
            conn.execute(statement, params![rowid, value])
                .context(|| format!("letting row {rowid} of {} go", sql.name))?;
        }
        delete(conn, model.id)?;
        given_up += 1;
    }
    Ok(given_up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_row_reads_back_as_written_and_its_root_is_kept_apart() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE objstash_meta(name TEXT PRIMARY KEY, value ANY)").unwrap();
        ensure(&conn).unwrap();
        ensure(&conn).unwrap();
        let root = Key::of(b"root");
        let id = insert(&conn, Some(&root), State::Complete, 5).unwrap();
        let mut model = by_root(&conn, &root).unwrap().expect("recorded");
        assert_eq!((model.id, model.state, model.used), (id, State::Complete, 5));
        model.runs = (0..1000).map(|r| (0u16, r)).collect();
        model.objects = 1001;
        model.missing = 1;
        update(&conn, &model).unwrap();
        assert_eq!(by_id(&conn, id).unwrap(), Some(model.clone()));
        touch(&conn, id, 9).unwrap();
        model.used = 9;
        touch(&conn, id, 7).unwrap();
        assert_eq!(by_id(&conn, id).unwrap().map(|m| m.used), Some(9));
        let hidden = HiddenRoot { raw_len: 4, data: b"gzip".to_vec(), place: None };
        hide_root(&conn, id, &hidden).unwrap();
        assert!(withheld_roots(&conn).unwrap().is_empty(), "a complete model's root is read");
        model.state = State::Incomplete;
        update(&conn, &model).unwrap();
        assert_eq!(withheld_roots(&conn).unwrap(), vec![root]);
        assert_eq!(hidden_root(&conn, id, true).unwrap(), Some(hidden));
        assert_eq!(hidden_root(&conn, id, false).unwrap(), None);
        let member = Key::of(b"member");
        assert!(add_missing(&conn, id, &member).unwrap());
        assert!(!add_missing(&conn, id, &member).unwrap());
        assert_eq!(every_missing(&conn).unwrap(), vec![member]);
        assert_eq!(missing_in(&conn, &member, true).unwrap(), vec![id]);
        assert!(missing_in(&conn, &member, false).unwrap().is_empty());
        delete(&conn, id).unwrap();
        assert!(all(&conn).unwrap().is_empty());
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, format::MODELS);
    }
}
