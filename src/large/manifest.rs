//! The row of a chunked object: its manifest.
//!
//! An object above [`chunks::CHUNKED_ABOVE`](crate::large::chunks::CHUNKED_ABOVE) bytes is stored
//! as chunks (`chunks.rs`) and one row in its object table, under the object's own key,
//! whose value is this manifest instead of a compressed object: the object's length and
//! the key and length of each chunk in order. The row's `raw_len` is the object's length,
//! so totals, listings, names, pins and eviction treat it as the object it stands for.
//!
//! Layout (little-endian): the magic `OSCM`, a version byte (1), three zero bytes, the
//! object's length (u64), the chunk count (u32), then per chunk its key (32 bytes) and
//! length (u32), and last the first 16 bytes of the blake3 hash of everything before.
//! A stored gzip member starts with `1f 8b` and a zstd frame with `28 b5 2f fd`, so a
//! value is a manifest exactly when it starts with the magic. The checksum makes damage
//! to a manifest a corrupt object rather than a read of the wrong chunks; each chunk is
//! checked against its own key when it is read.

use crate::key::Key;

/// The first bytes of every manifest.
pub(crate) const MAGIC: [u8; 4] = *b"OSCM";
const VERSION: u8 = 1;
const HEADER: usize = 4 + 4 + 8 + 4;
const ENTRY: usize = 32 + 4;
const CHECKSUM: usize = 16;

/// One chunk of an object, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkRef {
    pub key: Key,
    pub len: u32,
}

/// What a manifest says: the object's length and its chunks in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub len: u64,
    pub chunks: Vec<ChunkRef>,
}

/// Whether a stored value is a manifest.
pub(crate) fn is_manifest(stored: &[u8]) -> bool {
    stored.starts_with(&MAGIC)
}

impl Manifest {
    /// The stored value of the manifest.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + ENTRY * self.chunks.len() + CHECKSUM);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, 0, 0, 0]);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        for chunk in &self.chunks {
            out.extend_from_slice(chunk.key.as_bytes());
            out.extend_from_slice(&chunk.len.to_le_bytes());
        }
        let check = blake3::hash(&out);
        out.extend_from_slice(&check.as_bytes()[..CHECKSUM]);
        out
    }

    /// Parses a stored manifest of an object recorded as `raw_len` bytes; `Err` says what
    /// is wrong with a damaged one.
    pub(crate) fn decode(stored: &[u8], raw_len: i64) -> Result<Manifest, String> {
        let manifest = Manifest::parse(stored)?;
        if i64::try_from(manifest.len).ok() != Some(raw_len) {
            return Err(format!(
                "its manifest's chunks hold {} bytes, and its row records {raw_len}",
                manifest.len
            ));
        }
        Ok(manifest)
    }

    /// Parses a manifest on its own (one from a remote pack, with no row to agree with).
    pub(crate) fn parse(stored: &[u8]) -> Result<Manifest, String> {
        if stored.len() < HEADER + CHECKSUM || !is_manifest(stored) {
            return Err("its manifest is too short".into());
        }
        let (body, check) = stored.split_at(stored.len() - CHECKSUM);
        if blake3::hash(body).as_bytes()[..CHECKSUM] != *check {
            return Err("its manifest fails its checksum".into());
        }
        if body[4] != VERSION {
            return Err(format!("its manifest has unknown version {}", body[4]));
        }
        let len = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(body[16..20].try_into().expect("4 bytes")) as usize;
        let entries = &body[HEADER..];
        if entries.len() != count * ENTRY {
            return Err(format!("its manifest lists {count} chunks in {} bytes", entries.len()));
        }
        let chunks: Vec<ChunkRef> = entries
            .chunks_exact(ENTRY)
            .map(|e| ChunkRef {
                key: Key::from_slice(&e[..32]).expect("32 bytes"),
                len: u32::from_le_bytes(e[32..].try_into().expect("4 bytes")),
            })
            .collect();
        let sum: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
        if sum != len {
            return Err(format!("its manifest's chunks hold {sum} bytes of {len}"));
        }
        Ok(Manifest { len, chunks })
    }

    /// Where each chunk starts in the object.
    pub(crate) fn offsets(&self) -> Vec<u64> {
        let mut at = 0;
        self.chunks
            .iter()
            .map(|c| {
                let start = at;
                at += u64::from(c.len);
                start
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            len: 7,
            chunks: vec![
                ChunkRef { key: Key::of(b"abc"), len: 3 },
                ChunkRef { key: Key::of(b"defg"), len: 4 },
            ],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_says_where_its_chunks_start() {
        let stored = sample().encode();
        assert!(is_manifest(&stored));
        assert_eq!(Manifest::decode(&stored, 7).unwrap(), sample());
        assert_eq!(sample().offsets(), vec![0, 3]);
    }

    #[test]
    fn every_flipped_byte_and_a_wrong_length_are_refused() {
        let stored = sample().encode();
        for at in 0..stored.len() {
            let mut damaged = stored.clone();
            damaged[at] ^= 0x40;
            assert!(Manifest::decode(&damaged, 7).is_err(), "byte {at}");
        }
        assert!(Manifest::decode(&stored, 8).is_err());
        assert!(Manifest::decode(&stored[..10], 7).is_err());
    }

    #[test]
    fn stored_rows_of_either_codec_are_not_manifests() {
        assert!(!is_manifest(&crate::codec::compress(b"OSCM and more", 6)));
        assert!(!is_manifest(&[0x28, 0xb5, 0x2f, 0xfd]));
    }
}
