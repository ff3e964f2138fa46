//! The database: its format versions, the tables and the SQL of every statement, the meta
//! table, the key index and its generations, names, row scans and the read connections.

pub(crate) mod counts;
pub(crate) mod dicts;
pub(crate) mod first_generation;
pub(crate) mod format;
pub(crate) mod key_filter;
pub(crate) mod key_index;
pub(crate) mod meta;
pub(crate) mod models;
pub(crate) mod names;
pub(crate) mod readers;
pub(crate) mod row;
pub(crate) mod runs;
pub(crate) mod scan;
pub(crate) mod schema;
pub(crate) mod table;
pub(crate) mod use_table;
