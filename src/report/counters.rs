//! The hit and miss report: what a stash, or one handle, served since counting began.

use std::fmt;
use std::time::SystemTime;

use super::words::age_words;

/// What a stash served, since counting began: is the cache helping? From
/// [`Stash::counters`](crate::Stash::counters) (every process's calls) or
/// [`Stash::handle_counters`](crate::Stash::handle_counters) (this handle's, since it
/// opened). Its `Display` is the table `objstash stats` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// When counting began: when the stash first counted, or was last reset
    /// ([`Stash::reset_counters`](crate::Stash::reset_counters)); for a handle, when it
    /// opened. `None` for a stash that has never counted.
    pub since: Option<SystemTime>,
    /// Keys read (`get`, `get_many`, `get_named`, `read_model`'s objects, `open_reader`)
    /// and served, from the stash or through its remote.
    pub hits: u64,
    /// Keys read and found nowhere (a model `read_model` did not find counts once).
    pub misses: u64,
    /// Of the hits, keys the stash lacked and read through its remote (then stored).
    pub read_throughs: u64,
    /// The bytes of those objects.
    pub read_through_bytes: u64,
    /// Keys asked by `contains` and `missing` that were stored.
    pub found: u64,
    /// Keys asked by `contains` and `missing` that were not: what a caller then fetched or
    /// sent.
    pub absent: u64,
    /// Objects saved that were new.
    pub saved: u64,
    /// Saves of objects already stored: deduplicated, nothing written.
    pub saved_again: u64,
    /// Objects evicted (by the cap or a trim), and their stored bytes. A handle counts
    /// none: evictions are the stash's.
    pub evicted: u64,
    /// The stored bytes of those objects.
    pub evicted_bytes: u64,
}

impl Counters {
    /// Hits over keys read, `None` before any read. What `ccache -s` calls the hit rate.
    #[must_use]
    pub fn hit_rate(&self) -> Option<f64> {
        fraction(self.hits, self.hits + self.misses)
    }

    /// Hits served by the stash itself (not through the remote) over keys read.
    #[must_use]
    pub fn local_hit_rate(&self) -> Option<f64> {
        fraction(self.hits.saturating_sub(self.read_throughs), self.hits + self.misses)
    }

    /// Keys found over keys looked up (`contains`, `missing`), `None` before any lookup.
    #[must_use]
    pub fn found_rate(&self) -> Option<f64> {
        fraction(self.found, self.found + self.absent)
    }

    /// Saves of stored objects over all saves, `None` before any save.
    #[must_use]
    pub fn dedup_rate(&self) -> Option<f64> {
        fraction(self.saved_again, self.saved + self.saved_again)
    }
}

fn fraction(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(since) = self.since else {
            return write!(f, "counting           nothing counted yet");
        };
        let age = SystemTime::now().duration_since(since).unwrap_or_default();
        writeln!(f, "counting since     {:>16}  ago", age_words(age.as_secs()))?;
        let line = |f: &mut fmt::Formatter<'_>, label: &str, part: u64, whole: u64, what: &str| {
            let rate = fraction(part, whole)
                .map_or_else(|| "-".to_string(), |r| format!("{:.2} %", r * 100.0));
            writeln!(f, "{label:<19}{part:>16} / {whole:<12} {rate:>8}  {what}")
        };
        let read = self.hits + self.misses;
        line(f, "hits", self.hits, read, "of keys read")?;
        if self.read_throughs > 0 {
            line(f, "  through remote", self.read_throughs, read, "of keys read")?;
        }
        line(f, "misses", self.misses, read, "of keys read")?;
        line(f, "found", self.found, self.found + self.absent, "of keys looked up")?;
        line(f, "saved again", self.saved_again, self.saved + self.saved_again, "of saves")?;
        write!(f, "saved new          {:>16}", self.saved)?;
        if self.evicted > 0 {
            write!(f, "\nevicted            {:>16}  objects since counting began", self.evicted)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_each_rate_over_its_own_whole() {
        let counters = Counters {
            since: Some(SystemTime::now() - std::time::Duration::from_secs(7200)),
            hits: 90,
            misses: 10,
            read_throughs: 30,
            read_through_bytes: 3000,
            found: 3,
            absent: 1,
            saved: 5,
            saved_again: 15,
            evicted: 2,
            evicted_bytes: 100,
        };
        assert_eq!(counters.hit_rate(), Some(0.9));
        assert_eq!(counters.local_hit_rate(), Some(0.6));
        assert_eq!(counters.found_rate(), Some(0.75));
        assert_eq!(counters.dedup_rate(), Some(0.75));
        let text = counters.to_string();
        assert!(text.contains("counting since                   2h  ago"), "{text}");
        assert!(
            text.contains("hits                             90 / 100           90.00 %"),
            "{text}"
        );
        assert!(
            text.contains("  through remote                 30 / 100           30.00 %"),
            "{text}"
        );
        assert!(
            text.contains("found                             3 / 4             75.00 %"),
            "{text}"
        );
        assert!(text.contains("evicted                           2"), "{text}");
        assert_eq!(Counters::default().hit_rate(), None);
        assert_eq!(Counters::default().to_string(), "counting           nothing counted yet");
    }
}
