//! Packs: many objects in one remote file, and the index that makes them readable.
//!
//! A pack is two remote files with one name. The body is the objects' gzip members one
//! after another (whatever codec the pushing stash uses, so any machine reads it without
//! a dictionary); the index lists, for each object, its key, where its member starts, its
//! length and its size once inflated, and carries the body's length and blake3 hash:
//!
//! ```text
//! "OSTPACK1" | body length u64 | body blake3 [32] | count u32 | count x entry
//! entry: key [32] | offset u64 | length u32 | raw length u64        (52 bytes)
//! ```
//!
//! (integers little-endian). A pack that holds chunked objects (`chunks.rs`) is
//! "OSTPACK2", whose entries end with a kind byte (53 bytes): 0 an object, 1 a chunk of a
//! large object (its member inflates to bytes that hash to its key), 2 a large object's
//! manifest (its member inflates to the manifest, whose chunks hash to the object's key
//! once read in order), 3 a name (`names.rs`: its member inflates to a record of the name
//! and its object's key, under a key derived from the name). A pack of objects only stays "OSTPACK1", byte for byte what
//! versions before chunks write; those versions list an "OSTPACK2" index as one they
//! cannot read and leave it alone. The pack's name is the blake3 hash of its index, which holds
//! the body's hash: two machines that push the same objects in the same order write the
//! same bytes under the same name, and any other grouping gets another name, so no upload
//! can damage another's pack. A body read back is checked object by object (each entry's
//! inflated bytes must hash to its key); an index is checked against its name.

use crate::key::Key;

/// First bytes of every index of objects only.
const MAGIC: &[u8; 8] = b"OSTPACK1";
/// First bytes of every index with chunks or manifests.
const MAGIC_KINDS: &[u8; 8] = b"OSTPACK2";
/// Bytes of the index before its entries.
const HEADER: usize = 8 + 8 + 32 + 4;
/// Bytes of one index entry of objects only.
pub(crate) const ENTRY: usize = 32 + 8 + 4 + 8;

/// What a member of a pack is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An object: it inflates to bytes that hash to its key.
    #[default]
    Object = 0,
    /// A chunk of a large object, under its own hash.
    Chunk = 1,
    /// A large object's manifest, under the object's key.
    Manifest = 2,
    /// A name's record, under a key derived from the name (`names.rs`).
    Name = 3,
}

impl Kind {
    pub(crate) fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            0 => Some(Kind::Object),
            1 => Some(Kind::Chunk),
            2 => Some(Kind::Manifest),
            3 => Some(Kind::Name),
            _ => None,
        }
    }
}

/// Where one object of a pack lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Key,
    pub offset: u64,
    pub len: u32,
    pub raw_len: u64,
    pub kind: Kind,
}

impl Entry {
    /// The byte range of its gzip member in the body.
    pub(crate) fn range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + u64::from(self.len)
    }
}

/// A pack being filled.
#[derive(Default)]
pub(crate) struct Builder {
    body: Vec<u8>,
    entries: Vec<Entry>,
}

/// A pack ready to upload.
pub(crate) struct Sealed {
    pub name: String,
    pub body: bytes::Bytes,
    pub index: bytes::Bytes,
    pub entries: Vec<Entry>,
}

impl Builder {
    /// Appends one member (`member`, a gzip member inflating to `raw_len` bytes) of
    /// `kind`.
    pub(crate) fn push(&mut self, key: Key, raw_len: u64, member: &[u8], kind: Kind) {
        let len = u32::try_from(member.len()).expect("members are far below 4 GiB");
        self.entries.push(Entry { key, offset: self.body.len() as u64, len, raw_len, kind });
        self.body.extend_from_slice(member);
    }

    /// Bytes of the body so far.
    pub(crate) fn body_len(&self) -> usize {
        self.body.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the index and names the pack; the builder is left empty.
    pub(crate) fn seal(&mut self) -> Sealed {
        let body = std::mem::take(&mut self.body);
        let entries = std::mem::take(&mut self.entries);
        let kinds = entries.iter().any(|e| e.kind != Kind::Object);
        let mut index = Vec::with_capacity(HEADER + entries.len() * (ENTRY + 1));
        index.extend_from_slice(if kinds { MAGIC_KINDS } else { MAGIC });
        index.extend_from_slice(&(body.len() as u64).to_le_bytes());
        index.extend_from_slice(blake3::hash(&body).as_bytes());
        index.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for entry in &entries {
            index.extend_from_slice(entry.key.as_bytes());
            index.extend_from_slice(&entry.offset.to_le_bytes());
            index.extend_from_slice(&entry.len.to_le_bytes());
            index.extend_from_slice(&entry.raw_len.to_le_bytes());
            if kinds {
                index.push(entry.kind as u8);
            }
        }
        let name = blake3::hash(&index).to_hex().to_string();
        Sealed { name, body: body.into(), index: index.into(), entries }
    }
}

/// A pack's index, read back and checked.
#[derive(Debug)]
pub(crate) struct Index {
    pub body_len: u64,
    pub entries: Vec<Entry>,
}

/// Whether `name` can be a pack's name (64 lowercase hex digits): anything else under the
/// remote's prefix is not ours and is left alone.
pub(crate) fn is_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Parses the index stored under `name`, checking it against its name and itself.
pub(crate) fn parse_index(name: &str, bytes: &[u8]) -> Result<Index, String> {
    let actual = blake3::hash(bytes).to_hex();
    if actual.as_str() != name {
        return Err(format!("its bytes hash to {actual}, not to its name"));
    }
    if bytes.len() < HEADER || (&bytes[..8] != MAGIC && &bytes[..8] != MAGIC_KINDS) {
        return Err("it is not a pack index".to_string());
    }
    let size = if &bytes[..8] == MAGIC_KINDS { ENTRY + 1 } else { ENTRY };
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let body_len = u64_at(8);
    let count = u32_at(48) as usize;
    if bytes.len() != HEADER + count * size {
        return Err(format!("it lists {count} objects in {} bytes", bytes.len()));
    }
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let at = HEADER + i * size;
        let key = Key::from_bytes(bytes[at..at + 32].try_into().expect("32 bytes"));
        let kind = if size == ENTRY {
            Kind::Object
        } else {
            Kind::from_byte(bytes[at + ENTRY])
                .ok_or_else(|| format!("object {key} has unknown kind {}", bytes[at + ENTRY]))?
        };
        let entry = Entry {
            key,
            offset: u64_at(at + 32),
            len: u32_at(at + 40),
            raw_len: u64_at(at + 44),
            kind,
        };
        if entry.range().end > body_len {
            return Err(format!("object {key} lies past the end of the body"));
        }
        entries.push(entry);
    }
    Ok(Index { body_len, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_round_trips_and_names_its_content() {
        let mut builder = Builder::default();
        for i in 0..3u8 {
            builder.push(Key::of(&[i]), 1, &[i; 20], Kind::Object);
        }
        let sealed = builder.seal();
        assert!(builder.is_empty() && is_name(&sealed.name));
        let index = parse_index(&sealed.name, &sealed.index).unwrap();
        assert_eq!(index.entries, sealed.entries);
        assert_eq!(index.body_len, 60);
        assert_eq!(&sealed.index[16..48], blake3::hash(&sealed.body).as_bytes());
        assert_eq!(index.entries[2].range(), 40..60);

        let mut again = Builder::default();
        for i in 0..3u8 {
            again.push(Key::of(&[i]), 1, &[i; 20], Kind::Object);
        }
        assert_eq!(again.seal().name, sealed.name, "same objects, same order: same name");
    }

    #[test]
    fn a_pack_with_chunks_says_each_members_kind_and_one_without_stays_version_1() {
        let mut builder = Builder::default();
        builder.push(Key::of(b"c"), 1, b"chunk", Kind::Chunk);
        builder.push(Key::of(b"o"), 1, b"manifest", Kind::Manifest);
        builder.push(Key::of(b"p"), 1, b"object", Kind::Object);
        let sealed = builder.seal();
        assert_eq!(&sealed.index[..8], MAGIC_KINDS);
        let index = parse_index(&sealed.name, &sealed.index).unwrap();
        let kinds: Vec<Kind> = index.entries.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::Chunk, Kind::Manifest, Kind::Object]);
        let mut plain = Builder::default();
        plain.push(Key::of(b"p"), 1, b"object", Kind::Object);
        assert_eq!(&plain.seal().index[..8], MAGIC);
    }

    #[test]
    fn a_damaged_index_is_refused() {
        let mut builder = Builder::default();
        builder.push(Key::of(b"a"), 1, b"member", Kind::Object);
        let sealed = builder.seal();
        for i in 0..sealed.index.len() {
            let mut bad = sealed.index.to_vec();
            bad[i] ^= 1;
            assert!(parse_index(&sealed.name, &bad).is_err(), "flip at {i}");
        }
        assert!(parse_index(&sealed.name, &sealed.index[..20]).is_err());
        assert!(!is_name("packs/x") && !is_name(&"A".repeat(64)));
    }
}
