//! A model read as a stream ([`Stash::model_reader`]): its objects in storage order, a
//! chunk at a time, so that a model of a million objects is read in bounded memory where
//! [`Stash::read_model`] holds it all. Every chunk is read in one read transaction, held
//! from the start to the end of the stream: the objects are exactly those of the model as
//! it was complete when the stream began, whatever other handles and processes evict or
//! remove meanwhile (a held snapshot keeps the write-ahead log from being checkpointed
//! past it, so a stream should not be left open for long).

use std::collections::VecDeque;

use rayon::prelude::*;

use crate::db::models::{self, State};
use crate::db::readers::Reader;
use crate::db::row::Place;
use crate::error::{DbContext, Result};
use crate::key::Key;

use super::Stash;

/// Objects decoded at a time: with Speckle objects of ~1 KiB, a few MiB a chunk.
const CHUNK: i64 = 4_096;

/// The objects of a complete model, in storage order, a chunk at a time
/// ([`Stash::model_reader`]).
pub struct ModelReader<'a> {
    stash: &'a Stash,
    reader: Reader<'a>,
    /// The runs `(table, start, end)` left to read.
    runs: VecDeque<(u16, i64, i64)>,
    ready: VecDeque<(Key, Vec<u8>)>,
    failed: bool,
}

impl Stash {
    /// The objects of the model of `root` as a stream, in the order the file holds them,
    /// each checked; `None` when `root` is no complete model. Memory stays bounded however
    /// large the model (a few thousand objects are decoded at a time); the stream reads one
    /// snapshot, so it returns exactly the model that was complete when it began.
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if the read fails; each item is
    /// [`Error::Corrupt`](crate::Error::Corrupt) for an object that does not check.
    pub fn model_reader(&self, root: &Key) -> Result<Option<ModelReader<'_>>> {
        let reader = self.readers.checkout()?;
        reader.execute_batch("BEGIN").context(|| "starting a read transaction".to_string())?;
        let model = if models::exist(&reader)? {
            models::by_root(&reader, root)?.filter(|m| m.state == State::Complete)
        } else {
            None
        };
        let Some(model) = model else {
            let _ = reader.execute_batch("ROLLBACK");
            self.shared.counts.read(1, 0);
            return Ok(None);
        };
        self.shared.uses.record_model(model.id);
        let mut runs = VecDeque::new();
        for (table, start, end) in model.runs.runs() {
            let mut at = start;
            while at < end {
                runs.push_back((table, at, (at + CHUNK).min(end)));
                at += CHUNK;
            }
        }
        Ok(Some(ModelReader { stash: self, reader, runs, ready: VecDeque::new(), failed: false }))
    }
}

impl ModelReader<'_> {
    /// Reads and decodes the next chunk of rows into `ready`.
    fn read_chunk(&mut self) -> Result<()> {
        let mut raw: Vec<(Key, i64, Vec<u8>, Option<Place>)> = Vec::new();
        while raw.len() < CHUNK as usize {
            let Some((table, start, end)) = self.runs.pop_front() else { break };
            let table = &self.stash.shared.schema.tables[usize::from(table)];
            let sql = &table.models.run;
            let mut stmt = self.reader.prepare_cached(sql).context(|| table.name.clone())?;
            let mut found = stmt.query([start, end]).context(|| table.name.clone())?;
            while let Some(row) = found.next().context(|| table.name.clone())? {
                let row = sql.columns.read(row);
                let read = (|| -> rusqlite::Result<_> {
                    Ok((row.key()?, row.raw_len()?, row.data()?.to_vec(), row.place()?))
                })();
                if let (Some(key), raw_len, data, place) = read.context(|| table.name.clone())? {
                    raw.push((key, raw_len, data, place));
                }
            }
        }
        let stash = self.stash;
        let decoded: Vec<(Key, Vec<u8>)> = stash.pool.install(|| {
            raw.par_iter()
                .map(|(key, raw_len, data, place)| {
                    Ok((*key, stash.decode_row(key, *raw_len, data, *place)?))
                })
                .collect::<Result<_>>()
        })?;
        stash.shared.counts.read(decoded.len(), decoded.len());
        self.ready.extend(decoded);
        Ok(())
    }
}

impl Iterator for ModelReader<'_> {
    type Item = Result<(Key, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        while self.ready.is_empty() && !self.runs.is_empty() {
            if let Err(e) = self.read_chunk() {
                self.failed = true;
                return Some(Err(e));
            }
        }
        self.ready.pop_front().map(Ok)
    }
}

impl Drop for ModelReader<'_> {
    fn drop(&mut self) {
        // The snapshot ends before the connection goes back to the pool.
        let _ = self.reader.execute_batch("ROLLBACK");
    }
}
