//! The writer's filter of stored key prefixes (format 7, `key_index.rs`).
//!
//! Every row the writer inserts is first looked up, and a new key (nearly every key) costs
//! a descent of the young and of the old index; the old one outgrows the cache (at ten
//! million objects a third of the writer's time, most of it reading index pages back from
//! the OS, notes/experiments.md). The writer keeps a Bloom filter of the prefixes the two
//! indexes hold, and reads an index only when the filter may hold the key's prefix, or
//! when the filter may have missed keys that went into it.
//!
//! What can make the filter miss a key, and what the writer does about it:
//! - **Its own inserts** go into the filter as they are made ([`TableSql::add`]).
//! - **Another connection's inserts** go into the young index. SQLite's `data_version`
//!   changes when another connection commits; from then the young index is read for every
//!   key ([`KeyFilter::young_exact`]) until the filter is built again.
//! - **Moves into the old index**: since format 7 every move counts itself in the meta
//!   table (`old_moves`) in its own transaction, and a writer adds what it moves to its
//!   own filter. A filter that has missed a move (another writer's, whose keys it may not
//!   have seen in the young index) is dropped. Writers of format 6 and older, which move
//!   without counting, stop at their next transaction once a stash is format 7
//!   (`Writer::begin`).
//!
//! The writer checks both at the start of each write transaction, under the write lock.
//! Keys that leave leave false positives, which only cost a read.
//!
//! [`TableSql::add`]: crate::db::schema::TableSql::add

use rusqlite::Connection;

use crate::db::key_index::GENERATIONS;
use crate::key::Key;

/// The meta table's count of moves into the old index.
pub(crate) const MOVES: &str = "old_moves";
/// New rows a writer writes with no other connection committing before a filter is worth
/// building: building reads both indexes once (about a second at ten million objects).
/// At least this many, and a twentieth of the stash.
pub(crate) const WORTH_ROWS: u64 = 10_000;
/// Bits per prefix: with [`MAX_PROBES`] probes, about 1% of new keys still read the
/// indexes.
const BITS_PER_KEY: u64 = 10;
const MAX_PROBES: u64 = 7;
/// The fewest prefixes a filter is sized for.
const MIN_KEYS: u64 = 1 << 20;
/// The most bits a filter takes (16 MiB, as much as the writer's page cache), so that the
/// writer's memory stops growing with the stash: past 13.4 million prefixes a filter holds
/// fewer than [`BITS_PER_KEY`] bits a prefix and probes fewer bits, and more new keys read
/// the indexes (about 5% at 20 million, a third at 60 million; each such read is what every
/// key cost without a filter).
const MAX_BITS: u64 = 16 << 23;

/// A Bloom filter of the key indexes' prefixes, and what it has seen of the stash.
#[derive(Debug)]
pub(crate) struct KeyFilter {
    words: Vec<u64>,
    bits: u64,
    /// Bits set and tested a prefix: fewer when the bits are capped.
    probes: u64,
    /// Prefixes added, and how many it was sized for: past that it is built again, larger
    /// (or, at [`MAX_BITS`], with fewer probes).
    keys: u64,
    capacity: u64,
    /// The meta table's move count when the filter last matched the old index.
    pub(crate) moves: u64,
    /// Whether the filter holds every prefix of the young index: true when built, cleared
    /// for good when another connection commits (the writer sees SQLite's `data_version`
    /// change).
    pub(crate) young_exact: bool,
}

/// Which indexes a lookup of a key reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lookup {
    pub young: bool,
    pub old: bool,
}

impl Lookup {
    /// Both indexes: without a filter.
    pub(crate) const BOTH: Lookup = Lookup { young: true, old: true };
}

impl KeyFilter {
    /// An empty filter sized for `capacity` prefixes.
    fn with_capacity(capacity: u64, moves: u64) -> Self {
        KeyFilter::within(capacity, MAX_BITS, moves)
    }

    /// An empty filter sized for `capacity` prefixes in at most `max_bits` bits.
    fn within(capacity: u64, max_bits: u64, moves: u64) -> Self {
        let capacity = capacity.max(MIN_KEYS);
        let bits = (capacity * BITS_PER_KEY).min(max_bits);
        KeyFilter {
            words: vec![0; bits.div_ceil(64) as usize],
            bits,
            probes: probes_for(bits, capacity),
            keys: 0,
            capacity,
            moves,
            young_exact: true,
        }
    }

    /// Reads every prefix of both indexes on `conn`, inside the caller's write transaction,
    /// whose move count is `moves`; sized for half as many again as `objects` (the stash's
    /// count).
    pub(crate) fn build(conn: &Connection, objects: u64, moves: u64) -> rusqlite::Result<Self> {
        let mut filter = KeyFilter::with_capacity(objects + objects / 2, moves);
        for generation in GENERATIONS {
            let mut stmt = conn.prepare(&format!("SELECT prefix FROM {generation}"))?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                filter.insert(row.get_ref(0)?.as_blob()?);
            }
        }
        Ok(filter)
    }

    /// Whether more prefixes were added than the filter was sized for.
    pub(crate) fn full(&self) -> bool {
        self.keys > self.capacity
    }

    /// Adds the prefix of a key an index now holds.
    pub(crate) fn insert(&mut self, prefix: &[u8]) {
        let bits = self.bits;
        for bit in probes(prefix, bits, self.probes) {
            self.words[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        self.keys += 1;
    }

    /// Whether an index may hold a key of `key`'s prefix (false: neither holds one, as far
    /// as the filter has seen).
    pub(crate) fn may_hold(&self, key: &Key) -> bool {
        probes(&key.as_bytes()[..8], self.bits, self.probes)
            .all(|bit| self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }

    /// Which indexes a lookup of `key` must read.
    pub(crate) fn lookup(&self, key: &Key) -> Lookup {
        if self.may_hold(key) {
            Lookup::BOTH
        } else {
            Lookup { young: !self.young_exact, old: false }
        }
    }
}

/// The probes that make the fewest false positives for `capacity` prefixes in `bits` bits
/// (`bits / capacity` times ln 2), at most [`MAX_PROBES`].
fn probes_for(bits: u64, capacity: u64) -> u64 {
    let best = (bits as f64 / capacity as f64 * std::f64::consts::LN_2).round() as u64;
    best.clamp(1, MAX_PROBES)
}

/// The `count` bits of a prefix (the first 8 bytes of a blake3 key, or fewer of a damaged one):
/// double hashing of the prefix, mixed, each mapped onto `bits` by a multiply.
fn probes(prefix: &[u8], bits: u64, count: u64) -> impl Iterator<Item = u64> {
    let mut word = [0u8; 8];
    let n = prefix.len().min(8);
    word[..n].copy_from_slice(&prefix[..n]);
    let x = u64::from_be_bytes(word);
    let h1 = mix(x);
    let h2 = mix(x ^ 0x9E37_79B9_7F4A_7C15) | 1;
    (0..count).map(move |i| {
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
        let mut filter = KeyFilter::with_capacity(100_000, 0);
        for i in 0..100_000 {
            filter.insert(&key(i).as_bytes()[..8]);
        }
        assert!((0..100_000).all(|i| filter.lookup(&key(i)) == Lookup::BOTH));
        assert!(!filter.full());
        let others = (100_000..1_100_000).filter(|&i| filter.may_hold(&key(i))).count();
        // Sized for 2^20 prefixes and holding 100,000: far fewer than 1% false positives.
        assert!(others < 1_000, "{others} false positives in 1,000,000");
        let absent = (2_000_000..).map(key).find(|k| !filter.may_hold(k)).unwrap();
        assert_eq!(filter.lookup(&absent), Lookup { young: false, old: false });
        // Once another connection has committed, the young index is read for every key.
        filter.young_exact = false;
        assert_eq!(filter.lookup(&absent), Lookup { young: true, old: false });
    }

    #[test]
    fn stops_growing_at_its_bits() {
        let filter = KeyFilter::with_capacity(100_000_000, 0);
        assert_eq!(filter.bits, MAX_BITS);
        assert_eq!(filter.words.len() as u64 * 64, MAX_BITS);
        // 1.34 bits a prefix: one probe makes the fewest false positives.
        assert_eq!(filter.probes, 1);
        assert_eq!(KeyFilter::with_capacity(20_000_000, 0).probes, 5);
        assert_eq!(KeyFilter::with_capacity(0, 0).probes, MAX_PROBES);
    }

    #[test]
    fn a_capped_filter_holds_every_prefix_added() {
        // Far fewer bits than its prefixes want: 2^20 prefixes in 2^22 bits, 4 bits each.
        let mut filter = KeyFilter::within(0, 1 << 22, 0);
        assert_eq!(filter.probes, 3);
        for i in 0..MIN_KEYS {
            filter.insert(&key(i).as_bytes()[..8]);
        }
        assert!((0..MIN_KEYS).all(|i| filter.may_hold(&key(i))));
        let others = (MIN_KEYS..MIN_KEYS + 100_000).filter(|&i| filter.may_hold(&key(i))).count();
        // 4 bits a prefix, three probes: about 15% of the others.
        assert!((10_000..20_000).contains(&others), "{others} false positives in 100,000");
    }

    #[test]
    fn is_full_past_its_capacity() {
        let mut filter = KeyFilter::with_capacity(0, 0);
        for i in 0..=MIN_KEYS {
            filter.insert(&key(i).as_bytes()[..8]);
        }
        assert!(filter.full());
    }
}
