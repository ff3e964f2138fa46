//! The chunks of large objects: how objects are cut, the chunk table, and its reference
//! counts.
//!
//! An object of more than [`CHUNKED_ABOVE`] bytes is cut by content-defined chunking
//! (FastCDC, 2020 variant: [`MIN_CHUNK`], [`AVG_CHUNK`], [`MAX_CHUNK`]), so that an edit
//! moves only the boundaries near it and two versions of a file share every chunk away
//! from their differences. Each chunk is stored once, under the blake3 hash of its bytes,
//! in `objstash_chunks`, gzipped when that pays and as it is when it does not
//! (already-compressed data); the object is a manifest row in its object table
//! (`manifest.rs`). The table is created, and the format raised to 4 (`format.rs`), by
//! the first chunked save, so a stash without large objects stays readable by versions
//! that do not know chunks.
//!
//! **References.** `refs` counts the manifests that list a chunk (once per listing);
//! `pending` counts the saves under way that sent it and have not committed their manifest.
//! A chunk goes when both are 0: when the last object that lists it is removed or evicted,
//! or when a save that sent it fails. `pending` is what keeps a chunk that a save under
//! way relies on from going with another object that shared it, in any process. A
//! process killed during a save leaves its chunks pending; nobody else can tell that save
//! from one still running, so they are reclaimed by the next open that is alone with the
//! stash ([`reclaim`]), which is also when the file is recovered (`open/sequence.rs`), and counted
//! by `verify` meanwhile.
//!
//! Column order puts `form` before `data`, so the page scanner of salvage
//! (`pagescan.rs`), which reads `(key, raw_len, data)` records, never takes a chunk for
//! an object.

use std::borrow::Cow;

use rusqlite::{Connection, OptionalExtension, params};

use crate::codec;
use crate::db::format;
use crate::db::meta::Delta;
use crate::error::{DbContext, Error, Result};
use crate::key::Key;
use crate::large::manifest::{ChunkRef, Manifest};

/// The chunk table.
pub(crate) const TABLE: &str = "objstash_chunks";
/// Objects larger than this are chunked; smaller ones are one row.
pub(crate) const CHUNKED_ABOVE: usize = 8 << 20;
/// The smallest chunk FastCDC cuts (but the last).
pub(crate) const MIN_CHUNK: usize = 64 << 10;
/// The chunk size FastCDC aims at.
pub(crate) const AVG_CHUNK: usize = 256 << 10;
/// The largest chunk.
pub(crate) const MAX_CHUNK: usize = 1 << 20;
/// Bytes of a chunk compressed to see whether compressing it pays.
const PROBE: usize = 32 << 10;

/// How a chunk's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// As they are.
    Raw = 0,
    /// A gzip member.
    Gzip = 1,
}

/// A chunk ready for the writer.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub key: Key,
    pub raw_len: u32,
    pub form: Form,
    pub data: Vec<u8>,
}

/// Encodes a chunk: gzipped at `level` when that saves at least a tenth, judged on its
/// first [`PROBE`] bytes, else as it is.
pub(crate) fn encode(key: Key, raw: Vec<u8>, level: u32) -> Encoded {
    let raw_len = raw.len() as u32;
    let probe = &raw[..raw.len().min(PROBE)];
    if codec::compress(probe, level.min(1)).len() * 10 < probe.len() * 9 {
        let data = codec::compress(&raw, level);
        if data.len() < raw.len() {
            return Encoded { key, raw_len, form: Form::Gzip, data };
        }
    }
    Encoded { key, raw_len, form: Form::Raw, data: raw }
}

/// Creates the chunk table if it is missing and raises the format; inside the caller's
/// transaction.
pub(crate) fn create(conn: &Connection) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE}(rowid INTEGER PRIMARY KEY, key BLOB NOT NULL, \
         raw_len INTEGER NOT NULL, form INTEGER NOT NULL, data BLOB NOT NULL, \
         refs INTEGER NOT NULL DEFAULT 0, pending INTEGER NOT NULL DEFAULT 0);\n\
         CREATE UNIQUE INDEX IF NOT EXISTS {TABLE}_key ON {TABLE}(key);"
    ))
    .context(|| "creating the chunk table".to_string())?;
    format::raise(conn, format::CHUNKS)
}

/// Whether the stash has a chunk table.
pub(crate) fn table_exists(conn: &Connection) -> Result<bool> {
    format::has_table(conn, TABLE)
}

/// Why a chunk could not be read.
#[derive(Debug)]
pub(crate) enum ChunkError {
    /// It is not stored.
    Missing,
    /// It is stored but damaged.
    Damaged(String),
    /// The read failed.
    Read(Error),
}

/// Reads a chunk and checks it against its key and recorded length.
pub(crate) fn read(conn: &Connection, chunk: &ChunkRef) -> Result<Vec<u8>, ChunkError> {
    let checked = with_row(conn, chunk, |raw_len, form, data| {
        check(chunk, raw_len, form, data).map(Cow::into_owned)
    })
    .context(|| format!("reading chunk {}", chunk.key))
    .map_err(ChunkError::Read)?;
    match checked {
        None => Err(ChunkError::Missing),
        Some(checked) => checked.map_err(ChunkError::Damaged),
    }
}

/// A chunk as a gzip member, for a remote pack: its stored member when it is gzipped,
/// else its bytes in stored deflate blocks; checked first. `Err` says why it cannot be.
#[cfg(feature = "remote")]
pub(crate) fn read_member(conn: &Connection, chunk: &ChunkRef) -> Result<Vec<u8>, String> {
    let member = with_row(conn, chunk, |raw_len, form, data| {
        let raw = check(chunk, raw_len, form, data)?;
        Ok(if form == Form::Gzip as i64 { data.to_vec() } else { codec::compress(&raw, 0) })
    })
    .map_err(|e| format!("reading chunk {}: {e}", chunk.key))?;
    member.ok_or_else(|| format!("its chunk {} is missing", chunk.key))?
}

/// Runs `f` on the stored row of `chunk` (its recorded length, form and bytes, borrowed
/// from SQLite); `None` if it is not stored.
fn with_row<T>(
    conn: &Connection,
    chunk: &ChunkRef,
    f: impl FnOnce(i64, i64, &[u8]) -> T,
) -> rusqlite::Result<Option<T>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT raw_len, form, data FROM {TABLE} WHERE key = ?1"))?;
    stmt.query_row([&chunk.key.as_bytes()[..]], |r| {
        Ok(f(r.get(0)?, r.get(1)?, r.get_ref(2)?.as_blob()?))
    })
    .optional()
}

/// Decodes a stored chunk and checks its bytes against the manifest's entry: the stored
/// bytes themselves for a raw chunk, else the inflated ones.
pub(crate) fn check<'a>(
    chunk: &ChunkRef,
    raw_len: i64,
    form: i64,
    data: &'a [u8],
) -> Result<Cow<'a, [u8]>, String> {
    if raw_len != i64::from(chunk.len) {
        return Err(format!("chunk {} records {raw_len} bytes, not {}", chunk.key, chunk.len));
    }
    let raw = match form {
        0 => Cow::Borrowed(data),
        1 => Cow::Owned(codec::decompress(data, u64::from(chunk.len))?),
        other => return Err(format!("chunk {} has unknown form {other}", chunk.key)),
    };
    if raw.len() != chunk.len as usize || Key::of(&raw) != chunk.key {
        return Err(format!("chunk {} holds other bytes", chunk.key));
    }
    Ok(raw)
}

/// Stores a chunk for a save under way (or counts one more save on it if stored); whether
/// it was new. The stored bytes are added to `totals`.
pub(crate) fn put(
    conn: &Connection,
    chunk: &Encoded,
    totals: &mut Delta,
) -> rusqlite::Result<bool> {
    let added = conn
        .prepare_cached(&format!(
            "INSERT OR IGNORE INTO {TABLE}(key, raw_len, form, data, refs, pending) \
             VALUES (?1, ?2, ?3, ?4, 0, 1)"
        ))?
        .execute(params![
            &chunk.key.as_bytes()[..],
            chunk.raw_len,
            chunk.form as i64,
            &chunk.data[..]
        ])?;
    if added == 1 {
        totals.chunks += 1;
        totals.chunk_bytes += chunk.data.len() as i64;
        return Ok(true);
    }
    hold(conn, &chunk.key)?;
    Ok(false)
}

/// Whether a chunk is stored (on a connection that has the chunk table).
pub(crate) fn stored(conn: &Connection, key: &Key) -> Result<bool> {
    conn.prepare_cached(&format!("SELECT 1 FROM {TABLE} WHERE key = ?1"))
        .and_then(|mut stmt| stmt.exists([&key.as_bytes()[..]]))
        .context(|| format!("looking chunk {key} up"))
}

/// Counts one more save under way on a stored chunk; whether it is stored.
pub(crate) fn hold(conn: &Connection, key: &Key) -> rusqlite::Result<bool> {
    let held = conn
        .prepare_cached(&format!("UPDATE {TABLE} SET pending = pending + 1 WHERE key = ?1"))?
        .execute([&key.as_bytes()[..]])?;
    Ok(held == 1)
}

/// A save committed its manifest: each chunk it lists is referenced once more and held by
/// one save fewer. Whether every chunk was there.
pub(crate) fn commit(conn: &Connection, manifest: &Manifest) -> rusqlite::Result<bool> {
    let mut stmt = conn.prepare_cached(&format!(
        "UPDATE {TABLE} SET refs = refs + 1, pending = max(pending - 1, 0) WHERE key = ?1"
    ))?;
    let mut all = true;
    for chunk in &manifest.chunks {
        all &= stmt.execute([&chunk.key.as_bytes()[..]])? == 1;
    }
    Ok(all)
}

/// A save under way ended without its manifest (it failed, or its object was stored
/// already): its chunks are held by one save fewer, and those nothing holds go.
pub(crate) fn unhold(conn: &Connection, keys: &[Key], totals: &mut Delta) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(&format!(
        "UPDATE {TABLE} SET pending = max(pending - 1, 0) WHERE key = ?1 \
         RETURNING refs, pending"
    ))?;
    for key in keys {
        let left: Option<(i64, i64)> =
            stmt.query_row([&key.as_bytes()[..]], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
        if left == Some((0, 0)) {
            delete(conn, key, totals)?;
        }
    }
    Ok(())
}

/// An object's manifest row was deleted (removed or evicted): each chunk it lists is
/// referenced once fewer, and those nothing references or holds go. The stored bytes
/// freed.
pub(crate) fn release(
    conn: &Connection,
    manifest: &Manifest,
    totals: &mut Delta,
) -> rusqlite::Result<u64> {
    let mut stmt = conn.prepare_cached(&format!(
        "UPDATE {TABLE} SET refs = max(refs - 1, 0) WHERE key = ?1 RETURNING refs, pending"
    ))?;
    let mut freed = 0;
    for chunk in &manifest.chunks {
        let left: Option<(i64, i64)> = stmt
            .query_row([&chunk.key.as_bytes()[..]], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if left == Some((0, 0)) {
            freed += delete(conn, &chunk.key, totals)?;
        }
    }
    Ok(freed)
}

/// [`release`] of a deleted row's stored manifest. A manifest too damaged to list its
/// chunks leaves them referenced (`verify` reports them), which is logged.
pub(crate) fn release_stored(
    conn: &Connection,
    key: &Key,
    raw_len: i64,
    stored: &[u8],
    totals: &mut Delta,
) -> rusqlite::Result<u64> {
    match Manifest::decode(stored, raw_len) {
        Ok(manifest) => release(conn, &manifest, totals),
        Err(reason) => {
            log::warn!("objstash: the chunks of {key} stay stored: {reason}");
            Ok(0)
        }
    }
}

fn delete(conn: &Connection, key: &Key, totals: &mut Delta) -> rusqlite::Result<u64> {
    let stored: Option<i64> = conn
        .prepare_cached(&format!("DELETE FROM {TABLE} WHERE key = ?1 RETURNING length(data)"))?
        .query_row([&key.as_bytes()[..]], |r| r.get(0))
        .optional()?;
    if let Some(bytes) = stored {
        totals.chunks -= 1;
        totals.chunk_bytes -= bytes;
    }
    Ok(stored.unwrap_or(0) as u64)
}

/// What [`reclaim`] gave back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reclaimed {
    pub chunks: u64,
    pub bytes: u64,
}

/// Gives back the chunks of saves that were killed before their manifest: run only by a
/// handle alone with the stash, when no save can be under way. Inside the caller's
/// transaction; the totals are updated.
pub(crate) fn reclaim(conn: &Connection) -> Result<Reclaimed> {
    if !table_exists(conn)? {
        return Ok(Reclaimed::default());
    }
    let (chunks, bytes): (i64, i64) = conn
        .query_row(
            &format!("SELECT count(*), coalesce(sum(length(data)), 0) FROM {TABLE} WHERE refs = 0"),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .context(|| "counting the chunks of unfinished saves".to_string())?;
    conn.execute_batch(&format!(
        "UPDATE {TABLE} SET pending = 0 WHERE pending <> 0;\n\
         DELETE FROM {TABLE} WHERE refs = 0;"
    ))
    .context(|| "reclaiming the chunks of unfinished saves".to_string())?;
    let totals = Delta { chunks: -chunks, chunk_bytes: -bytes, ..Delta::default() };
    crate::db::meta::add_totals(conn, &totals)?;
    Ok(Reclaimed { chunks: chunks as u64, bytes: bytes as u64 })
}

/// Sets every chunk's references to the number of times the manifests of `schema`'s
/// tables list it, and deletes the chunks none lists (a salvage or repair: no save is under
/// way). Inside the caller's transaction, if any.
pub(crate) fn recount_refs(conn: &Connection, schema: &crate::db::schema::Schema) -> Result<()> {
    conn.execute_batch(&format!("UPDATE {TABLE} SET refs = 0, pending = 0"))
        .context(|| "recounting the chunks' references".to_string())?;
    let mut bump = conn
        .prepare(&format!("UPDATE {TABLE} SET refs = refs + 1 WHERE key = ?1"))
        .context(|| "recounting the chunks' references".to_string())?;
    for table in &schema.tables {
        let mut stmt = conn
            .prepare(&table.manifests)
            .context(|| format!("reading the manifests of {}", table.name))?;
        let mut rows = stmt.query([]).context(|| table.name.clone())?;
        while let Some(row) = rows.next().context(|| table.name.clone())? {
            let row = table.manifests.columns.read(row);
            let raw_len = row.raw_len().context(|| table.name.clone())?;
            let data = row.data().context(|| table.name.clone())?;
            let Ok(manifest) = Manifest::decode(data, raw_len) else { continue };
            for chunk in &manifest.chunks {
                bump.execute([&chunk.key.as_bytes()[..]])
                    .context(|| "recounting the chunks' references".to_string())?;
            }
        }
    }
    // A root that an incomplete model keeps aside lists its chunks too.
    for (_, hidden) in crate::db::models::hidden_roots(conn)? {
        let Ok(manifest) = Manifest::decode(&hidden.data, hidden.raw_len) else { continue };
        for chunk in &manifest.chunks {
            bump.execute([&chunk.key.as_bytes()[..]])
                .context(|| "recounting the chunks' references".to_string())?;
        }
    }
    conn.execute_batch(&format!("DELETE FROM {TABLE} WHERE refs = 0"))
        .context(|| "dropping chunks no object lists".to_string())
}

/// Counts of the chunk table, for `stats` and `verify`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub chunks: u64,
    pub stored_bytes: u64,
    /// Chunks of saves under way, or of saves killed before their manifest.
    pub pending: u64,
}

/// Counts the chunk table (zero without one).
pub(crate) fn counts(conn: &Connection) -> Result<Counts> {
    if !table_exists(conn)? {
        return Ok(Counts::default());
    }
    conn.query_row(
        &format!(
            "SELECT count(*), coalesce(sum(length(data)), 0), \
             coalesce(sum(refs = 0), 0) FROM {TABLE}"
        ),
        [],
        |r| {
            Ok(Counts {
                chunks: r.get::<_, i64>(0)? as u64,
                stored_bytes: r.get::<_, i64>(1)? as u64,
                pending: r.get::<_, i64>(2)? as u64,
            })
        },
    )
    .context(|| "counting the chunks".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sql_magic_is_the_manifests() {
        let hex: String =
            crate::large::manifest::MAGIC.iter().map(|b| format!("{b:02x}")).collect();
        let values = crate::settings::values::Values::InRows;
        for column in [crate::db::row::Column::Manifest, crate::db::row::Column::IsManifest] {
            assert!(column.sql(values).contains(&format!("x'{hex}'")), "{column:?}");
        }
    }

    #[test]
    fn compressible_chunks_are_gzipped_and_random_ones_stored_as_they_are() {
        let text: Vec<u8> = b"{\"speckle_type\":\"Point\"} ".repeat(20_000);
        let encoded = encode(Key::of(&text), text.clone(), 6);
        assert_eq!(encoded.form, Form::Gzip);
        assert!(encoded.data.len() < text.len() / 4);
        let chunk = ChunkRef { key: Key::of(&text), len: text.len() as u32 };
        assert_eq!(*check(&chunk, chunk.len.into(), 1, &encoded.data).unwrap(), text[..]);

        let mut random = vec![0u8; 300_000];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for byte in &mut random {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        let encoded = encode(Key::of(&random), random.clone(), 6);
        assert_eq!(encoded.form, Form::Raw);
        assert_eq!(encoded.data, random);
    }

    #[test]
    fn a_chunk_that_is_not_its_entry_is_damaged() {
        let chunk = ChunkRef { key: Key::of(b"abc"), len: 3 };
        assert!(check(&chunk, 3, 0, b"abc").is_ok());
        assert!(check(&chunk, 3, 0, b"abd").is_err());
        assert!(check(&chunk, 4, 0, b"abc").is_err());
        assert!(check(&chunk, 3, 7, b"abc").is_err());
    }
}
