//! The writer's filter of the old key index (format 7, `key_index.rs`).
//!
//! Every row the writer inserts is first looked up, and a new key (nearly every key) costs
//! a descent of the old index, which outgrows the cache: at ten million objects a third of
//! the writer's time, most of it reading index pages back from the OS (notes/performance.md).
//! The writer keeps a Bloom filter of the prefixes the old index holds and reads the old
//! index only for a prefix the filter may hold; the young index, small and in the cache,
//! is always read.
//!
//! Keys enter the old index only through moves (`writer/generations.rs`), and since format
//! 7 every move counts itself in the meta table (`old_moves`) in its own transaction, and
//! adds what it moves to its writer's filter. A filter is used only inside a write
//! transaction of a format 7 stash whose count is the one the filter has seen: a move by
//! another process's writer changes the count, and the filter is built again. Writers of
//! format 6 and older, which move without counting, stop at their next transaction once a
//! stash is format 7 (`Writer::begin`). Keys leaving the old index leave the filter with
//! false positives, which only cost a read.

use rusqlite::Connection;

use crate::key::Key;
use crate::key_index::OLD;

/// The format of a stash whose moves into the old index are counted.
pub(crate) const FORMAT_VERSION: i64 = 7;
/// The meta table's count of moves into the old index.
pub(crate) const MOVES: &str = "old_moves";
/// Rows a write transaction brings before a filter is worth building for it: building reads
/// the whole old index once (about a second at ten million objects).
pub(crate) const WORTH_ROWS: u64 = 10_000;
/// Bits per prefix: with [`PROBES`] probes, about 1% of new keys still read the old index.
const BITS_PER_KEY: u64 = 10;
const PROBES: u64 = 7;
/// The fewest prefixes a filter is sized for.
const MIN_KEYS: u64 = 1 << 20;

/// A Bloom filter of the old index's prefixes, and the move count it reflects.
#[derive(Debug)]
pub(crate) struct OldFilter {
    words: Vec<u64>,
    bits: u64,
    /// Prefixes added, and how many it was sized for: past that it is built again, larger.
    keys: u64,
    capacity: u64,
    /// The meta table's move count when the filter last matched the old index.
    pub(crate) moves: u64,
}

impl OldFilter {
    /// An empty filter sized for `capacity` prefixes.
    fn with_capacity(capacity: u64, moves: u64) -> Self {
        let capacity = capacity.max(MIN_KEYS);
        let bits = capacity * BITS_PER_KEY;
        OldFilter { words: vec![0; bits.div_ceil(64) as usize], bits, keys: 0, capacity, moves }
    }

    /// Reads every prefix of the old index on `conn` (inside the caller's transaction, whose
    /// move count is `moves`), sized for half as many again as `objects` (the stash's count).
    pub(crate) fn build(conn: &Connection, objects: u64, moves: u64) -> rusqlite::Result<Self> {
        let mut filter = OldFilter::with_capacity(objects + objects / 2, moves);
        let mut stmt = conn.prepare(&format!("SELECT prefix FROM {OLD}"))?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let prefix = row.get_ref(0)?.as_blob()?;
            filter.insert(prefix);
        }
        Ok(filter)
    }

    /// Whether more prefixes were added than the filter was sized for.
    pub(crate) fn full(&self) -> bool {
        self.keys > self.capacity
    }

    /// Adds the prefix of a key the old index now holds.
    pub(crate) fn insert(&mut self, prefix: &[u8]) {
        let bits = self.bits;
        for bit in probes(prefix, bits) {
            self.words[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        self.keys += 1;
    }

    /// Whether the old index may hold a key of `key`'s prefix (false: it holds none).
    pub(crate) fn may_hold(&self, key: &Key) -> bool {
        probes(&key.as_bytes()[..8], self.bits)
            .all(|bit| self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }
}

/// The bits of a prefix (the first 8 bytes of a blake3 key, or fewer of a damaged one):
/// double hashing of the prefix, mixed, each mapped onto `bits` by a multiply.
fn probes(prefix: &[u8], bits: u64) -> impl Iterator<Item = u64> {
    let mut word = [0u8; 8];
    let n = prefix.len().min(8);
    word[..n].copy_from_slice(&prefix[..n]);
    let x = u64::from_be_bytes(word);
    let h1 = mix(x);
    let h2 = mix(x ^ 0x9E37_79B9_7F4A_7C15) | 1;
    (0..PROBES).map(move |i| {
        let h = h1.wrapping_add(i.wrapping_mul(h2));
        ((u128::from(h) * u128::from(bits)) >> 64) as u64
    })
}

/// A 64-bit finalizer (splitmix64's): prefixes of real keys are random, of test keys not.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Key {
        Key::of(&i.to_le_bytes())
    }

    #[test]
    fn holds_every_prefix_added_and_few_others() {
        let mut filter = OldFilter::with_capacity(100_000, 0);
        for i in 0..100_000 {
            filter.insert(&key(i).as_bytes()[..8]);
        }
        assert!((0..100_000).all(|i| filter.may_hold(&key(i))));
        assert!(!filter.full());
        let others = (100_000..1_100_000).filter(|&i| filter.may_hold(&key(i))).count();
        // Sized for 2^20 prefixes and holding 100,000: far fewer than 1% false positives.
        assert!(others < 1_000, "{others} false positives in 1,000,000");
    }

    #[test]
    fn is_full_past_its_capacity() {
        let mut filter = OldFilter::with_capacity(0, 0);
        for i in 0..=MIN_KEYS {
            filter.insert(&key(i).as_bytes()[..8]);
        }
        assert!(filter.full());
    }
}
