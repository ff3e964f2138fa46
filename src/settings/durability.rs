//! What a stash promises about acknowledged writes, and the SQLite settings that keep it.
//!
//! The writer connection applies [`Durability::pragmas`] when it opens; the promise of
//! each mode is stated on its variant and measured in notes/performance.md. Fast and Safe
//! use a write-ahead log, which is what lets processes share a stash and survive each
//! other's kills; they differ in whether commits wait for the disk. Owned is the tuning of
//! a stash one process owns: an in-memory rollback journal, no sharing.

use crate::settings::parse::words;

/// What a stash promises about acknowledged writes when the process or machine stops.
///
/// See the crate documentation's *Durability* section for the exact promises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// `journal_mode=WAL`, `synchronous=OFF`: the fastest. A killed process loses only
    /// what it had not committed; a power loss or OS crash can lose recent writes and can
    /// damage the file, which the next open detects and rebuilds from every object that
    /// still verifies. The default.
    #[default]
    Fast,
    /// `journal_mode=WAL`, `synchronous=FULL`: every write acknowledged by `flush` survives
    /// a process kill or a power loss.
    Safe,
    /// `journal_mode=MEMORY`, `synchronous=OFF`, and the stash owned by one handle: no
    /// other handle, in this process or another, opens it meanwhile
    /// ([`Error::Owned`](crate::Error::Owned)). No write-ahead log: each commit writes the
    /// database pages in place, with its rollback journal in memory. A killed process can
    /// leave a commit half-written and the file damaged; the next open checks it and
    /// rebuilds it from every object that verifies, and its [`RecoveryReport`] counts
    /// what was lost (acknowledged objects included). For a cache one process fills and
    /// that can be fetched again.
    ///
    /// [`RecoveryReport`]: crate::RecoveryReport
    Owned,
}

impl Durability {
    /// The `journal_mode` and `synchronous` settings of the writer connection.
    pub(crate) fn pragmas(self) -> (&'static str, &'static str) {
        match self {
            Durability::Fast => ("WAL", "OFF"),
            Durability::Safe => ("WAL", "FULL"),
            Durability::Owned => ("MEMORY", "OFF"),
        }
    }

    /// Whether one handle owns the stash (no other may open it meanwhile).
    pub(crate) fn owned(self) -> bool {
        self == Durability::Owned
    }
}

words!(Durability, "durability", "fast, safe or owned", {
    Fast => "fast",
    Safe => "safe",
    Owned => "owned",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for d in [Durability::Fast, Durability::Safe, Durability::Owned] {
            assert_eq!(d.to_string().parse::<Durability>().unwrap(), d);
        }
        assert!("unsafe".parse::<Durability>().is_err());
    }
}
