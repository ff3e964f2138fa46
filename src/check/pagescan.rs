//! The last resort of salvage: read a damaged database file page by page, without SQLite,
//! and pull every object row out of every table leaf page that still holds one.
//!
//! SQLite reaches a row only through the B-tree above it, so a torn interior page hides
//! every row below it even when those leaf pages are intact. This scanner needs no tree:
//! it parses each page that looks like a table leaf (SQLite file format, section 1.6) and
//! decodes its cells as `(rowid, key, raw_len, data)` records. What it finds is only
//! trusted after the caller decompresses it and checks its hash, so a page of garbage can
//! at worst cost time. Deleted rows are not resurrected: the writer runs with
//! `secure_delete = FAST`, which zeroes deleted cells on the pages that keep them, and the
//! pages a delete frees whole are on the file's freelist, which the scan skips (where the
//! freelist reads as consistent; else every page is read). `verify` and salvage also read the
//! entries of the key indexes' pages, which point at rows whose own cells are unreadable
//! or out of the table's reach.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::db::row::{self, Column, Place};
use crate::key::Key;
use crate::settings::values::Values;

const LEAF_TABLE: u8 = 0x0d;
const LEAF_INDEX: u8 = 0x0a;
const INTERIOR_INDEX: u8 = 0x02;

/// An object row found on a page: key, recorded raw length, stored bytes, and where they
/// are in the file of values if they are there.
pub(crate) type FoundRow = (Key, i64, Vec<u8>, Option<Place>);

/// Calls `found` with the rowid and the row of every object row on every table leaf page
/// of the file at `path`, a stash whose values are where `values` says.
pub(crate) fn scan(
    path: &Path,
    values: Values,
    mut found: impl FnMut(i64, FoundRow),
) -> std::io::Result<()> {
    let file = File::open(path)?;
    let Some((page_size, usable)) = geometry(&file)? else { return Ok(()) };
    let pages = file.metadata()?.len() / page_size as u64;
    let free = freelist(&file, page_size, pages);
    let mut page = vec![0u8; page_size];
    for number in 1..=pages {
        if free.contains(&number)
            || read_at(&file, &mut page, (number - 1) * page_size as u64).is_err()
        {
            continue;
        }
        let start = if number == 1 { 100 } else { 0 };
        if page[start] != LEAF_TABLE {
            continue;
        }
        let cells = usize::from(u16::from_be_bytes([page[start + 3], page[start + 4]]));
        for i in 0..cells {
            let at = start + 8 + 2 * i;
            let Some(ptr) = page.get(at..at + 2) else { break };
            let offset = usize::from(u16::from_be_bytes([ptr[0], ptr[1]]));
            if let Some((rowid, payload)) = cell_payload(&file, &page, offset, usable)
                && let Some(row) = object_record(&payload, values)
            {
                found(rowid, row);
            }
        }
    }
    Ok(())
}

/// An entry of an object table's key index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Indexed {
    /// An entry of a unique index on the whole key (formats 1 to 4).
    Key(Key),
    /// An entry of an index on the key's first 8 bytes (format 5): the prefix and the
    /// rowid of its row.
    Prefix([u8; 8], i64),
}

impl Indexed {
    /// A key whose first 8 bytes are `prefix` (the rest zero): enough to find the table
    /// of the prefix's keys in either layout.
    pub(crate) fn table_key(prefix: [u8; 8]) -> Key {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&prefix);
        Key::from_slice(&bytes).expect("32 bytes")
    }
}

/// Calls `found` for every entry held by an index page of the file at `path` that has the
/// shape of an object table's key index entry (interior index pages repeat some entries as
/// dividers).
pub(crate) fn scan_index(path: &Path, mut found: impl FnMut(Indexed)) -> std::io::Result<()> {
    index_payloads(path, |payload| {
        if let Some(entry) = index_record(payload) {
            found(entry);
        }
    })
}

/// Calls `found` for every record of two blobs, one of 32 bytes, held by an index page of
/// the file at `path`: the names table's rows `(name, key)` and its index's entries
/// `(key, name)`. Which blob is the key is for the caller to tell (the one whose object it
/// holds; a name of 32 bytes makes the record ambiguous).
pub(crate) fn scan_names(path: &Path, mut found: impl FnMut(&[u8], &[u8])) -> std::io::Result<()> {
    index_payloads(path, |payload| {
        if let Some((first, second)) = two_blobs(payload)
            && (first.len() == 32 || second.len() == 32)
        {
            found(first, second);
        }
    })
}

/// Calls `found` with the payload of every cell of every index page (leaf or interior)
/// of the file at `path` that is held whole on its page.
fn index_payloads(path: &Path, mut found: impl FnMut(&[u8])) -> std::io::Result<()> {
    let file = File::open(path)?;
    let Some((page_size, usable)) = geometry(&file)? else { return Ok(()) };
    // Index cells hold at most this much on their page (file format 1.6).
    let max_local = (usable - 12) * 64 / 255 - 23;
    let pages = file.metadata()?.len() / page_size as u64;
    let free = freelist(&file, page_size, pages);
    let mut page = vec![0u8; page_size];
    for number in 2..=pages {
        if free.contains(&number)
            || read_at(&file, &mut page, (number - 1) * page_size as u64).is_err()
        {
            continue;
        }
        let (header, child) = match page[0] {
            LEAF_INDEX => (8, 0),
            INTERIOR_INDEX => (12, 4),
            _ => continue,
        };
        let cells = usize::from(u16::from_be_bytes([page[3], page[4]]));
        for i in 0..cells {
            let at = header + 2 * i;
            let Some(ptr) = page.get(at..at + 2) else { break };
            let offset = usize::from(u16::from_be_bytes([ptr[0], ptr[1]])) + child;
            let Some((total, n)) = page.get(offset..).and_then(varint) else { continue };
            let Ok(total) = usize::try_from(total) else { continue };
            if total > max_local {
                continue;
            }
            if let Some(payload) = page.get(offset + n..offset + n + total) {
                found(payload);
            }
        }
    }
    Ok(())
}

/// Fills `buf` from `offset` of `file` (portable: no positioned reads of one platform).
fn read_at(mut file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// The pages on the file's freelist (file format 1.5: a chain of trunk pages from header
/// offset 32, each listing leaf pages), trunks included: pages a delete freed, whose old
/// content a scan must not take for rows. Empty unless the whole list reads as consistent
/// (its count as the header records it, every page within the file, no loop): a damaged
/// list must not hide live pages.
fn freelist(file: &File, page_size: usize, pages: u64) -> std::collections::HashSet<u64> {
    let mut free = std::collections::HashSet::new();
    let mut header = [0u8; 100];
    if read_at(file, &mut header, 0).is_err() {
        return free;
    }
    let word = |b: &[u8], at: usize| {
        u64::from(u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
    };
    let (mut trunk, count) = (word(&header, 32), word(&header, 36));
    if count == 0 || count > pages {
        return free;
    }
    let mut page = vec![0u8; page_size];
    while trunk != 0 {
        if trunk > pages
            || !free.insert(trunk)
            || read_at(file, &mut page, (trunk - 1) * page_size as u64).is_err()
        {
            return std::collections::HashSet::new();
        }
        let leaves = word(&page, 4) as usize;
        if leaves > page_size / 4 - 2 {
            return std::collections::HashSet::new();
        }
        for i in 0..leaves {
            let leaf = word(&page, 8 + 4 * i);
            if leaf == 0 || leaf > pages || !free.insert(leaf) {
                return std::collections::HashSet::new();
            }
        }
        trunk = word(&page, 0);
        if free.len() as u64 > count {
            return std::collections::HashSet::new();
        }
    }
    if free.len() as u64 == count { free } else { std::collections::HashSet::new() }
}

/// Page size and usable bytes per page from the file header; `None` if it is damaged.
fn geometry(file: &File) -> std::io::Result<Option<(usize, usize)>> {
    let mut header = [0u8; 100];
    read_at(file, &mut header, 0)?;
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n if n >= 512 && n.is_power_of_two() => usize::from(n),
        _ => return Ok(None),
    };
    Ok(Some((page_size, page_size - usize::from(header[20]))))
}

/// Decodes a record of exactly two blobs.
fn two_blobs(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let (header_len, at) = varint(payload)?;
    let (first, n) = varint(payload.get(at..)?)?;
    let (second, m) = varint(payload.get(at + n..)?)?;
    let body = usize::try_from(header_len).ok()?;
    let blob = |serial: u64| {
        (serial >= 12 && serial.is_multiple_of(2)).then(|| (serial - 12) as usize / 2)
    };
    let (a, b) = (blob(first)?, blob(second)?);
    if at + n + m != body {
        return None;
    }
    let first = payload.get(body..body + a)?;
    let second = payload.get(body + a..body + a + b)?;
    (body + a + b == payload.len()).then_some((first, second))
}

/// Decodes a record of the key indexes: `(32-byte key, rowid)` or `(8-byte prefix,
/// rowid)`.
fn index_record(payload: &[u8]) -> Option<Indexed> {
    let (header_len, at) = varint(payload)?;
    let (first, n) = varint(payload.get(at..)?)?;
    let body = usize::try_from(header_len).ok()?;
    match first {
        // A blob of 32 bytes.
        76 => Key::from_slice(payload.get(body..body + 32)?).map(Indexed::Key),
        // A blob of 8 bytes, then the rowid, an integer.
        28 => {
            let (serial, _) = varint(payload.get(at + n..)?)?;
            let width = match serial {
                1..=4 => serial as usize,
                5 => 6,
                6 => 8,
                8 | 9 => 0,
                _ => return None,
            };
            let prefix: [u8; 8] = payload.get(body..body + 8)?.try_into().ok()?;
            let bytes = payload.get(body + 8..body + 8 + width)?;
            let rowid = match serial {
                8 => 0,
                9 => 1,
                // Big-endian, two's complement.
                _ => {
                    bytes[1..].iter().fold(i64::from(bytes[0] as i8), |v, &b| v << 8 | i64::from(b))
                }
            };
            Some(Indexed::Prefix(prefix, rowid))
        }
        _ => None,
    }
}

/// The rowid and the whole payload of the table leaf cell at `offset`, following overflow
/// pages.
fn cell_payload(file: &File, page: &[u8], offset: usize, usable: usize) -> Option<(i64, Vec<u8>)> {
    let (total, n) = varint(page.get(offset..)?)?;
    let (rowid, m) = varint(page.get(offset + n..)?)?;
    let total = usize::try_from(total).ok()?;
    if total > 1 << 30 {
        return None;
    }
    let body = offset + n + m;
    // How much of the payload is on this page (file format 1.6, "cell payload overflow").
    let max_local = usable - 35;
    let local = if total <= max_local {
        total
    } else {
        let min_local = (usable - 12) * 32 / 255 - 23;
        let k = min_local + (total - min_local) % (usable - 4);
        if k <= max_local { k } else { min_local }
    };
    let mut payload = page.get(body..body + local)?.to_vec();
    if local < total {
        let next = page.get(body + local..body + local + 4)?;
        let mut next = u32::from_be_bytes(next.try_into().ok()?);
        let mut overflow = vec![0u8; usable];
        let mut hops = 0;
        while payload.len() < total {
            hops += 1;
            if next == 0 || hops > (total / (usable - 4)) + 2 {
                return None;
            }
            let page_size = page.len() as u64;
            read_at(file, &mut overflow, u64::from(next - 1) * page_size).ok()?;
            let take = (total - payload.len()).min(usable - 4);
            payload.extend_from_slice(&overflow[4..4 + take]);
            next = u32::from_be_bytes(overflow[..4].try_into().ok()?);
        }
    }
    Some((rowid as i64, payload))
}

/// Decodes a record of the object tables, its columns where the row's description puts
/// them (`db/row.rs`): a rowid alias (NULL), a 32-byte key, the raw length, the stored
/// bytes, then in later tables the last use and the place in the file of values.
fn object_record(payload: &[u8], values: Values) -> Option<FoundRow> {
    let fields = record(payload, row::TABLE.len())?;
    // A record of one more column than its table was made with is one with its model.
    let model = fields.len() > row::table_columns(values, false).len();
    let at = |column| row::on_page(column, values, model).and_then(|i| fields.get(i));
    match (at(Column::Rowid)?, at(Column::Key)?, at(Column::RawLen)?, at(Column::Data)?) {
        (Field::Null, Field::Blob(key), Field::Int(raw_len), Field::Blob(data)) => {
            for column in [Column::Used, Column::Model] {
                match at(column) {
                    None | Some(Field::Int(_) | Field::Null) => {}
                    Some(_) => return None,
                }
            }
            let place = match at(Column::Place) {
                Some(Field::Int(packed)) => Some(Place::unpack(*packed)?),
                None | Some(Field::Null) => None,
                Some(_) => return None,
            };
            Some((Key::from_slice(key)?, *raw_len, data.to_vec(), place))
        }
        _ => None,
    }
}

/// A field of a record.
#[derive(Debug, PartialEq)]
enum Field<'a> {
    Null,
    Int(i64),
    Blob(&'a [u8]),
    /// Text and floats: no column of an object row holds one.
    Other,
}

/// The fields of a record of at most `most` columns (file format 2.1); `None` for bytes
/// that are not one.
fn record(payload: &[u8], most: usize) -> Option<Vec<Field<'_>>> {
    let (header_len, mut at) = varint(payload)?;
    let header_len = usize::try_from(header_len).ok()?;
    let mut body = header_len;
    let mut fields = Vec::with_capacity(most);
    while at < header_len {
        if fields.len() == most {
            return None;
        }
        let (serial, n) = varint(payload.get(at..)?)?;
        at += n;
        let (width, field) = match serial {
            0 => (0, Field::Null),
            8 => (0, Field::Int(0)),
            9 => (0, Field::Int(1)),
            1..=6 => {
                let width = [0, 1, 2, 3, 4, 6, 8][serial as usize];
                let bytes = payload.get(body..body + width)?;
                // Big-endian, two's complement.
                let value = bytes
                    .iter()
                    .fold(i64::from(bytes[0] as i8 >> 7), |v, &b| v << 8 | i64::from(b));
                (width, Field::Int(value))
            }
            7 => (8, Field::Other),
            n if n >= 12 && n % 2 == 0 => {
                let len = usize::try_from((n - 12) / 2).ok()?;
                (len, Field::Blob(payload.get(body..body + len)?))
            }
            n if n >= 13 => (usize::try_from((n - 13) / 2).ok()?, Field::Other),
            _ => return None,
        };
        body += width;
        fields.push(field);
    }
    (at == header_len && body == payload.len()).then_some(fields)
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

    /// A file with the stash's object table and key index, rows of the given sizes, on
    /// 4 KiB pages so that a few hundred rows already need interior pages and a 10 KB row
    /// overflows.
    fn fixture(dir: &Path, sizes: &[usize]) -> (std::path::PathBuf, Vec<(Key, Vec<u8>)>) {
        fixture_indexed(dir, sizes, "CREATE UNIQUE INDEX objects_key ON objects(key);")
    }

    fn fixture_indexed(
        dir: &Path,
        sizes: &[usize],
        index: &str,
    ) -> (std::path::PathBuf, Vec<(Key, Vec<u8>)>) {
        let path = dir.join("fixture.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size = 4096;
             CREATE TABLE objects(rowid INTEGER PRIMARY KEY, key BLOB NOT NULL,
                                  raw_len INTEGER NOT NULL, data BLOB NOT NULL);
             {index}"
        ))
        .unwrap();
        let rows: Vec<(Key, Vec<u8>)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let mut data = (i as u64).to_le_bytes().to_vec();
                data.extend((0..n).map(|j| (i * 31 + j * 7) as u8));
                (Key::of(&data), data)
            })
            .collect();
        for (i, (key, data)) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO objects(key, raw_len, data) VALUES (?1, ?2, ?3)",
                params![&key.as_bytes()[..], (i as i64) * 1_000_003 - 7, data],
            )
            .unwrap();
        }
        (path, rows)
    }

    fn scanned(path: &Path, values: Values) -> Vec<FoundRow> {
        let mut found = Vec::new();
        scan(path, values, |_, row| found.push(row)).unwrap();
        found.sort_by_key(|r| r.0);
        found
    }

    #[test]
    fn table_leaves_with_overflow_and_interior_pages_give_every_row() {
        let dir = tempfile::tempdir().unwrap();
        // Small rows (many leaves under interior pages) and rows of 5 KB and 10 KB (one
        // and two overflow pages), and an empty one.
        let sizes: Vec<usize> =
            (0..600).map(|i| [40, 300, 5_000, 10_000, 0][i % 5] + i % 13).collect();
        let (path, rows) = fixture(dir.path(), &sizes);
        let bytes = std::fs::read(&path).unwrap();
        let interior = bytes.chunks(4096).skip(1).filter(|page| page[0] == 0x05).count();
        assert!(interior > 0, "the fixture must have interior table pages");
        let found = scanned(&path, Values::InRows);
        assert_eq!(found.len(), rows.len());
        let mut expected: Vec<FoundRow> = rows
            .iter()
            .enumerate()
            .map(|(i, (key, data))| (*key, (i as i64) * 1_000_003 - 7, data.clone(), None))
            .collect();
        expected.sort_by_key(|r| r.0);
        assert_eq!(found, expected, "keys, raw lengths (negative too) and data, overflow included");
    }

    #[test]
    fn index_pages_name_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let (path, rows) = fixture(dir.path(), &vec![20; 2_000]);
        let mut keys = Vec::new();
        scan_index(&path, |entry| keys.push(entry)).unwrap();
        keys.sort();
        let mut expected: Vec<Indexed> = rows.iter().map(|r| Indexed::Key(r.0)).collect();
        expected.sort();
        // Interior index pages repeat some keys as dividers; every key is there.
        keys.dedup();
        assert_eq!(keys, expected);
    }

    #[test]
    fn prefix_index_pages_give_every_prefix_and_rowid() {
        let dir = tempfile::tempdir().unwrap();
        // Format 5's young index, filled below as the writer fills it.
        let sql = "CREATE TABLE objstash_young(prefix BLOB NOT NULL, id INTEGER NOT NULL, \
                   PRIMARY KEY(prefix, id)) WITHOUT ROWID;";
        let (path, rows) = fixture_indexed(dir.path(), &vec![20; 2_000], sql);
        // Rowids of every width a record can give them, negative ones too.
        let conn = Connection::open(&path).unwrap();
        // Out of the way of the rowids given below first.
        conn.execute("UPDATE objects SET rowid = rowid + (1 << 62)", []).unwrap();
        let mut expected: Vec<Indexed> = Vec::new();
        for (i, (key, _)) in rows.iter().enumerate() {
            let rowid = [0, 1, 200, -3, 70_000, 1 << 40, i64::MIN, i64::MAX][i % 8]
                .wrapping_add(if i < 8 { 0 } else { i as i64 * 1_000_003 });
            conn.execute(
                "UPDATE objects SET rowid = ?2 WHERE key = ?1",
                params![&key.as_bytes()[..], rowid],
            )
            .unwrap();
            let prefix = key.as_bytes()[..8].try_into().unwrap();
            expected.push(Indexed::Prefix(prefix, rowid));
        }
        conn.execute(
            "INSERT INTO objstash_young(prefix, id) SELECT substr(key, 1, 8), rowid FROM objects",
            [],
        )
        .unwrap();
        drop(conn);
        let mut entries = Vec::new();
        scan_index(&path, |entry| entries.push(entry)).unwrap();
        entries.sort();
        entries.dedup();
        expected.sort();
        assert_eq!(entries, expected);
    }

    #[test]
    fn damaged_cells_and_pages_are_skipped_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let (path, rows) = fixture(dir.path(), &vec![100; 300]);
        let bytes = std::fs::read(&path).unwrap();
        let page_size = 4096;
        // Damage every table leaf page but the last one differently: a cell pointer past
        // the page, a cell whose record header claims other column types, and a page of
        // garbage; none of it may panic or yield a row that was not stored.
        let mut damaged = bytes.clone();
        let leaves: Vec<usize> = (1..bytes.len() / page_size)
            .filter(|&p| damaged[p * page_size] == LEAF_TABLE)
            .collect();
        assert!(leaves.len() >= 4, "{} leaves", leaves.len());
        let first = leaves[0] * page_size;
        damaged[first + 8] = 0xff;
        damaged[first + 9] = 0xff;
        let second = leaves[1] * page_size;
        let cell = usize::from(u16::from_be_bytes([damaged[second + 8], damaged[second + 9]]));
        damaged[second + cell + 4] ^= 0x55;
        let third = leaves[2] * page_size;
        for (i, b) in damaged[third + 1..third + page_size].iter_mut().enumerate() {
            *b = (i * 131 % 251) as u8;
        }
        std::fs::write(&path, &damaged).unwrap();
        let found = scanned(&path, Values::InRows);
        let stored: std::collections::HashMap<Key, &Vec<u8>> =
            rows.iter().map(|(k, d)| (*k, d)).collect();
        assert!(found.len() < rows.len() && found.len() > rows.len() / 2, "{}", found.len());
        for (key, _, data, _) in &found {
            if let Some(original) = stored.get(key) {
                assert_eq!(*original, data, "a row read back with other bytes");
            }
        }
        // A file too short for its header cannot be read; one with an impossible page size
        // yields nothing.
        std::fs::write(&path, &bytes[..50]).unwrap();
        assert!(scan(&path, Values::InRows, |_, _| ()).is_err());
        let mut header = bytes[..8192].to_vec();
        header[16] = 0;
        header[17] = 3;
        std::fs::write(&path, &header).unwrap();
        assert!(scanned(&path, Values::InRows).is_empty());
    }

    /// The scanner read the first four columns of a row and nothing after them, so a row
    /// of a stash whose values are in a file came out with no value and no place: a row
    /// only the scanner reached was dropped though its value was whole in the file. It
    /// reads the columns where the row's description (`db/row.rs`) puts them.
    #[test]
    fn rows_of_every_shape_give_their_place_and_last_use_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("placed.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size = 4096; {}",
            row::create_table("objects", Values::InFile)
        ))
        .unwrap();
        let (columns, params) = row::insert_columns(Values::InFile, false);
        let sql = format!("INSERT INTO objects{columns} VALUES ({params})");
        let mut expected = Vec::new();
        for i in 0..500u64 {
            let key = Key::of(&i.to_le_bytes());
            let place = (i % 3 != 0).then_some(Place { at: i * 1000, len: 300 + i as usize });
            let data = if place.is_some() { Vec::new() } else { vec![i as u8; 40] };
            let used = [0, 7, i64::MAX, 1_700_000_000_000][i as usize % 4];
            conn.execute(
                &sql,
                params![&key.as_bytes()[..], i as i64, data, used, place.map(Place::pack)],
            )
            .unwrap();
            expected.push((key, i as i64, data, place));
        }
        drop(conn);
        expected.sort_by_key(|r| r.0);
        assert_eq!(scanned(&path, Values::InFile), expected);
    }

    #[test]
    fn varints() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x80]), None);
    }
}
