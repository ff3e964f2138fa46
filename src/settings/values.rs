//! Where a stash keeps its objects' stored bytes: in their rows, or in a file beside the
//! database (`values/`).
//!
//! Chosen when a stash is created and told by its tables from then on: a stash made with
//! its values in a file has a `place` column in every object table.

use crate::settings::parse::words;

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

words!(Values, "values", "rows or file", {
    InRows => "rows",
    InFile => "file",
});

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
