//! A damaged header, told and mended from the pages below it.
//!
//! SQLite trusts the first 100 bytes of a file: with a wrong page size it reads every page
//! at the wrong place, and without the magic string it does not open the file at all. The
//! pages say their own size: a B-tree page packs its cells against its end, so only at the
//! true size do a page's cells (and the free blocks between them) end where the page ends.
//! From that, a header whose page size disagrees with its pages is found, a stash whose
//! header is gone is recognised by the schema on its first page, and salvage reads a copy
//! with a rebuilt header, so that the header's damage alone costs no object.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::db::meta::META;
use crate::error::{Error, Result};
use crate::files::sibling;

/// The first bytes of every SQLite file.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// The page sizes SQLite allows.
const SIZES: [usize; 8] = [512, 1024, 2048, 4096, 8192, 16_384, 32_768, 65_536];
/// Pages read per candidate size when the size is looked for: spread over the file.
const SAMPLE: u64 = 512;
/// B-tree page types: interior index, interior table, leaf index, leaf table.
const BTREE: [u8; 4] = [0x02, 0x05, 0x0a, 0x0d];

/// A copy of a damaged file with a header rebuilt from its pages, for salvage to read;
/// removed (with its journals) when dropped.
pub(crate) struct Mended {
    /// The copy.
    pub path: PathBuf,
    /// What was wrong with the original's header.
    pub problem: String,
}

impl Drop for Mended {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let _ = std::fs::remove_file(sibling(&self.path, suffix));
        }
    }
}

/// What is wrong with the header of the file at `path`, if its pages say it is wrong: the
/// magic string gone from a file whose first page holds a stash's schema, or a page size
/// other than its pages'. `None` for a sound header and for a file whose pages tell
/// nothing (SQLite's own checks then decide). Cheap for a sound file: the header and its
/// first page are read, and the pages are sampled only when that page does not fit.
pub(crate) fn damage(path: &Path) -> std::io::Result<Option<String>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len < 512 {
        return Ok(None);
    }
    let header = header_of(&file)?;
    if !header.starts_with(MAGIC) {
        return Ok(lost_header(&file, len)?.then(|| {
            "its header (the first 100 bytes) no longer says it is a SQLite file".to_string()
        }));
    }
    let claimed = claimed_page_size(&header);
    if let Some(size) = claimed {
        let mut page = vec![0u8; size];
        if read_at(&file, &mut page, 0).is_ok() && fits(&page, 100) {
            return Ok(None);
        }
    }
    Ok(match (page_size(&file, len)?, claimed) {
        (Some(found), Some(claimed)) if found != claimed => {
            Some(format!("its header gives pages of {claimed} bytes, its pages are {found} bytes"))
        }
        (Some(found), None) => {
            Some(format!("its header gives no valid page size, its pages are {found} bytes"))
        }
        _ => None,
    })
}

/// Copies the file at `path` beside it with a header rebuilt from its pages, when its
/// header is damaged (`damage`); with its write-ahead log folded in, so that the copy
/// holds every committed page. `None` when the header is sound.
///
/// # Errors
/// I/O errors reading the file or writing the copy (a full disk, say).
pub(crate) fn mend(path: &Path) -> Result<Option<Mended>> {
    let reading = |e| Error::io(format!("reading the header of {}", path.display()), e);
    let Some(problem) = damage(path).map_err(reading)? else { return Ok(None) };
    let file = File::open(path).map_err(reading)?;
    let len = file.metadata().map_err(reading)?.len();
    let Some(page_size) = page_size(&file, len).map_err(reading)? else { return Ok(None) };
    let copy = Mended { path: sibling(path, ".mended"), problem };
    let writing = |e| Error::io(format!("writing {}", copy.path.display()), e);
    for suffix in ["-wal", "-shm", "-journal"] {
        crate::files::remove_if_present(&sibling(&copy.path, suffix))?;
    }
    std::fs::copy(path, &copy.path).map_err(writing)?;
    let wal = sibling(path, "-wal");
    let has_wal = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
    let header = rebuilt(&header_of(&file).map_err(reading)?, page_size, len, has_wal);
    let mut out = std::fs::OpenOptions::new().write(true).open(&copy.path).map_err(writing)?;
    out.write_all(&header).and_then(|()| out.sync_all()).map_err(writing)?;
    drop(out);
    if has_wal {
        std::fs::copy(&wal, sibling(&copy.path, "-wal")).map_err(writing)?;
        // Committed pages still in the log go into the copy, where the page scan reads
        // them; a log that does not fit the rebuilt header is ignored by SQLite.
        if let Ok(conn) = rusqlite::Connection::open(&copy.path) {
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            let _ = conn.execute_batch("PRAGMA journal_mode = DELETE");
        }
    }
    log::warn!(
        "objstash: {} {}; reading it through a copy with a header rebuilt from its pages",
        path.display(),
        copy.problem
    );
    Ok(Some(copy))
}

/// The header SQLite needs to read a file of `len` bytes in pages of `page_size`, keeping
/// every field of `old` that is still valid.
fn rebuilt(old: &[u8; 100], page_size: usize, len: u64, wal: bool) -> [u8; 100] {
    let mut h = *old;
    let be32 = |h: &[u8; 100], at: usize| u32::from_be_bytes(h[at..at + 4].try_into().expect("4"));
    let pages = len.div_ceil(page_size as u64).min(u64::from(u32::MAX)) as u32;
    h[..16].copy_from_slice(MAGIC);
    let encoded = if page_size == 65_536 { 1 } else { page_size as u16 };
    h[16..18].copy_from_slice(&encoded.to_be_bytes());
    // Read and write versions: 2 where a write-ahead log is to be folded in.
    let version = if wal { 2 } else { 1 };
    h[18] = version;
    h[19] = version;
    // No reserved bytes (objstash never asks for any) and the fixed payload fractions.
    h[20] = 0;
    h[21..24].copy_from_slice(&[64, 32, 32]);
    h[28..32].copy_from_slice(&pages.to_be_bytes());
    // The size above is valid for this change counter.
    let counter = be32(&h, 24);
    h[92..96].copy_from_slice(&counter.to_be_bytes());
    if be32(&h, 32) > pages {
        // A free list that starts past the end: the copy is read, never written.
        h[32..40].fill(0);
    }
    if !(1..=4).contains(&be32(&h, 44)) {
        h[44..48].copy_from_slice(&4u32.to_be_bytes());
    }
    if be32(&h, 52) > pages {
        h[52..56].fill(0);
    }
    if be32(&h, 52) == 0 {
        h[64..68].fill(0);
    }
    if !(1..=3).contains(&be32(&h, 56)) {
        h[56..60].copy_from_slice(&1u32.to_be_bytes());
    }
    h[72..92].fill(0);
    h
}

/// Whether the pages of a file without its magic string are a stash's.
fn lost_header(file: &File, len: u64) -> std::io::Result<bool> {
    let Some(page_size) = page_size(file, len)? else { return Ok(false) };
    let mut page = vec![0u8; page_size];
    read_at(file, &mut page, 0)?;
    Ok(schema_names_meta(file, &page, page_size, 0))
}

/// Whether the schema B-tree below `page` (page 1 of the file, or a page under it) has a
/// row for the stash's meta table.
fn schema_names_meta(file: &File, page: &[u8], page_size: usize, depth: u32) -> bool {
    let start = if depth == 0 { 100 } else { 0 };
    if depth > 4 || !fits(page, start) {
        return false;
    }
    let cells = cell_offsets(page, start);
    match page[start] {
        0x0d => cells.into_iter().any(|at| {
            let record = leaf_record(page, at, page_size);
            record.is_some_and(|fields| {
                fields.len() >= 2 && fields[0] == b"table" && fields[1] == META.as_bytes()
            })
        }),
        0x05 => {
            let right = be32_at(page, start + 8);
            let children = cells.into_iter().filter_map(|at| page.get(at..at + 4).map(be32));
            let mut child = vec![0u8; page_size];
            children.chain(right).any(|number| {
                number > 0
                    && read_at(file, &mut child, u64::from(number - 1) * page_size as u64).is_ok()
                    && schema_names_meta(file, &child.clone(), page_size, depth + 1)
            })
        }
        _ => false,
    }
}

/// The text and blob fields of the table leaf cell at `at`, held whole on its page.
fn leaf_record(page: &[u8], at: usize, usable: usize) -> Option<Vec<&[u8]>> {
    let (total, n) = varint(page.get(at..)?)?;
    let (_rowid, m) = varint(page.get(at + n..)?)?;
    let total = usize::try_from(total).ok()?;
    if total > usable - 35 {
        return None;
    }
    let payload = page.get(at + n + m..at + n + m + total)?;
    let (header_len, mut pos) = varint(payload)?;
    let header_len = usize::try_from(header_len).ok()?;
    let mut body = header_len;
    let mut fields = Vec::new();
    while pos < header_len {
        let (serial, k) = varint(payload.get(pos..)?)?;
        pos += k;
        let width = match serial {
            0 | 8 | 9 => 0,
            1..=4 => serial as usize,
            5 => 6,
            6 | 7 => 8,
            n if n >= 12 => usize::try_from((n - 12) / 2).ok()?,
            _ => return None,
        };
        let bytes = payload.get(body..body + width)?;
        fields.push(if serial >= 12 { bytes } else { &[][..] });
        body += width;
    }
    Some(fields)
}

/// The page size the pages of the file agree on: the size at which the most sampled pages
/// fit, when it is a clear choice (at least two fit and no other size comes close).
fn page_size(file: &File, len: u64) -> std::io::Result<Option<usize>> {
    let mut scores = Vec::with_capacity(SIZES.len());
    for size in SIZES {
        let pages = len / size as u64;
        if pages == 0 {
            continue;
        }
        let mut page = vec![0u8; size];
        let step = (pages / SAMPLE).max(1);
        let mut fitting = 0u64;
        for number in (0..pages).step_by(step as usize) {
            if read_at(file, &mut page, number * size as u64).is_ok()
                && fits(&page, if number == 0 { 100 } else { 0 })
            {
                fitting += 1;
            }
        }
        scores.push((fitting, size));
    }
    scores.sort_unstable_by(|a, b| b.cmp(a));
    Ok(match scores[..] {
        [(best, size), (second, _), ..] if best >= 2 && best >= 4 * second => Some(size),
        [(best, size)] if best >= 2 => Some(size),
        _ => None,
    })
}

/// Whether `page` is a B-tree page (its header at `start`) whose cells and free blocks lie
/// within it and reach its end: true of every B-tree page at its true size, and of none
/// read at another (at half the size its cells lie past the end, at twice it they stop
/// half-way).
fn fits(page: &[u8], start: usize) -> bool {
    let usable = page.len();
    let Some(&kind) = page.get(start) else { return false };
    if !BTREE.contains(&kind) {
        return false;
    }
    let header = if kind == 0x02 || kind == 0x05 { 12 } else { 8 };
    let Some(cells) = page.get(start + 3..start + 5).map(|b| usize::from(be16(b))) else {
        return false;
    };
    let content = match be16(&page[start + 5..start + 7]) {
        0 => 65_536,
        n => usize::from(n),
    };
    let fragments = usize::from(page[start + 7]);
    let cell_area = start + header + 2 * cells;
    if content < cell_area || content > usable {
        return false;
    }
    let mut end = content;
    for at in cell_offsets(page, start) {
        match cell_size(page, at, kind, usable) {
            Some(size) if at >= content && at + size <= usable => end = end.max(at + size),
            _ => return false,
        }
    }
    let mut free = usize::from(be16(&page[start + 1..start + 3]));
    let mut hops = 0;
    while free != 0 {
        hops += 1;
        if hops > usable / 4 || free < content || free + 4 > usable {
            return false;
        }
        let size = usize::from(be16(&page[free + 2..free + 4]));
        if size < 4 || free + size > usable {
            return false;
        }
        end = end.max(free + size);
        let next = usize::from(be16(&page[free..free + 2]));
        if next != 0 && next <= free {
            return false;
        }
        free = next;
    }
    usable - end <= fragments
}

/// Offsets of the cells of the B-tree page whose header is at `start`.
fn cell_offsets(page: &[u8], start: usize) -> Vec<usize> {
    let header = if page[start] == 0x02 || page[start] == 0x05 { 12 } else { 8 };
    let cells = usize::from(be16(&page[start + 3..start + 5]));
    (0..cells)
        .map_while(|i| page.get(start + header + 2 * i..start + header + 2 * i + 2))
        .map(|b| usize::from(be16(b)))
        .collect()
}

/// Bytes of the cell at `at` of a page of type `kind` (file format 1.6), on its page.
fn cell_size(page: &[u8], at: usize, kind: u8, usable: usize) -> Option<usize> {
    let cell = page.get(at..)?;
    let (child, cell) = if kind == 0x02 || kind == 0x05 { (4, cell.get(4..)?) } else { (0, cell) };
    if kind == 0x05 {
        return Some(4 + varint(cell)?.1);
    }
    let (total, n) = varint(cell)?;
    let rowid = if kind == 0x0d { varint(cell.get(n..)?)?.1 } else { 0 };
    let total = usize::try_from(total).ok()?;
    let (max_local, min_local) = if kind == 0x0d {
        (usable - 35, (usable - 12) * 32 / 255 - 23)
    } else {
        ((usable - 12) * 64 / 255 - 23, (usable - 12) * 32 / 255 - 23)
    };
    let local = if total <= max_local {
        total
    } else {
        let k = min_local + (total - min_local) % (usable - 4);
        if k <= max_local { k } else { min_local }
    };
    let overflow = if local < total { 4 } else { 0 };
    Some((child + n + rowid + local + overflow).max(4))
}

/// The page size the header states, if it is one SQLite allows.
fn claimed_page_size(header: &[u8; 100]) -> Option<usize> {
    match be16(&header[16..18]) {
        1 => Some(65_536),
        n if n >= 512 && n.is_power_of_two() => Some(usize::from(n)),
        _ => None,
    }
}

fn header_of(file: &File) -> std::io::Result<[u8; 100]> {
    let mut header = [0u8; 100];
    read_at(file, &mut header, 0)?;
    Ok(header)
}

fn read_at(mut file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"))
}

fn be32_at(page: &[u8], at: usize) -> Option<u32> {
    page.get(at..at + 4).map(be32)
}

/// A SQLite varint: up to 9 bytes, big-endian, 7 bits a byte (8 in the ninth).
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(9).enumerate() {
        if i == 8 {
            return Some((value << 8 | u64::from(b), 9));
        }
        value = value << 7 | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    use rusqlite::{Connection, params};

    /// A SQLite file of `page_size` pages with a meta table named like the stash's and a
    /// few thousand rows (leaves, interior pages, overflow pages, deleted rows).
    fn fixture(dir: &Path, page_size: usize) -> PathBuf {
        let path = dir.join(format!("f{page_size}.db"));
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size = {page_size}; PRAGMA auto_vacuum = INCREMENTAL;
             CREATE TABLE {META}(name TEXT PRIMARY KEY, value ANY) WITHOUT ROWID;
             CREATE TABLE objects(rowid INTEGER PRIMARY KEY, key BLOB NOT NULL, data BLOB);
             CREATE INDEX objects_key ON objects(key);"
        ))
        .unwrap();
        for i in 0..3_000u32 {
            let len = [30, 200, 900, 5_000][i as usize % 4];
            let data: Vec<u8> = (0..len).map(|j| (i * 7 + j * 13) as u8).collect();
            conn.execute(
                "INSERT INTO objects(key, data) VALUES (?1, ?2)",
                params![&blake3::hash(&data).as_bytes()[..], data],
            )
            .unwrap();
        }
        conn.execute("DELETE FROM objects WHERE rowid % 7 = 0", []).unwrap();
        path
    }

    #[test]
    fn the_pages_give_their_size_whatever_the_header_says() {
        let dir = tempfile::tempdir().unwrap();
        for size in [1024, 4096, 8192, 65_536] {
            let path = fixture(dir.path(), size);
            let file = File::open(&path).unwrap();
            let len = file.metadata().unwrap().len();
            assert_eq!(page_size(&file, len).unwrap(), Some(size), "{size}");
            assert_eq!(damage(&path).unwrap(), None, "a sound header is sound");
            // Every other page size written into the header is found out.
            let bytes = std::fs::read(&path).unwrap();
            for other in [1u16, 512, 4096, 16_384] {
                if usize::from(other) == size || (other == 1 && size == 65_536) {
                    continue;
                }
                let mut damaged = bytes.clone();
                damaged[16..18].copy_from_slice(&other.to_be_bytes());
                std::fs::write(&path, &damaged).unwrap();
                let problem = damage(&path).unwrap().expect("a wrong page size is damage");
                assert!(problem.contains(&format!("its pages are {size} bytes")), "{problem}");
            }
            std::fs::write(&path, &bytes).unwrap();
        }
    }

    #[test]
    fn a_headless_stash_is_recognised_and_mended_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = fixture(dir.path(), 8192);
        let every_row = "SELECT count(*), sum(length(data)), sum(length(key)) FROM objects";
        let counts = |conn: &Connection| -> (i64, i64, i64) {
            conn.query_row(every_row, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap()
        };
        let expected = counts(&Connection::open(&path).unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..100].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        assert!(damage(&path).unwrap().is_some_and(|p| p.contains("first 100 bytes")));
        let mended = mend(&path).unwrap().expect("a header to mend");
        let conn = Connection::open(&mended.path).unwrap();
        // Every row, read through the table and through the index. (The pointer-map pages
        // of auto-vacuum are not in the rebuilt header: the copy is read, never written.)
        assert_eq!(counts(&conn), expected);
        let indexed: i64 = conn
            .query_row(
                "SELECT count(*) FROM objects INDEXED BY objects_key WHERE key > x''",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexed, expected.0);
        drop(conn);
        let copy = mended.path.clone();
        drop(mended);
        assert!(!copy.exists(), "the copy goes with its value");
        // A file of another application, its header gone, is not taken for a stash.
        let other = dir.path().join("other.db");
        let conn = Connection::open(&other).unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(50000));").unwrap();
        drop(conn);
        let mut bytes = std::fs::read(&other).unwrap();
        bytes[..100].fill(0);
        std::fs::write(&other, &bytes).unwrap();
        assert_eq!(damage(&other).unwrap(), None);
        // Nor is a file of text.
        std::fs::write(&other, "hello\n".repeat(2_000)).unwrap();
        assert_eq!(damage(&other).unwrap(), None);
    }
}
