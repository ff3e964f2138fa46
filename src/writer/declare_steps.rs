//! A large declaration in steps: a model of a million members declared in one writer
//! transaction held the write lock for a minute (its members looked up one by one), and
//! every other process's save waited or failed. Declared in steps, the members are looked
//! up and held by an assembly a step at a time, each step one short transaction
//! ([`STEP`]), and a last step declares the root over what the assembly holds, with no
//! lookup but the root's. Between steps other handles and processes write as usual: what
//! the assembly holds stays (it is held like a save under way), a held member removed
//! meanwhile is recorded as missing (`models.rs`, `lost_member`), and a missing one saved
//! meanwhile is found (`stored_member`).

use std::time::{Duration, Instant};

use super::op::Request;
use super::stop::Stop;
use super::tx::Tx;
use crate::cache::uses;
use crate::db::models::{self, ModelRow, State};
use crate::key::Key;

/// How long one step holds the write lock, about.
const STEP: Duration = Duration::from_millis(250);

/// Looks up and holds, for assembly `id`, the first of `keys` a step allows; answers how
/// many it did (all of them, if the assembly is gone: it holds nothing then).
pub(crate) struct DeclareStep {
    pub id: i64,
    pub keys: Vec<Key>,
    pub done: usize,
}

impl Request for DeclareStep {
    type Answer = usize;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        self.done = tx.declare_step(self.id, &self.keys)?;
        Ok(())
    }

    fn answer(self) -> usize {
        self.done
    }
}

/// Declares `root` the model of what assembly `id` holds and misses (`objects` members,
/// the root among them); answers the model's row, or `None` if the assembly is gone.
pub(crate) struct DeclareFinish {
    pub id: i64,
    pub root: Key,
    pub name: Option<Vec<u8>>,
    pub objects: u64,
    pub declared: Option<ModelRow>,
}

impl Request for DeclareFinish {
    type Answer = Option<ModelRow>;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        self.declared = tx.declare_finish(self.id, &self.root, self.name.take(), self.objects)?;
        Ok(())
    }

    fn answer(self) -> Option<ModelRow> {
        self.declared
    }
}

impl Tx<'_> {
    /// One step of a declaration (see [`DeclareStep`]).
    fn declare_step(&mut self, id: i64, keys: &[Key]) -> Result<usize, Stop> {
        self.write_run()?;
        let Some(mut model) =
            models::by_id(self.conn, id)?.filter(|m| m.state == State::Assembling)
        else {
            return Ok(keys.len());
        };
        let started = Instant::now();
        let mut done = 0;
        for key in keys {
            if done > 0 && started.elapsed() >= STEP {
                break;
            }
            match self.find(key)? {
                Some(found) => {
                    if found.model.is_none() {
                        self.tag(key, found.rowid, id)?;
                    }
                    if model.runs.insert(self.table_of(key), found.rowid) {
                        model.bytes += found.stored_len.max(0) as u64;
                    }
                }
                None => {
                    if models::add_missing(self.conn, id, key)? {
                        self.written.models.missing.push(*key);
                        model.missing += 1;
                    }
                }
            }
            done += 1;
        }
        model.used = uses::now();
        models::update(self.conn, &model)?;
        Ok(done)
    }

    /// The last step of a declaration (see [`DeclareFinish`]).
    fn declare_finish(
        &mut self,
        id: i64,
        root: &Key,
        name: Option<Vec<u8>>,
        objects: u64,
    ) -> Result<Option<ModelRow>, Stop> {
        self.write_run()?;
        self.ensure_models()?;
        let Some(mut model) =
            models::by_id(self.conn, id)?.filter(|m| m.state == State::Assembling)
        else {
            return Ok(None);
        };
        if let Some(earlier) = models::by_root(self.conn, root)? {
            self.release(earlier)?;
        }
        models::forget_owner(self.conn, id)?;
        model.root = Some(*root);
        model.name = name;
        model.objects = objects;
        model.used = uses::now();
        if model.missing == 0 {
            model.state = State::Complete;
            self.written.models.readable.push(*root);
        } else {
            model.state = State::Incomplete;
            if self.find(root)?.is_some() {
                self.hide(&mut model)?;
            } else {
                self.shared.withhold(*root);
            }
        }
        models::update(self.conn, &model)?;
        Ok(models::by_id(self.conn, id)?)
    }
}
