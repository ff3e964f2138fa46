//! The size report and the integrity report.
//!
//! [`Stats`] comes from the running totals the writer keeps in the database plus the sizes
//! of the files on disk, so it costs no scan; its `Display` is the table users read.

use std::fmt;

use crate::durability::Durability;
use crate::key::Key;
use crate::layout::Layout;

/// Sizes of a stash: what users read to see what the cache costs on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Objects stored.
    pub objects: u64,
    /// Their bytes before compression.
    pub raw_bytes: u64,
    /// Their gzipped bytes, as stored.
    pub stored_bytes: u64,
    /// Bytes of the database files on disk: the main file plus `-wal` and `-journal`.
    pub file_bytes: u64,
    /// How objects are spread over tables.
    pub layout: Layout,
    /// The durability of this handle.
    pub durability: Durability,
}

impl Stats {
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
            "stored (gzip)      {:>16}  {:>10}  {:>8.0} B/object",
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
        writeln!(f, "compression ratio  {:>16.2}  (raw / stored)", self.compression_ratio())?;
        writeln!(
            f,
            "overhead           {:>16.0}  B/object on disk beyond the stored bytes",
            self.overhead_per_object()
        )?;
        write!(f, "layout {}, durability {}", self.layout, self.durability)
    }
}

/// What [`Stash::verify`](crate::Stash::verify) found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Objects read and checked.
    pub checked: u64,
    /// Keys whose stored row does not decompress or does not hash to the key.
    pub corrupt: Vec<Key>,
    /// Damage found beyond single rows: objects missing against the recorded count, or
    /// what SQLite's integrity check reports (an index that lost keys, a truncated file).
    /// The stash's file needs rebuilding: see [`repair`](crate::repair).
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// True when nothing is corrupt and no problem was found.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.corrupt.is_empty() && self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} objects checked, {} corrupt", self.checked, self.corrupt.len())?;
        for key in &self.corrupt {
            write!(f, "\ncorrupt {key}")?;
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
pub fn human(bytes: u64) -> String {
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
            file_bytes: 8192,
            layout: Layout::Bucketed,
            durability: Durability::Safe,
        };
        assert_eq!(stats.compression_ratio(), 3.0);
        assert_eq!(stats.overhead_per_object(), 3596.0);
        let text = stats.to_string();
        assert!(text.contains("compression ratio              3.00"), "{text}");
        assert!(text.contains("layout bucketed, durability safe"), "{text}");
    }
}
