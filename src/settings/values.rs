//! Where a stash keeps its objects' stored bytes: in their rows, or in a file beside the
//! database (`value_log.rs`).
//!
//! Chosen when a stash is created and told by its tables from then on: a stash made with
//! its values in a file has a `place` column in every object table.

use std::fmt;
use std::str::FromStr;

use crate::settings::parse::ParseSettingError;
use crate::values::value_log;

/// Where the stored bytes of a new stash's objects go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Values {
    /// In each object's row, in the database file. The default.
    #[default]
    InRows,
    /// Appended to a file beside the database (`<stash>-values`), each row holding the
    /// place of its bytes there: the database stays about 116 bytes an object, small enough
    /// for a reader to map whole, and a read copies only the object's own bytes. Rows of a
    /// megabyte or more and the manifests of large objects stay in their rows.
    InFile,
}

impl Values {
    /// The SQL of a row's stored length.
    pub(crate) fn stored_len_sql(self) -> &'static str {
        match self {
            Values::InRows => "length(data)",
            Values::InFile => value_log::STORED_LEN_SQL,
        }
    }

    /// The SQL of a row's place in the file of values (`NULL` where there is none).
    pub(crate) fn place_sql(self) -> &'static str {
        match self {
            Values::InRows => "NULL",
            Values::InFile => "place",
        }
    }
}

impl Values {
    /// The word accepted by [`Values::from_str`]: `rows` or `file`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Values::InRows => "rows",
            Values::InFile => "file",
        }
    }
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Values {
    type Err = ParseSettingError;

    /// Parses `rows` or `file`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rows" => Ok(Values::InRows),
            "file" => Ok(Values::InFile),
            other => Err(ParseSettingError::new("values", other, "rows or file")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for v in [Values::InRows, Values::InFile] {
            assert_eq!(v.as_str().parse::<Values>().unwrap(), v);
        }
        assert!("File".parse::<Values>().is_err());
    }
}
