//! How an object table finds a row by its key, and the SQL of each way.
//!
//! Formats 1 to 4 keep a unique index on the whole 32-byte key: a random B-tree that a
//! stash of ten million objects holds in ~480 MB of pages, each commit rewriting every page
//! its batch touched. Format 5 keeps **generations**: a row's key prefix (its first 8
//! bytes) and rowid go into a small young index, `(prefix, id)`, which stays in the
//! cache (one young and one old index for all the tables of a stash: in the bucketed
//! layout a prefix's first byte names its table, so `(prefix, id)` is unique); once it holds enough keys the writer moves them into the old index in slices of
//! the key space, one transaction each (`writer/generations.rs`), so each page of the old
//! index is rewritten once per slice rather than once per few batches. Every insert and
//! delete of a row goes through `TableSql::add` and `TableSql::unindex`, which keep the
//! indexes in step. A
//! lookup reads the rowids of the key's prefix in the young and the old index, and
//! compares the full key in the row (two keys may share a prefix). Measured in notes/experiments.md.

use crate::db::first_generation::Generation;

/// How an object table finds a row by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyIndex {
    /// A unique index on the 32-byte key (formats 1 to 4).
    Full,
    /// A young and an old index of key prefixes and rowids (format 5).
    Generations,
}

/// The two indexes of a stash with generations, youngest first.
pub(crate) const GENERATIONS: [&str; 2] = [YOUNG, OLD];
/// The young index: `(prefix, id)`.
pub(crate) const YOUNG: &str = "objstash_young";
/// The old index.
pub(crate) const OLD: &str = "objstash_old";
/// Adds the row of key `?1` at rowid `?2` to the young index.
pub(crate) const INDEX: &str =
    "INSERT INTO objstash_young(prefix, id) VALUES (substr(?1, 1, 8), ?2)";
/// The rowids of the rows whose keys begin with the 8-byte prefix `?1`, in each index:
/// for a key not stored, one descent of each index and no read of the table.
pub(crate) const PREFIX_IDS: [&str; 2] = [
    "SELECT id FROM objstash_young WHERE prefix = ?1",
    "SELECT id FROM objstash_old WHERE prefix = ?1",
];
/// Takes the row of key `?1` at rowid `?2` out of either index.
pub(crate) const UNINDEX: [&str; 2] = [
    "DELETE FROM objstash_young WHERE prefix = substr(?1, 1, 8) AND id = ?2",
    "DELETE FROM objstash_old WHERE prefix = substr(?1, 1, 8) AND id = ?2",
];

impl KeyIndex {
    /// The SQL that makes the key index of `table`.
    pub(crate) fn create(self, table: &str) -> String {
        match self {
            KeyIndex::Full => format!("CREATE UNIQUE INDEX {table}_key ON {table}(key);\n"),
            KeyIndex::Generations => GENERATIONS
                .map(|generation| {
                    format!(
                        "CREATE TABLE IF NOT EXISTS {generation}(prefix BLOB NOT NULL, \
                         id INTEGER NOT NULL, PRIMARY KEY(prefix, id)) WITHOUT ROWID;\n"
                    )
                })
                .concat(),
        }
    }

    /// The type and name of a schema object that only this way has, to tell which way a
    /// stash's `table` uses.
    pub(crate) fn marker(self, table: &str) -> (&'static str, String) {
        match self {
            KeyIndex::Full => ("index", format!("{table}_key")),
            KeyIndex::Generations => ("table", YOUNG.to_string()),
        }
    }

    /// A condition on the rows of `table` that holds for the row whose key is the
    /// parameter `param` (`?1`), and that the key index answers. (A join of the indexes to
    /// the table would read the row once, not twice, but SQLite compiles a join again
    /// whenever its tables have changed since the last run: every lookup of a writer.)
    pub(crate) fn matches(self, param: &str) -> String {
        match self {
            KeyIndex::Full => format!("key = {param}"),
            KeyIndex::Generations => {
                let ids = GENERATIONS.map(|generation| prefix_entries(generation, "id", param));
                format!("rowid IN ({} UNION ALL {}) AND key = {param}", ids[0], ids[1])
            }
        }
    }

    /// A query of `columns` of the row of `table` whose key is `?1`: for a key that is
    /// stored, the cheapest. With generations, the first rowid of the key's prefix in the
    /// index `first`, then in the other (a scalar subquery: no temporary table for the
    /// rowids, as `IN` builds; `get` 1.15x), then every rowid of the prefix, which only a
    /// key whose prefix another key shares, or a key not stored, gets to. `first` is the
    /// index asked first (`first_generation.rs`). After `columns`, one more names the way
    /// the row was found: a [`Generation`] as its number, or 2 for neither way first.
    pub(crate) fn select(self, table: &str, columns: &str, first: Generation) -> String {
        let every = format!("SELECT {columns}, 2 FROM {table} WHERE {}", self.matches("?1"));
        match self {
            KeyIndex::Full => every,
            KeyIndex::Generations => {
                let by = |generation: Generation| {
                    let index = GENERATIONS[generation as usize];
                    let id = prefix_entries(index, "id", "?1");
                    format!(
                        "SELECT {columns}, {} FROM {table} WHERE rowid = ({id}) AND key = ?1",
                        generation as u8
                    )
                };
                format!("{} UNION ALL {} UNION ALL {every} LIMIT 1", by(first), by(first.other()))
            }
        }
    }

    /// Whether the key `?1` is stored in `table`: for a key that is not, the cheapest.
    pub(crate) fn exists(self, table: &str) -> String {
        format!("SELECT 1 FROM {table} WHERE {}", self.matches("?1"))
    }

    /// Queries that list the rowids of `table` through its key index (salvage reads them
    /// both ways, past damage); `bucket` is the first key byte of the table's keys in the
    /// bucketed layout.
    pub(crate) fn rowid_listings(self, table: &str, bucket: Option<u8>) -> Vec<String> {
        let orders = ["ASC", "DESC"];
        let range = match bucket {
            None => "1".to_string(),
            Some(255) => "prefix >= x'ff'".to_string(),
            Some(b) => format!("prefix >= x'{b:02x}' AND prefix < x'{:02x}'", b + 1),
        };
        match self {
            KeyIndex::Full => orders
                .map(|order| {
                    format!("SELECT rowid FROM {table} INDEXED BY {table}_key ORDER BY key {order}")
                })
                .to_vec(),
            KeyIndex::Generations => GENERATIONS
                .iter()
                .flat_map(|generation| {
                    orders.map(|order| {
                        format!(
                            "SELECT id FROM {generation} WHERE {range} \
                             ORDER BY prefix {order}, id {order}"
                        )
                    })
                })
                .collect(),
        }
    }
}

/// A query of `columns` of the entries of the index `generation` whose prefix is that of
/// the key `param`.
pub(crate) fn prefix_entries(generation: &str, columns: &str, param: &str) -> String {
    format!("SELECT {columns} FROM {generation} WHERE prefix = substr({param}, 1, 8)")
}
