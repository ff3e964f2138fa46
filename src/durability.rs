//! What a stash promises about acknowledged writes, and the SQLite settings that keep it.
//!
//! The writer connection applies [`Durability::pragmas`] when it opens; the promise of
//! each mode is stated on its variant and measured in notes/performance.md. Both modes
//! use a write-ahead log, which is what lets processes share a stash and survive each
//! other's kills; they differ in whether commits wait for the disk.

use std::fmt;
use std::str::FromStr;

use crate::parse::ParseSettingError;

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
}

impl Durability {
    /// The `journal_mode` and `synchronous` settings of the writer connection.
    pub(crate) fn pragmas(self) -> (&'static str, &'static str) {
        match self {
            Durability::Fast => ("WAL", "OFF"),
            Durability::Safe => ("WAL", "FULL"),
        }
    }

    /// The word accepted by [`Durability::from_str`].
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Fast => "fast",
            Durability::Safe => "safe",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = ParseSettingError;

    /// Parses `fast` or `safe`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fast" => Ok(Durability::Fast),
            "safe" => Ok(Durability::Safe),
            other => Err(ParseSettingError::new("durability", other, "fast or safe")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for d in [Durability::Fast, Durability::Safe] {
            assert_eq!(d.to_string().parse::<Durability>().unwrap(), d);
        }
        assert!("unsafe".parse::<Durability>().is_err());
    }
}
