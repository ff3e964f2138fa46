//! For the writer's ceiling benchmark only (feature `writer-benchmark`, which nothing but
//! `bench/src/bin/writer_ceiling.rs` turns on): feeding the writer rows that are already
//! hashed and compressed, to measure what the writer alone can take. Nothing checks the
//! rows: a wrong one is stored, and reads report it as corrupt.

use std::sync::Arc;

use crate::error::Result;
use crate::key::Key;
use crate::stash::Stash;
use crate::writer::pending::Row;

/// Queues rows (key, raw length, stored bytes) for `stash`'s writer as they are.
///
/// # Errors
/// As [`Stash::save`].
pub fn queue_rows(stash: &Stash, rows: Vec<(Key, u64, Arc<Vec<u8>>)>) -> Result<()> {
    stash.queue_rows(
        rows.into_iter()
            .map(|(key, raw_len, data)| Row { key, raw_len, data, model: None })
            .collect(),
    )
}
