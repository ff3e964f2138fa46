//! The size report and the integrity report.
//!
//! [`Stats`] comes from the running totals the writer keeps in the database plus the sizes
//! of the files on disk, so it costs no scan; its `Display` is the table users read.

use std::fmt;
use std::time::SystemTime;

use super::counters::Counters;
use super::words::age_words;
use crate::codec::Codec;
use crate::key::Key;
use crate::settings::durability::Durability;
use crate::settings::layout::Layout;

/// Sizes of a stash: what users read to see what the cache costs on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Objects stored.
    pub objects: u64,
    /// Their bytes before compression.
    pub raw_bytes: u64,
    /// Their compressed bytes, as stored (gzip, or zstd with a dictionary), chunks of large
    /// objects included.
    pub stored_bytes: u64,
    /// Chunks of large objects (`Stash::save_reader`): each stored once however many
    /// objects hold it.
    pub chunks: u64,
    /// Their stored bytes (part of [`Stats::stored_bytes`]).
    pub chunk_bytes: u64,
    /// Bytes of the database files on disk: the main file plus `-wal` and `-journal`.
    pub file_bytes: u64,
    /// How objects are spread over tables.
    pub layout: Layout,
    /// The durability the stash records.
    pub durability: Durability,
    /// The codec of new objects, as the stash records it.
    pub codec: Codec,
    /// Zstd dictionaries stored (see [`Codec::ZstdDict`](crate::Codec)); 0 for a gzip stash.
    pub dictionaries: usize,
    /// Names saved with [`Stash::save_named`](crate::Stash::save_named).
    pub names: u64,
    /// The size cap the stash records ([`Stash::set_max_size`](crate::Stash::set_max_size)),
    /// compared with [`Stats::file_bytes`].
    pub max_size: Option<u64>,
    /// Pinned objects ([`Stash::pin`](crate::Stash::pin)): never evicted.
    pub pinned_objects: u64,
    /// Their stored bytes, which count toward the cap.
    pub pinned_bytes: u64,
    /// Objects evicted since the stash was made (by its cap or a trim).
    pub evicted_objects: u64,
    /// Their stored bytes.
    pub evicted_bytes: u64,
    /// The earliest last use of an unpinned object: what the next eviction takes first.
    /// `None` for a stash without unpinned objects, one that has never evicted nor had a
    /// cap (uses are indexed from then on), or one made by an older version and opened
    /// read-only.
    pub oldest_use: Option<SystemTime>,
    /// What the stash served since counting began: hits, misses, saves, as the stash has
    /// recorded them. A report writes nothing, so this handle's latest calls arrive with its
    /// writer's next commit (within about a second); [`Stash::counters`](crate::Stash::counters)
    /// records them first.
    pub counters: Counters,
}

impl Stats {
    /// Whether the database files are over the cap: pinned and recently used objects alone
    /// exceed it (they are never evicted), or an eviction is under way.
    #[must_use]
    pub fn over_cap(&self) -> bool {
        self.max_size.is_some_and(|cap| self.file_bytes > cap)
    }

    /// Raw bytes over stored bytes (how much gzip saves); 1.0 for an empty stash.
    #[must_use]
    pub fn compression_ratio(&self) -> f64 {
        ratio(self.raw_bytes, self.stored_bytes)
    }

    /// Bytes on disk beyond the stored objects, per object: what the table and the key
    /// index cost. 0 for an empty stash.
    #[must_use]
    pub fn overhead_per_object(&self) -> f64 {
        if self.objects == 0 {
            return 0.0;
        }
        (self.file_bytes as f64 - self.stored_bytes as f64) / self.objects as f64
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_object = |bytes: u64| {
            if self.objects == 0 { 0.0 } else { bytes as f64 / self.objects as f64 }
        };
        writeln!(f, "objects            {:>16}", self.objects)?;
        writeln!(
            f,
            "raw bytes          {:>16}  {:>10}  {:>8.0} B/object",
            self.raw_bytes,
            human(self.raw_bytes),
            per_object(self.raw_bytes)
        )?;
        writeln!(
            f,
            "stored             {:>16}  {:>10}  {:>8.0} B/object",
            self.stored_bytes,
            human(self.stored_bytes),
            per_object(self.stored_bytes)
        )?;
        writeln!(
            f,
            "database files     {:>16}  {:>10}  {:>8.0} B/object",
            self.file_bytes,
            human(self.file_bytes),
            per_object(self.file_bytes)
        )?;
        if self.chunks > 0 {
            writeln!(
                f,
                "chunks             {:>16}  {:>10}  of large objects",
                self.chunks,
                human(self.chunk_bytes)
            )?;
        }
        if self.names > 0 {
            writeln!(f, "names              {:>16}", self.names)?;
        }
        if let Some(cap) = self.max_size {
            let state = if self.over_cap() {
                if self.pinned_bytes >= cap {
                    "  OVER: pinned objects alone exceed it"
                } else {
                    "  OVER: eviction under way, or recent objects exceed it"
                }
            } else {
                ""
            };
            writeln!(f, "size cap           {:>16}  {:>10}{state}", cap, human(cap))?;
        }
        if self.pinned_objects > 0 {
            writeln!(
                f,
                "pinned             {:>16}  {:>10}  objects, stored bytes",
                self.pinned_objects,
                human(self.pinned_bytes)
            )?;
        }
        if self.evicted_objects > 0 {
            writeln!(
                f,
                "evicted            {:>16}  {:>10}  objects, stored bytes, since creation",
                self.evicted_objects,
                human(self.evicted_bytes)
            )?;
        }
        if let Some(oldest) = self.oldest_use {
            let age = SystemTime::now().duration_since(oldest).unwrap_or_default();
            writeln!(f, "oldest use         {:>16}  ago", age_words(age.as_secs()))?;
        }
        writeln!(f, "compression ratio  {:>16.2}  (raw / stored)", self.compression_ratio())?;
        writeln!(
            f,
            "overhead           {:>16.0}  B/object on disk beyond the stored bytes",
            self.overhead_per_object()
        )?;
        write!(f, "layout {}, durability {}, codec {}", self.layout, self.durability, self.codec)?;
        if self.dictionaries > 0 {
            write!(f, ", {} zstd dictionaries", self.dictionaries)?;
        }
        write!(f, "\n\n{}", self.counters)
    }
}

/// What an eviction ([`Stash::trim_to`](crate::Stash::trim_to),
/// [`Stash::evict_unused_since`](crate::Stash::evict_unused_since)) took out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Evicted {
    /// Objects evicted.
    pub objects: u64,
    /// Their stored bytes.
    pub stored_bytes: u64,
}

impl fmt::Display for Evicted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "evicted {} objects ({} stored)", self.objects, human(self.stored_bytes))
    }
}

/// What [`Stash::verify`](crate::Stash::verify) found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Objects read and checked.
    pub checked: u64,
    /// Names counted (each checked to point to a stored object).
    pub names: u64,
    /// Keys whose stored row does not decompress or does not hash to the key. A row whose
    /// key bytes are damaged as well is listed under the key it holds (its true key is
    /// nowhere in the file), and a `get` of the true key finds nothing.
    pub corrupt: Vec<Key>,
    /// Keys whose row is intact but that the key index does not find (damage to index
    /// pages): `get` answers `None` for them; [`repair`](crate::repair) brings them back.
    pub unreachable: Vec<Key>,
    /// Damaged rows found on the file's pages whose key bytes cannot be trusted, so they
    /// are counted here instead of named. Only looked for once other damage is found.
    pub unnamed: u64,
    /// Chunks of large objects read and checked.
    pub chunks: u64,
    /// Chunks no object lists yet: of large saves under way, or of saves killed before
    /// they finished, which the next open alone with the stash gives back. Not damage.
    pub pending_chunks: u64,
    /// Damage found beyond single rows: objects missing against the recorded count, or
    /// what SQLite's integrity check reports (an index that lost keys, a truncated file).
    /// The stash's file needs rebuilding: see [`repair`](crate::repair).
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// True when nothing is corrupt and no problem was found.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.corrupt.is_empty()
            && self.unreachable.is_empty()
            && self.unnamed == 0
            && self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} objects checked, {} corrupt, {} unreachable",
            self.checked,
            self.corrupt.len(),
            self.unreachable.len()
        )?;
        if self.chunks > 0 {
            write!(f, ", {} chunks checked", self.chunks)?;
        }
        if self.pending_chunks > 0 {
            write!(f, " ({} of unfinished saves)", self.pending_chunks)?;
        }
        if self.unnamed > 0 {
            write!(f, ", {} damaged rows with untrustworthy keys", self.unnamed)?;
        }
        for key in &self.corrupt {
            write!(f, "\ncorrupt {key}")?;
        }
        for key in &self.unreachable {
            write!(f, "\nunreachable {key}")?;
        }
        for problem in &self.problems {
            write!(f, "\nproblem: {problem}")?;
        }
        Ok(())
    }
}

pub(crate) fn ratio(raw: u64, stored: u64) -> f64 {
    if stored == 0 { 1.0 } else { raw as f64 / stored as f64 }
}

/// Bytes in binary units with one decimal: `1.5 MiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
    }

    #[test]
    fn report_reads_right() {
        let stats = Stats {
            objects: 2,
            raw_bytes: 3000,
            stored_bytes: 1000,
            chunks: 0,
            chunk_bytes: 0,
            file_bytes: 8192,
            layout: Layout::Bucketed,
            durability: Durability::Safe,
            codec: Codec::ZstdDict,
            dictionaries: 1,
            names: 5,
            max_size: Some(4096),
            pinned_objects: 1,
            pinned_bytes: 500,
            evicted_objects: 7,
            evicted_bytes: 2100,
            oldest_use: Some(SystemTime::now() - std::time::Duration::from_secs(3 * 86_400)),
            counters: Counters::default(),
        };
        assert_eq!(stats.compression_ratio(), 3.0);
        assert!(stats.over_cap());
        assert_eq!(stats.overhead_per_object(), 3596.0);
        let text = stats.to_string();
        assert!(text.contains("compression ratio              3.00"), "{text}");
        assert!(text.contains("names                             5"), "{text}");
        assert!(text.contains("size cap                       4096     4.0 KiB  OVER"), "{text}");
        assert!(text.contains("evicted                           7"), "{text}");
        assert!(text.contains("oldest use                       3d  ago"), "{text}");
        assert!(
            text.contains("layout bucketed, durability safe, codec zstd-dict, 1 zstd dictionaries"),
            "{text}"
        );
    }
}
