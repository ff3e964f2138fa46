//! Compacted indexes: every pack index merged into key-sharded files, so that a machine
//! reads only the parts it needs (`compact.rs` writes them, `catalog/shards.rs` reads them).
//!
//! A compaction writes a generation, `shards/<gen>/`, of 2^bits shard files (a key's shard
//! is its first `bits` bits), then points `shards/current` at it. `current` holds the
//! generation's manifest:
//!
//! ```text
//! "OSTSHRD1" | gen length u8 | gen | covered ms u64 | packs u64 | objects u64 | bytes u64
//!            | bits u8 | per shard: length u64, header length u32
//!            | recent u32 | recent x pack name [32]
//! ```
//!
//! `recent` are the packs it covers that the pack log announced in the day before the
//! compaction: a reader lists the log from a margin before the compaction's time, and
//! does not read again the indexes of packs the shards already hold.
//!
//! and `shards/<gen>/packs` lists the packs it covers (read only by a machine that needs
//! every entry: a pull, a collection, a trim):
//!
//! ```text
//! "OSTSPAK1" | count u32 | count x (name [32] | body length u64)
//! ```
//!
//! A shard file is a header a reader fetches once, then blocks it fetches one at a time:
//!
//! ```text
//! header: "OSTSHARD" | entries u32 | blocks u32 | per block: first key [32] | filter length u32 | filter
//! blocks: entries sorted by key, BLOCK_ENTRIES a block:
//!         key [32] | pack [32] | offset u64 | length u32 | raw length u64 | kind u8   (85 bytes)
//! ```
//!
//! The filter is a Bloom filter of the shard's keys (10 bits and 7 probes a key: 1% false
//! positives), so "the remote does not hold this key" costs no block. The whole file is
//! named by the generation, written once and never changed; a reader of an older
//! generation reads it until a collection deletes it, then reads `current` again.

use super::pack::{Entry, Kind};
use crate::key::Key;

const MANIFEST_MAGIC: &[u8; 8] = b"OSTSHRD1";
const SHARD_MAGIC: &[u8; 8] = b"OSTSHARD";
/// Bytes of one entry in a block.
pub(crate) const ENTRY: usize = 32 + 32 + 8 + 4 + 8 + 1;
/// Entries in a block: a block is one ranged read of ~21 KiB.
pub(crate) const BLOCK_ENTRIES: usize = 256;
/// Bits of filter per key, and probes.
const FILTER_BITS: usize = 10;
const PROBES: u32 = 7;
/// The most shard bits (4,096 shards: ~244,000 keys a shard at a billion objects).
pub(crate) const MAX_BITS: u8 = 12;
/// Keys a shard aims at.
const KEYS_PER_SHARD: u64 = 65_536;

/// Shard bits for a remote of `keys` keys.
pub(crate) fn bits_for(keys: u64) -> u8 {
    let mut bits = 0;
    while bits < MAX_BITS && (keys >> bits) > KEYS_PER_SHARD {
        bits += 1;
    }
    bits
}

/// The shard of `key` among 2^bits.
pub(crate) fn shard_of(key: &Key, bits: u8) -> usize {
    if bits == 0 {
        return 0;
    }
    let b = key.as_bytes();
    (u16::from_be_bytes([b[0], b[1]]) >> (16 - u32::from(bits))) as usize
}

/// A generation as `shards/current` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub generation: String,
    /// The pack log's events older than this (less the clock margin) are in the shards.
    pub covered_ms: u64,
    /// Packs, objects (names and chunks left out) and bytes of bodies covered.
    pub packs: u64,
    pub objects: u64,
    pub bytes: u64,
    pub bits: u8,
    /// Per shard: its file's length and its header's.
    pub shards: Vec<(u64, u32)>,
    /// Packs covered that the log announced in the day before `covered_ms`.
    pub recent: Vec<String>,
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.shards.len() * 12);
        out.extend_from_slice(MANIFEST_MAGIC);
        out.push(u8::try_from(self.generation.len()).expect("short generation names"));
        out.extend_from_slice(self.generation.as_bytes());
        out.extend_from_slice(&self.covered_ms.to_le_bytes());
        for n in [self.packs, self.objects, self.bytes] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.push(self.bits);
        for (len, header) in &self.shards {
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&header.to_le_bytes());
        }
        out.extend_from_slice(&(self.recent.len() as u32).to_le_bytes());
        for name in &self.recent {
            let mut raw = [0u8; 32];
            decode_hex(name, &mut raw);
            out.extend_from_slice(&raw);
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Manifest, String> {
        let bad = || "not a shard manifest".to_string();
        if bytes.len() < 9 || &bytes[..8] != MANIFEST_MAGIC {
            return Err(bad());
        }
        let len = bytes[8] as usize;
        let rest = bytes.get(9..).ok_or_else(bad)?;
        let generation =
            std::str::from_utf8(rest.get(..len).ok_or_else(bad)?).map_err(|_| bad())?.to_string();
        let rest = &rest[len..];
        if rest.len() < 33 {
            return Err(bad());
        }
        let u64_at = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
        let (covered_ms, packs, objects, bytes_) = (u64_at(0), u64_at(8), u64_at(16), u64_at(24));
        let bits = rest[32];
        let table_len = (1usize << bits.min(MAX_BITS)) * 12;
        let table = rest.get(33..33 + table_len).ok_or_else(bad)?;
        let tail = &rest[33 + table_len..];
        if bits > MAX_BITS || tail.len() < 4 {
            return Err(format!("a manifest of {bits} shard bits with {} bytes", rest.len()));
        }
        let count = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) as usize;
        if tail.len() != 4 + count * 32 {
            return Err(format!("a manifest of {count} recent packs in {} bytes", tail.len()));
        }
        let recent = tail[4..]
            .chunks_exact(32)
            .map(|p| p.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        let shards = table
            .chunks_exact(12)
            .map(|c| {
                (
                    u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                    u32::from_le_bytes(c[8..].try_into().expect("4 bytes")),
                )
            })
            .collect();
        Ok(Manifest { generation, covered_ms, packs, objects, bytes: bytes_, bits, shards, recent })
    }
}

/// One entry of a shard: where the remote holds a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    pub pack: String,
    pub entry: Entry,
}

/// Writes a shard file of `entries` (sorted here); returns the file and its header's length.
pub(crate) fn build(mut entries: Vec<Located>) -> (Vec<u8>, u32) {
    entries.sort_by(|a, b| a.entry.key.cmp(&b.entry.key).then_with(|| a.pack.cmp(&b.pack)));
    let blocks: Vec<&[Located]> = entries.chunks(BLOCK_ENTRIES).collect();
    let mut header = Vec::new();
    header.extend_from_slice(SHARD_MAGIC);
    header.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    header.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    for block in &blocks {
        header.extend_from_slice(block[0].entry.key.as_bytes());
    }
    let filter = Filter::of(entries.iter().map(|e| &e.entry.key), entries.len());
    header.extend_from_slice(&(filter.0.len() as u32).to_le_bytes());
    header.extend_from_slice(&filter.0);
    let header_len = header.len() as u32;
    let mut file = header;
    file.reserve(entries.len() * ENTRY);
    for e in &entries {
        file.extend_from_slice(e.entry.key.as_bytes());
        let mut pack = [0u8; 32];
        decode_hex(&e.pack, &mut pack);
        file.extend_from_slice(&pack);
        file.extend_from_slice(&e.entry.offset.to_le_bytes());
        file.extend_from_slice(&e.entry.len.to_le_bytes());
        file.extend_from_slice(&e.entry.raw_len.to_le_bytes());
        file.push(e.entry.kind as u8);
    }
    (file, header_len)
}

/// A shard's header, read back.
#[derive(Clone, Debug)]
pub(crate) struct Header {
    pub entries: u32,
    /// The first key of each block.
    pub fences: Vec<Key>,
    filter: Filter,
}

impl Header {
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, String> {
        let bad = |what: &str| format!("a damaged shard header ({what})");
        if bytes.len() < 16 || &bytes[..8] != SHARD_MAGIC {
            return Err(bad("magic"));
        }
        let entries = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let blocks = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
        let fences_end = 16 + blocks * 32;
        let fences: Vec<Key> = bytes
            .get(16..fences_end)
            .ok_or_else(|| bad("fences"))?
            .chunks_exact(32)
            .map(|k| Key::from_slice(k).expect("32 bytes"))
            .collect();
        let len_at = bytes.get(fences_end..fences_end + 4).ok_or_else(|| bad("filter"))?;
        let filter_len = u32::from_le_bytes(len_at.try_into().expect("4 bytes")) as usize;
        let filter =
            bytes.get(fences_end + 4..fences_end + 4 + filter_len).ok_or_else(|| bad("filter"))?;
        if fences_end + 4 + filter_len != bytes.len() {
            return Err(bad("length"));
        }
        Ok(Header { entries, fences, filter: Filter(filter.to_vec()) })
    }

    /// Whether the shard may hold `key` (false: it certainly does not).
    pub(crate) fn may_hold(&self, key: &Key) -> bool {
        self.filter.may_hold(key)
    }

    /// The block that would hold `key`, if any.
    pub(crate) fn block_of(&self, key: &Key) -> Option<usize> {
        match self.fences.binary_search(key) {
            Ok(i) => Some(i),
            Err(0) => None,
            Err(i) => Some(i - 1),
        }
    }

    /// The byte range of block `i` in the file, after a header of `header_len` bytes.
    pub(crate) fn block_range(&self, i: usize, header_len: u32) -> std::ops::Range<u64> {
        let first = (i * BLOCK_ENTRIES) as u64;
        let last = ((i + 1) * BLOCK_ENTRIES).min(self.entries as usize) as u64;
        u64::from(header_len) + first * ENTRY as u64..u64::from(header_len) + last * ENTRY as u64
    }
}

/// The entries of a block, sorted by key.
pub(crate) fn parse_block(bytes: &[u8]) -> Result<Vec<Located>, String> {
    if !bytes.len().is_multiple_of(ENTRY) {
        return Err(format!("a shard block of {} bytes", bytes.len()));
    }
    bytes
        .chunks_exact(ENTRY)
        .map(|e| {
            let key = Key::from_slice(&e[..32]).expect("32 bytes");
            let pack: String = e[32..64].iter().map(|b| format!("{b:02x}")).collect();
            let kind =
                Kind::from_byte(e[84]).ok_or_else(|| format!("object {key} of kind {}", e[84]))?;
            Ok(Located {
                pack,
                entry: Entry {
                    key,
                    offset: u64::from_le_bytes(e[64..72].try_into().expect("8 bytes")),
                    len: u32::from_le_bytes(e[72..76].try_into().expect("4 bytes")),
                    raw_len: u64::from_le_bytes(e[76..84].try_into().expect("8 bytes")),
                    kind,
                },
            })
        })
        .collect()
}

const PACKS_MAGIC: &[u8; 8] = b"OSTSPAK1";

/// The packs file of a generation: each pack's name and body length.
pub(crate) fn encode_packs(packs: &[(String, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + packs.len() * 40);
    out.extend_from_slice(PACKS_MAGIC);
    out.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    for (name, body_len) in packs {
        let mut raw = [0u8; 32];
        decode_hex(name, &mut raw);
        out.extend_from_slice(&raw);
        out.extend_from_slice(&body_len.to_le_bytes());
    }
    out
}

pub(crate) fn decode_packs(bytes: &[u8]) -> Result<Vec<(String, u64)>, String> {
    if bytes.len() < 12 || &bytes[..8] != PACKS_MAGIC {
        return Err("not a packs file".into());
    }
    let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    if bytes.len() != 12 + count * 40 {
        return Err(format!("a packs file of {} bytes for {count} packs", bytes.len()));
    }
    Ok(bytes[12..]
        .chunks_exact(40)
        .map(|p| {
            let name: String = p[..32].iter().map(|b| format!("{b:02x}")).collect();
            (name, u64::from_le_bytes(p[32..].try_into().expect("8 bytes")))
        })
        .collect())
}

/// A pack name (64 hex digits) as its 32 bytes.
fn decode_hex(name: &str, out: &mut [u8; 32]) {
    let digit = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => 0,
    };
    for (i, pair) in name.as_bytes().chunks_exact(2).take(32).enumerate() {
        out[i] = (digit(pair[0]) << 4) | digit(pair[1]);
    }
}

/// A Bloom filter over keys (already uniform: their bytes are the probes).
#[derive(Clone, Debug)]
struct Filter(Vec<u8>);

impl Filter {
    fn of<'a>(keys: impl Iterator<Item = &'a Key>, count: usize) -> Filter {
        let bits = (count * FILTER_BITS).max(64);
        let mut filter = Filter(vec![0; bits.div_ceil(8)]);
        for key in keys {
            for bit in filter.probes(key) {
                filter.0[bit / 8] |= 1 << (bit % 8);
            }
        }
        filter
    }

    fn probes(&self, key: &Key) -> impl Iterator<Item = usize> + use<> {
        let b = key.as_bytes();
        let h1 = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        let h2 = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")) | 1;
        let bits = (self.0.len() * 8) as u64;
        (0..PROBES).map(move |i| (h1.wrapping_add(u64::from(i).wrapping_mul(h2)) % bits) as usize)
    }

    fn may_hold(&self, key: &Key) -> bool {
        !self.0.is_empty() && self.probes(key).all(|bit| self.0[bit / 8] & (1 << (bit % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn located(i: u32) -> Located {
        Located {
            pack: format!("{:064x}", i % 7),
            entry: Entry {
                key: Key::of(&i.to_le_bytes()),
                offset: u64::from(i) * 10,
                len: i,
                raw_len: u64::from(i) * 3,
                kind: Kind::Object,
            },
        }
    }

    #[test]
    fn a_shard_finds_every_key_it_holds_and_filters_most_others() {
        let entries: Vec<Located> = (0..5_000).map(located).collect();
        let (file, header_len) = build(entries.clone());
        let header = Header::decode(&file[..header_len as usize]).unwrap();
        assert_eq!(header.entries, 5_000);
        for e in &entries {
            assert!(header.may_hold(&e.entry.key));
            let block = header.block_of(&e.entry.key).expect("a block");
            let range = header.block_range(block, header_len);
            let found = parse_block(&file[range.start as usize..range.end as usize]).unwrap();
            let hit = found.iter().find(|f| f.entry.key == e.entry.key).expect("in its block");
            assert_eq!(hit, e);
        }
        let false_positives =
            (10_000..20_000u32).filter(|i| header.may_hold(&Key::of(&i.to_le_bytes()))).count();
        assert!(false_positives < 250, "{false_positives} false positives of 10,000");
    }

    #[test]
    fn a_manifest_reads_back_and_keys_fall_in_their_shard() {
        let m = Manifest {
            generation: "1764000000000-00ff".into(),
            covered_ms: 1_764_000_000_000,
            packs: 9,
            objects: 10,
            bytes: 11,
            bits: 2,
            shards: vec![(1, 2), (3, 4), (5, 6), (7, 8)],
            recent: vec![format!("{:064x}", 9)],
        };
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
        let packs = vec![(format!("{:064x}", 5), 77), (format!("{:064x}", 6), 88)];
        assert_eq!(decode_packs(&encode_packs(&packs)).unwrap(), packs);
        assert!(Manifest::decode(&m.encode()[..20]).is_err());
        assert_eq!(bits_for(1_000), 0);
        assert_eq!(bits_for(1_000_000), 4);
        assert_eq!(bits_for(u64::MAX), MAX_BITS);
        let key = Key::from_bytes([0xC0; 32]);
        assert_eq!((shard_of(&key, 0), shard_of(&key, 2), shard_of(&key, 12)), (0, 3, 0xC0C));
    }
}
