//! How an object table finds a row by its key: a unique index on the whole key (formats 1
//! to 4), or an index on its first 8 bytes (format 5). `schema.rs` writes the statements
//! of each; measured in notes/performance.md.

/// How an object table finds a row by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyIndex {
    /// A unique index on the 32-byte key (formats 1 to 4).
    Full,
    /// An index on the key's first 8 bytes, `substr(key, 1, 8)` (format 5): a third of the
    /// full index's bytes, so more of it stays in the cache as the table grows. Two keys
    /// may share a prefix: every lookup also compares the key in the row, and an insert
    /// looks the key up first (the writer is the only one inserting, in its transaction).
    Prefix,
}

impl KeyIndex {
    /// The expression the index orders rows by.
    pub(crate) fn indexed(self) -> &'static str {
        match self {
            KeyIndex::Full => "key",
            KeyIndex::Prefix => "substr(key, 1, 8)",
        }
    }

    /// The name of `table`'s key index.
    pub(crate) fn index_name(self, table: &str) -> String {
        match self {
            KeyIndex::Full => format!("{table}_key"),
            KeyIndex::Prefix => format!("{table}_prefix"),
        }
    }

    /// A condition that holds for the row whose key is the parameter `param` (`?1`), and
    /// that the index answers.
    pub(crate) fn matches(self, param: &str) -> String {
        match self {
            KeyIndex::Full => format!("key = {param}"),
            KeyIndex::Prefix => {
                format!("substr(key, 1, 8) = substr({param}, 1, 8) AND key = {param}")
            }
        }
    }
}
