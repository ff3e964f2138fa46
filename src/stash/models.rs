//! Models on the handle: a root object and the objects it lists, which the stash keeps,
//! evicts, pins and reports together (`db/models.rs`, `writer/models.rs`). Whenever the
//! root can be read, the whole model can, in every process; otherwise the root reads as
//! absent, so that a client that trusts a cached root to mean a cached model (Speckle's
//! do) falls back to its server.
//!
//! A model is declared ([`Stash::declare_model`]), or saved with its members
//! ([`Stash::save_model`]), or assembled ([`Stash::assemble`]): objects saved into an
//! assembly, or held by it when found stored, stay until its root is declared
//! ([`Assembly::finish`]) or the assembly is dropped, as what a save call under way saved
//! does; that is how a copy from a server builds a model whose root comes last.

use std::time::SystemTime;

use rayon::prelude::*;

use crate::cache::uses;
use crate::db::models::{self, ModelRow, State};
use crate::db::runs::Runs;
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::report::model::Model;
use crate::writer::{
    Declare, GiveUp, Hold, Message, OpenAssembly, PinModel, RemoveModel, asked, unasked,
};

use super::Stash;

/// The objects of a model, each with its key, in storage order ([`Stash::read_model`]).
pub type ModelObjects = Vec<(Key, Vec<u8>)>;

impl Stash {
    /// Declares `root` a model of `members` (the root need not be listed): from now on the
    /// stash keeps them together, and reports the root absent whenever a member is not
    /// stored. A second declaration of a root replaces the first. Returns the model as it
    /// stands: complete if every member is stored, else its root reads as absent until the
    /// missing members are saved.
    ///
    /// # Errors
    /// [`Error::ReadOnly`](crate::Error::ReadOnly) on a read-only handle;
    /// [`Error::WriterStopped`](crate::Error::WriterStopped) if the writer has stopped.
    pub fn declare_model(&self, root: &Key, members: &[Key]) -> Result<Model> {
        self.declare(root, members, None, None)
    }

    /// [`Stash::declare_model`], under a name of the caller's own (listed with the model).
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn declare_named_model(
        &self,
        name: impl AsRef<[u8]>,
        root: &Key,
        members: &[Key],
    ) -> Result<Model> {
        self.declare(root, members, Some(name.as_ref().to_vec()), None)
    }

    fn declare(
        &self,
        root: &Key,
        members: &[Key],
        name: Option<Vec<u8>>,
        assembly: Option<i64>,
    ) -> Result<Model> {
        self.declare_and_read(root, members, name, assembly, false).map(|(model, _)| model)
    }

    /// Declares a model; with `read`, also its objects, read in the declaring transaction
    /// (if it is complete) and decoded here.
    fn declare_and_read(
        &self,
        root: &Key,
        members: &[Key],
        name: Option<Vec<u8>>,
        assembly: Option<i64>,
        read: bool,
    ) -> Result<(Model, Option<ModelObjects>)> {
        let _span = tracing::debug_span!("declare_model", members = members.len()).entered();
        let (declared, rows) = self.ask(|answer| {
            asked(
                Declare {
                    root: *root,
                    members: members.to_vec(),
                    name,
                    assembly,
                    declared: None,
                    read,
                    rows: None,
                },
                answer,
            )
        })?;
        let model =
            declared.as_ref().and_then(Model::of).ok_or_else(|| crate::error::Error::Damaged {
                context: format!("declaring the model of {root}"),
                reason: "the declaration left no model row".to_string(),
            })?;
        let Some(rows) = rows else { return Ok((model, None)) };
        let objects: ModelObjects = self.pool.install(|| {
            rows.par_iter()
                .map(|(key, raw_len, data)| {
                    Ok((*key, self.decode_unrecorded(key, *raw_len, data)?))
                })
                .collect::<Result<_>>()
        })?;
        self.shared.counts.read(objects.len(), objects.len());
        Ok((model, Some(objects)))
    }

    /// Saves a model: its members (in parallel, as [`Stash::save_all`]), then its root,
    /// and declares it; the root's key and the model.
    ///
    /// # Errors
    /// As [`Stash::save_all`] and [`Stash::declare_model`].
    pub fn save_model<T: AsRef<[u8]> + Sync>(&self, root: &[u8], members: &[T]) -> Result<Model> {
        let assembly = self.assemble()?;
        let keys = assembly.save_all(members)?;
        let root = assembly.save(root)?;
        assembly.finish(&root, &keys)
    }

    /// Starts assembling a model whose root comes last: see [`Assembly`].
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn assemble(&self) -> Result<Assembly<'_>> {
        let id = self.ask(|answer| asked(OpenAssembly { id: 0 }, answer))?;
        Ok(Assembly { stash: self, id, done: false })
    }

    /// The model whose root is `root`, if one is declared: in one read, whether it is
    /// complete.
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if the read fails.
    pub fn model(&self, root: &Key) -> Result<Option<Model>> {
        self.readers.checkout()?.in_transaction(|conn| {
            if !models::exist(conn)? {
                return Ok(None);
            }
            Ok(models::by_root(conn, root)?.and_then(|row| Model::of(&row)))
        })
    }

    /// Every model declared, least recently used first.
    ///
    /// # Errors
    /// [`Error::Database`](crate::Error::Database) if the read fails.
    pub fn models(&self) -> Result<Vec<Model>> {
        self.readers.checkout()?.in_transaction(|conn| {
            if !models::exist(conn)? {
                return Ok(Vec::new());
            }
            Ok(models::all(conn)?.iter().filter_map(Model::of).collect())
        })
    }

    /// Pins the model of `root`: it is never evicted (its members neither); whether there
    /// is such a model.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn pin_model(&self, root: &Key) -> Result<bool> {
        self.ask(|answer| asked(PinModel { root: *root, pin: true, found: false }, answer))
    }

    /// Unpins the model of `root` (it counts as used now); whether there is such a model.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn unpin_model(&self, root: &Key) -> Result<bool> {
        self.ask(|answer| asked(PinModel { root: *root, pin: false, found: false }, answer))
    }

    /// Removes the model of `root`: its root and every member no other model lists (pinned
    /// objects stay, loose); whether there was such a model.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn remove_model(&self, root: &Key) -> Result<bool> {
        self.ask(|answer| asked(RemoveModel { root: *root, removed: false }, answer))
    }

    /// Every object of the model of `root`, root included, read in the order the file
    /// holds them (for a model saved together, one sweep of the file) and checked; `None`
    /// when `root` is no complete model. The objects are those of one complete model: the
    /// stash's threads each read and decode a part of its rows, each in a read transaction
    /// that finds the model unchanged and complete (a member removed or evicted meanwhile
    /// changes it: the read is then tried again, and `None` if the model is no longer
    /// whole).
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) for the first object that does not check;
    /// [`Error::Database`](crate::Error::Database) if a read fails.
    pub fn read_model(&self, root: &Key) -> Result<Option<ModelObjects>> {
        for _ in 0..READ_MODEL_TRIES {
            let model = self.readers.checkout()?.in_transaction(|conn| {
                if !models::exist(conn)? {
                    return Ok(None);
                }
                Ok(models::by_root(conn, root)?.filter(|m| m.state == State::Complete))
            })?;
            let Some(model) = model else {
                self.shared.counts.read(1, 0);
                return Ok(None);
            };
            let parts = split_runs(&model.runs, self.pool.current_num_threads());
            let read: Vec<Option<ModelObjects>> = self.pool.install(|| {
                parts
                    .par_iter()
                    .map(|part| self.read_model_part(&model, part))
                    .collect::<Result<_>>()
            })?;
            if read.iter().all(Option::is_some) {
                self.shared.uses.record_model(model.id);
                let objects: ModelObjects = read.into_iter().flatten().flatten().collect();
                self.shared.counts.read(objects.len(), objects.len());
                return Ok(Some(objects));
            }
        }
        self.shared.counts.read(1, 0);
        Ok(None)
    }

    /// Reads and decodes the rows of `part` (runs `(table, start, end)`) of `model`, in a
    /// read transaction that finds the model as it was read: complete, with the same rows;
    /// else `None`.
    fn read_model_part(
        &self,
        model: &ModelRow,
        part: &[(u16, i64, i64)],
    ) -> Result<Option<ModelObjects>> {
        self.readers.checkout()?.in_transaction(|conn| {
            let now = models::by_id(conn, model.id)?;
            if now.is_none_or(|m| m.state != State::Complete || m.runs != model.runs) {
                return Ok(None);
            }
            let mut objects =
                Vec::with_capacity(part.iter().map(|(_, s, e)| (e - s) as usize).sum());
            for &(table, start, end) in part {
                let table = &self.shared.schema.tables[usize::from(table)];
                let sql = &table.models.run;
                let mut stmt = conn.prepare_cached(sql).context(|| table.name.clone())?;
                let mut found = stmt.query([start, end]).context(|| table.name.clone())?;
                while let Some(row) = found.next().context(|| table.name.clone())? {
                    let row = sql.columns.read(row);
                    let read = (|| -> rusqlite::Result<_> {
                        Ok((row.key()?, row.raw_len()?, row.data()?, row.place()?))
                    })();
                    let (Some(key), raw_len, data, place) = read.context(|| table.name.clone())?
                    else {
                        continue;
                    };
                    objects.push((key, self.decode_row(&key, raw_len, data, place)?));
                }
            }
            Ok(Some(objects))
        })
    }
}

/// How many times [`Stash::read_model`] reads a model that changes under it.
const READ_MODEL_TRIES: usize = 3;

/// Rows below which a model is read by one thread.
const READ_MODEL_MIN_PART: i64 = 2_048;

/// The runs of `runs` cut into at most `parts` parts of about as many rows each, in order.
fn split_runs(runs: &Runs, parts: usize) -> Vec<Vec<(u16, i64, i64)>> {
    let total = runs.len() as i64;
    let parts = (total / READ_MODEL_MIN_PART).clamp(1, parts.max(1) as i64);
    let each = ((total + parts - 1) / parts).max(1);
    let mut out = vec![Vec::new()];
    let mut filled = 0;
    for (table, mut start, end) in runs.runs() {
        while start < end {
            if filled == each {
                out.push(Vec::new());
                filled = 0;
            }
            let take = (end - start).min(each - filled);
            out.last_mut().expect("one part at least").push((table, start, start + take));
            start += take;
            filled += take;
        }
    }
    out
}

/// A model being assembled: objects saved into it, or found stored and held by it, stay
/// stored (eviction spares them as it spares a save call under way) until its root is
/// declared with [`Assembly::finish`]; dropped unfinished, it is given up and what it held
/// goes back to being loose. A copy from a server checks which objects the cache holds
/// ([`Assembly::missing`]), saves the others, then the root, and finishes.
#[must_use = "an assembly is given up when dropped: finish it"]
pub struct Assembly<'a> {
    stash: &'a Stash,
    id: i64,
    done: bool,
}

/// Which assembly an [`Assembly`] is, to resume it later on the same stash
/// ([`Assembly::detach`], [`Stash::resume_assembly`]): for bindings whose handles cannot
/// hold a borrow of the stash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AssemblyId(i64);

impl Stash {
    /// The assembly `id` again ([`Assembly::detach`]). One given up meanwhile (or given up
    /// by an open that found the stash alone, after this handle was closed) holds nothing:
    /// its saves are loose, its holds find nothing stored, and its finish declares the
    /// model afresh.
    pub fn resume_assembly(&self, id: AssemblyId) -> Assembly<'_> {
        Assembly { stash: self, id: id.0, done: false }
    }
}

impl Assembly<'_> {
    /// Lets go of the assembly without giving it up: it goes on until
    /// [`Stash::resume_assembly`] resumes it and finishes it or drops it.
    #[must_use = "an assembly detached and never resumed is given up only at the next open alone"]
    pub fn detach(mut self) -> AssemblyId {
        self.done = true;
        AssemblyId(self.id)
    }

    /// Gives the assembly up now (as dropping it does): what it held goes back to being
    /// loose.
    pub fn give_up(self) {}

    /// Holds, for the assembly, the objects saved under `names` that are stored; the key
    /// of each stored one, `None` for the others, in input order: what a copy from a
    /// server that knows objects by its own ids still has to fetch.
    ///
    /// # Errors
    /// As [`Stash::resolve`] and [`Assembly::hold`].
    pub fn hold_named<N: AsRef<[u8]> + Sync>(&self, names: &[N]) -> Result<Vec<Option<Key>>> {
        let keys = self.stash.resolve(names)?;
        let known: Vec<Key> = keys.iter().flatten().copied().collect();
        let mut stored = self.hold(&known)?.into_iter();
        Ok(keys.into_iter().map(|key| key.filter(|_| stored.next().unwrap_or(false))).collect())
    }

    /// Saves an object into the assembly, as [`Stash::save`] does.
    ///
    /// # Errors
    /// As [`Stash::save`].
    pub fn save(&self, object: &[u8]) -> Result<Key> {
        Ok(self.save_all(&[object])?[0])
    }

    /// Saves objects into the assembly, as [`Stash::save_all`] does.
    ///
    /// # Errors
    /// As [`Stash::save_all`].
    pub fn save_all<T: AsRef<[u8]> + Sync>(&self, objects: &[T]) -> Result<Vec<Key>> {
        self.stash.save_each(Some(self.id), objects, |object| object.as_ref(), |_, _| Ok(()))
    }

    /// Saves objects under names into the assembly, as [`Stash::save_named`] does.
    ///
    /// # Errors
    /// As [`Stash::save_named`].
    pub fn save_named<N, T>(&self, items: &[(N, T)]) -> Result<Vec<Key>>
    where
        N: AsRef<[u8]> + Sync,
        T: AsRef<[u8]> + Sync,
    {
        self.stash.save_named_in(Some(self.id), items)
    }

    /// Holds the objects of `keys` that are stored for the assembly; whether each is.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn hold(&self, keys: &[Key]) -> Result<Vec<bool>> {
        let id = self.id;
        self.stash.ask(|answer| {
            asked(Hold { assembly: id, keys: keys.to_vec(), stored: Vec::new() }, answer)
        })
    }

    /// The keys among `keys` that are not stored, in input order, holding the others for
    /// the assembly: what a copy still has to fetch.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn missing(&self, keys: &[Key]) -> Result<Vec<Key>> {
        // What is pending is committed by the writer before it answers the hold.
        let stored = self.hold(keys)?;
        Ok(keys.iter().zip(stored).filter(|(_, stored)| !stored).map(|(key, _)| *key).collect())
    }

    /// Declares the model: `root` and `members` (the root need not be listed), as
    /// [`Stash::declare_model`] does; what the assembly held that it does not list goes
    /// back to being loose.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn finish(mut self, root: &Key, members: &[Key]) -> Result<Model> {
        self.done = true;
        self.stash.declare(root, members, None, Some(self.id))
    }

    /// [`Assembly::finish_named`] (with `name`) or [`Assembly::finish`], and the model's
    /// objects if it is complete, read in the transaction that declares it: what a copy
    /// from a server reads next is then whole, whatever another process evicts or removes
    /// once the declaration commits.
    ///
    /// # Errors
    /// As [`Stash::declare_model`] and [`Stash::read_model`].
    pub fn finish_and_read(
        mut self,
        name: Option<&[u8]>,
        root: &Key,
        members: &[Key],
    ) -> Result<(Model, Option<ModelObjects>)> {
        self.done = true;
        let name = name.map(<[u8]>::to_vec);
        self.stash.declare_and_read(root, members, name, Some(self.id), true)
    }

    /// [`Assembly::finish`], under a name of the caller's own.
    ///
    /// # Errors
    /// As [`Stash::declare_model`].
    pub fn finish_named(
        mut self,
        name: impl AsRef<[u8]>,
        root: &Key,
        members: &[Key],
    ) -> Result<Model> {
        self.done = true;
        self.stash.declare(root, members, Some(name.as_ref().to_vec()), Some(self.id))
    }
}

impl Drop for Assembly<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Err(e) = self.stash.send(Message::Op(unasked(GiveUp(self.id))))
        {
            log::warn!("objstash: an assembly could not be given up: {e}");
        }
    }
}

impl Model {
    /// The model a row describes, unless it is still assembled.
    fn of(row: &ModelRow) -> Option<Model> {
        if row.state == State::Assembling {
            return None;
        }
        Some(Model {
            root: row.root?,
            name: row.name.clone(),
            objects: row.objects,
            missing: if row.state == State::Evicting { row.objects } else { row.missing },
            stored_bytes: row.bytes,
            last_use: uses::to_time(row.used).filter(|t| *t > SystemTime::UNIX_EPOCH),
            pinned: row.pinned,
        })
    }
}
