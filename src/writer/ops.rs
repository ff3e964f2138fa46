//! The writer's operations other than saves, one type each: what it does in the batch's
//! transaction and how it answers (see `writer/op.rs` for the contract).

use std::sync::Arc;

use super::op::{After, Answer, Op};
use super::stop::Stop;
use super::tx::Tx;
use super::upkeep::Job;
use crate::codec::gzip_code;
use crate::codec::zstd_dict;
use crate::db::meta;
use crate::db::names::NameRow;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::report::stats::Evicted;

/// Commit everything sent before; answers once it is committed.
pub(crate) struct Flush(pub Answer<()>);

impl Op for Flush {
    fn writes(&self) -> bool {
        false
    }

    fn apply(&mut self, _: &mut Tx<'_>) -> Result<(), Stop> {
        Ok(())
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {
        self.0.send(Ok(()));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.0.send(Err(error));
        None
    }
}

/// Delete objects and their names; answers whether each was stored.
pub(crate) struct Remove {
    pub keys: Vec<Key>,
    pub answer: Answer<Vec<bool>>,
    pub found: Vec<bool>,
}

impl Op for Remove {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        let names = tx.names_table()?;
        // Removing reads the names' index by key: built at the first removal, with the
        // stash's other indexes for removals (`schema.rs`).
        if names && !tx.shared.schema.removals_indexed(tx.conn)? {
            tx.shared.schema.index_removals(tx.conn)?;
        }
        self.found = self.keys.iter().map(|key| tx.delete(key, names)).collect::<Result<_, _>>()?;
        Ok(())
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {
        self.answer.send(Ok(self.found));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.answer.send(Err(error));
        None
    }
}

/// Record names (already in the pending names) for objects saved before. Nobody waits:
/// a batch that has to be tried again keeps them.
pub(crate) struct Name(pub Vec<NameRow>);

impl Op for Name {
    fn rows(&self) -> usize {
        self.0.len()
    }

    fn urgent(&self) -> bool {
        false
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.queue_names(&self.0);
        Ok(())
    }

    fn committed(self: Box<Self>, after: &mut After<'_>) {
        self.0.iter().for_each(|row| after.shared.names.settle(row));
    }

    fn abandoned(self: Box<Self>, _: Error, retried: bool) -> Option<Box<dyn Op>> {
        retried.then_some(self)
    }
}

/// Delete names; answers whether each was there.
pub(crate) struct Unname {
    pub names: Vec<Arc<[u8]>>,
    pub answer: Answer<Vec<bool>>,
    pub found: Vec<bool>,
}

impl Op for Unname {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        self.found = if tx.names_table()? {
            let form = crate::db::names::NameForm::read(tx.conn)?;
            self.names.iter().map(|name| tx.unname(name, form)).collect::<Result<_, _>>()?
        } else {
            vec![false; self.names.len()]
        };
        Ok(())
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {
        self.answer.send(Ok(self.found));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.answer.send(Err(error));
        None
    }
}

/// Store a newly trained dictionary (trained on this many samples) before any row
/// compressed with it, which can only arrive after this operation. Nobody waits.
pub(crate) struct Dictionary {
    pub dict: Arc<zstd_dict::Dictionary>,
    pub samples: usize,
}

impl Op for Dictionary {
    fn urgent(&self) -> bool {
        false
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        Ok(zstd_dict::store(tx.conn, &self.dict, self.samples)?)
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {}

    fn abandoned(self: Box<Self>, _: Error, retried: bool) -> Option<Box<dyn Op>> {
        retried.then_some(self)
    }
}

/// Store the stash's trained gzip code, unless another handle stored one first. Rows in
/// it carry it in their headers, so none waits for it. Nobody waits.
pub(crate) struct GzipCode(pub Arc<gzip_code::GzipCode>);

impl Op for GzipCode {
    fn urgent(&self) -> bool {
        false
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        Ok(gzip_code::store(tx.conn, &self.0)?)
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {}

    fn abandoned(self: Box<Self>, _: Error, retried: bool) -> Option<Box<dyn Op>> {
        retried.then_some(self)
    }
}

/// Pin (`pin`) or unpin keys; answers whether each was stored (pinning) or pinned
/// (unpinning).
pub(crate) struct Pin {
    pub keys: Vec<Key>,
    pub pin: bool,
    pub answer: Answer<Vec<bool>>,
    pub found: Vec<bool>,
}

impl Op for Pin {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        let pin = self.pin;
        self.found = self
            .keys
            .iter()
            .map(|key| if pin { tx.pin(key) } else { tx.unpin(key) })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {
        self.answer.send(Ok(self.found));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.answer.send(Err(error));
        None
    }
}

/// Record a size cap (`None`: no cap); answers once it is committed.
pub(crate) struct SetMaxSize {
    pub cap: Option<u64>,
    pub answer: Answer<()>,
}

impl Op for SetMaxSize {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        meta::write_max_size(tx.conn, self.cap)?;
        // A capped stash evicts: its uses are indexed with the cap, so that the index's
        // bytes count from the start and the first eviction does not wait for it.
        if self.cap.is_some() && !tx.shared.schema.removals_indexed(tx.conn)? {
            tx.shared.schema.index_removals(tx.conn)?;
        }
        Ok(())
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {
        self.answer.send(Ok(()));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.answer.send(Err(error));
        None
    }
}

/// A one-off eviction, run once everything sent before it is committed: objects unused
/// since a time, or down to a size, or both; answers what was evicted.
pub(crate) struct Trim {
    /// Evict every unpinned object last used before this (milliseconds, `uses.rs`).
    pub unused_before: Option<i64>,
    /// Evict least recently used objects until the pages in use fit this, then give the
    /// free pages back.
    pub max_size: Option<u64>,
    pub answer: Answer<Evicted>,
}

impl Op for Trim {
    fn writes(&self) -> bool {
        false
    }

    fn apply(&mut self, _: &mut Tx<'_>) -> Result<(), Stop> {
        Ok(())
    }

    fn committed(self: Box<Self>, after: &mut After<'_>) {
        after.jobs.push_back(Job::new(*self));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.answer.send(Err(error));
        None
    }
}
