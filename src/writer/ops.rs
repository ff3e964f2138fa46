//! The writer's operations other than saves, one type each: what it does in the batch's
//! transaction and what its caller gets (see `writer/op.rs` for the contract and its two
//! kinds, requests a caller waits on and writes nobody waits for).

use std::sync::Arc;

use super::op::{After, Answer, Op, Request, Unasked};
use super::state::Job;
use super::stop::Stop;
use super::tx::Tx;
use crate::cache::counts::Count;
use crate::cache::uses;
use crate::codec::gzip_code;
use crate::codec::zstd_dict;
use crate::db::counts;
use crate::db::meta;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::report::stats::Evicted;
use crate::writer::pending_names::NameRow;

/// Commit everything sent before; answers once it is committed.
pub(crate) struct Flush;

impl Request for Flush {
    type Answer = ();

    fn writes(&self) -> bool {
        false
    }

    fn apply(&mut self, _: &mut Tx<'_>) -> Result<(), Stop> {
        Ok(())
    }

    fn answer(self) {}
}

/// Delete objects and their names; answers whether each was stored.
pub(crate) struct Remove {
    pub keys: Vec<Key>,
    pub found: Vec<bool>,
}

impl Request for Remove {
    type Answer = Vec<bool>;

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

    fn answer(self) -> Vec<bool> {
        self.found
    }
}

/// Record names (already in the pending names) for objects saved before.
pub(crate) struct Name(pub Vec<NameRow>);

impl Unasked for Name {
    fn rows(&self) -> usize {
        self.0.len()
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.queue_names(&self.0);
        Ok(())
    }

    fn committed(&self, after: &mut After<'_>) {
        self.0.iter().for_each(|row| after.shared.names.settle(row));
    }
}

/// Delete names; answers whether each was there.
pub(crate) struct Unname {
    pub names: Vec<Arc<[u8]>>,
    pub found: Vec<bool>,
}

impl Request for Unname {
    type Answer = Vec<bool>;

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

    fn answer(self) -> Vec<bool> {
        self.found
    }
}

/// Store a newly trained dictionary (trained on this many samples) before any row
/// compressed with it, which can only arrive after this operation.
pub(crate) struct Dictionary {
    pub dict: Arc<zstd_dict::Dictionary>,
    pub samples: usize,
}

impl Unasked for Dictionary {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        Ok(crate::db::dicts::store(tx.conn, &self.dict, self.samples)?)
    }
}

/// Store the stash's trained gzip code, unless another handle stored one first. Rows in
/// it carry it in their headers, so none waits for it.
pub(crate) struct GzipCode(pub Arc<gzip_code::GzipCode>);

impl Unasked for GzipCode {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.write_run()?;
        Ok(meta::write_gzip_code(tx.conn, &self.0)?)
    }
}

/// Pin (`pin`) or unpin keys; answers whether each was stored (pinning) or pinned
/// (unpinning).
pub(crate) struct Pin {
    pub keys: Vec<Key>,
    pub pin: bool,
    pub found: Vec<bool>,
}

impl Request for Pin {
    type Answer = Vec<bool>;

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

    fn answer(self) -> Vec<bool> {
        self.found
    }
}

/// Record a size cap (`None`: no cap); answers once it is committed.
pub(crate) struct SetMaxSize {
    pub cap: Option<u64>,
}

impl Request for SetMaxSize {
    type Answer = ();

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

    fn answer(self) {}
}

/// Sets the stash's counters to 0 and counting to begin now; what the handle counted
/// before is not added (`writer/counting.rs`).
pub(crate) struct ResetCounters;

impl Request for ResetCounters {
    type Answer = ();

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        tx.written.counted_from = Some(tx.shared.counts.snapshot());
        counts::reset(tx.conn, &Count::names(), uses::now())?;
        Ok(())
    }

    fn answer(self) {}
}

/// Commits a transaction, if only to add what the handle counted to the stash's counters
/// (`writer/counting.rs`), after everything sent before it.
pub(crate) struct RecordCounts;

impl Request for RecordCounts {
    type Answer = ();

    fn apply(&mut self, _: &mut Tx<'_>) -> Result<(), Stop> {
        Ok(())
    }

    fn answer(self) {}
}

/// A one-off eviction, run once everything sent before it is committed: objects unused
/// since a time, or down to a size, or both; answers what was evicted, once it has run
/// (`upkeep.rs`).
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
