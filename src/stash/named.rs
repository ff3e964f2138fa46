//! Names: saving objects under the caller's own ids and reading them back by those ids.
//!
//! A named save is a save (the same parallel pipeline) followed, chunk by chunk, by one
//! message of names to the writer. Each name carries the pending row of its object when
//! the object is not yet committed, so the writer can store the object first whatever
//! order messages from several threads arrive in: a name is never committed without its
//! object (`names.rs`).
//!
//! Reads resolve names the way reads find rows: the pending names first, for all names,
//! then the names table in one read transaction (see `read.rs` for why that order).

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::uses;
use crate::db::names;
use crate::error::Result;
use crate::key::Key;
use crate::parts;
use crate::writer::{Message, Name, Unname, asked, unasked};

use super::Stash;
use super::read::{GET_MANY_MIN_PART, Stored};

impl Stash {
    /// Stores each object and records its name, in parallel; returns the keys in input
    /// order. A name saved again is pointed at its new object (a name given twice in one
    /// call names the last of its objects); several names may share one object. Once it returns, every read sees the names and their objects; each name is
    /// committed with or after its object, never before.
    ///
    /// # Errors
    /// [`Error::BadName`](crate::Error::BadName) for an empty name or one over
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, and
    /// [`Error::TooLarge`](crate::Error::TooLarge), both before anything is stored;
    /// otherwise as [`Stash::save_all`].
    pub fn save_named<N, T>(&self, items: &[(N, T)]) -> Result<Vec<Key>>
    where
        N: AsRef<[u8]> + Sync,
        T: AsRef<[u8]> + Sync,
    {
        self.save_named_in(None, items)
    }

    /// [`Stash::save_named`], into the assembly `assembly` if given (`models.rs`).
    pub(super) fn save_named_in<N, T>(
        &self,
        assembly: Option<i64>,
        items: &[(N, T)],
    ) -> Result<Vec<Key>>
    where
        N: AsRef<[u8]> + Sync,
        T: AsRef<[u8]> + Sync,
    {
        let mut last = HashMap::with_capacity(items.len());
        for (i, (name, _)) in items.iter().enumerate() {
            names::check(name.as_ref())?;
            last.insert(name.as_ref(), i);
        }
        // A name given twice names the last of its objects; the others are only saved.
        let items: Vec<(Option<&[u8]>, &[u8])> = items
            .iter()
            .enumerate()
            .map(|(i, (name, object))| {
                let name = name.as_ref();
                (last.get(name).is_some_and(|&l| l == i).then_some(name), object.as_ref())
            })
            .collect();
        self.save_each(
            assembly,
            &items,
            |(_, object)| object,
            |chunk, saved| {
                let rows = chunk
                    .iter()
                    .zip(saved)
                    .filter_map(|((name, _), saved)| {
                        // A row this thread queued reaches the writer before the name; one
                        // queued by another save may not, so the name carries it along.
                        let row =
                            if saved.queued { None } else { self.shared.pending.get(&saved.key) };
                        Some(self.shared.names.insert((*name)?, saved.key, row))
                    })
                    .collect::<Vec<_>>();
                if rows.is_empty() {
                    return Ok(());
                }
                let sent = self.send(Message::Op(unasked(Name(rows.clone()))));
                if sent.is_err() {
                    rows.iter().for_each(|row| self.shared.names.settle(row));
                }
                sent
            },
        )
    }

    /// Stores everything `source` yields as one object, as [`Stash::save_reader`] does,
    /// and records it under `name`, as [`Stash::save_named`] does.
    ///
    /// # Errors
    /// [`Error::BadName`](crate::Error::BadName) before anything is read; otherwise as
    /// [`Stash::save_reader`].
    pub fn save_reader_named(&self, name: impl AsRef<[u8]>, source: impl Read) -> Result<Key> {
        let name = name.as_ref();
        names::check(name)?;
        let key = self.save_reader(source)?;
        self.name(&[(name, key)])?;
        Ok(key)
    }

    /// Records names for objects already stored (a name saved again is pointed at its new
    /// object); whether each object was stored, and so named. Once it returns, every read
    /// sees the names; each is committed with or after its object.
    ///
    /// # Errors
    /// [`Error::BadName`](crate::Error::BadName) for a name no save accepts, before
    /// anything is recorded; [`Error::Database`](crate::Error::Database) if a lookup fails.
    pub fn name<N: AsRef<[u8]>>(&self, names: &[(N, Key)]) -> Result<Vec<bool>> {
        self.writer()?;
        for (name, _) in names {
            names::check(name.as_ref())?;
        }
        let keys: Vec<Key> = names.iter().map(|(_, key)| *key).collect();
        let absent: std::collections::HashSet<Key> =
            self.missing_uncounted(&keys)?.into_iter().collect();
        let rows: Vec<_> = names
            .iter()
            .filter(|(_, key)| !absent.contains(key))
            .map(|(name, key)| {
                // A pending object travels with its name, which may reach the writer first.
                self.shared.names.insert(name.as_ref(), *key, self.shared.pending.get(key))
            })
            .collect();
        if !rows.is_empty() {
            let sent = self.send(Message::Op(unasked(Name(rows.clone()))));
            if sent.is_err() {
                rows.iter().for_each(|row| self.shared.names.settle(row));
            }
            sent?;
        }
        Ok(keys.iter().map(|key| !absent.contains(key)).collect())
    }

    /// The keys `names` map to, in input order; `None` for a name not saved.
    ///
    /// # Errors
    /// [`Error::BadName`](crate::Error::BadName) for a name no save accepts;
    /// [`Error::Database`](crate::Error::Database) if a lookup fails.
    pub fn resolve<N: AsRef<[u8]> + Sync>(&self, names: &[N]) -> Result<Vec<Option<Key>>> {
        self.by_parts(names, |part| self.resolve_part(part))
    }

    /// Every name saved, with the key it maps to, in the names table's order, after what
    /// is pending commits: a listing (Speckle's `GetAllObjects` reads the objects of these).
    ///
    /// # Errors
    /// As [`Stash::flush`]; [`Error::Database`](crate::Error::Database) if the read fails.
    pub fn names(&self) -> Result<Vec<(Vec<u8>, Key)>> {
        if !self.is_read_only() {
            self.flush()?;
        }
        let reader = self.readers.checkout()?;
        if !self.shared.names.table_exists(&reader)? {
            return Ok(Vec::new());
        }
        let form = self.shared.names.form(&reader)?;
        reader.in_transaction(|conn| names::all(conn, form))
    }

    /// The objects saved under `names`, in input order; `None` for a name not saved. Every
    /// object is checked against its key, as [`Stash::get`] does. Like
    /// [`Stash::get_many`], the names are sorted and split into one part per thread, each
    /// part found and read in one read transaction, then decoded in parallel. With a remote,
    /// names not saved here are looked up among the remote's names and their objects read
    /// through (checked, stored and named here).
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) for the first damaged object; otherwise
    /// as [`Stash::resolve`] and [`Stash::get_many`].
    pub fn get_named<N: AsRef<[u8]> + Sync>(&self, names: &[N]) -> Result<Vec<Option<Vec<u8>>>> {
        #[cfg_attr(not(feature = "remote"), allow(unused_mut))]
        let mut found: Vec<Option<Vec<u8>>> = if let [name] = names {
            vec![self.get_one_named(name.as_ref())?]
        } else {
            let found = self.by_parts(names, |part| self.get_named_part(part))?;
            found.into_iter().collect::<Result<_>>()?
        };
        #[cfg(feature = "remote")]
        if self.remote.is_some() && found.iter().any(Option::is_none) {
            self.get_named_through(names, &mut found)?;
        }
        self.shared.counts.read(names.len(), found.iter().filter(|f| f.is_some()).count());
        Ok(found)
    }

    /// Reads through the remote the objects of the names not found here (`found[i]` is
    /// `None`), by the remote's names; each object is checked as any read-through, and its
    /// name saved here with it (unless the handle is read-only).
    #[cfg(feature = "remote")]
    fn get_named_through<N: AsRef<[u8]>>(
        &self,
        names: &[N],
        found: &mut [Option<Vec<u8>>],
    ) -> Result<()> {
        let Some(remote) = self.remote.as_deref() else { return Ok(()) };
        let missing: Vec<usize> = (0..names.len()).filter(|&i| found[i].is_none()).collect();
        let asked: Vec<&[u8]> = missing.iter().map(|&i| names[i].as_ref()).collect();
        let resolved = remote.resolve(&asked)?;
        let (at, keys): (Vec<usize>, Vec<Key>) =
            missing.iter().zip(&resolved).filter_map(|(&i, k)| k.map(|k| (i, k))).unzip();
        if keys.is_empty() {
            return Ok(());
        }
        let objects = self.get_many_uncounted(&keys)?;
        let mut bind = Vec::new();
        for ((i, key), object) in at.into_iter().zip(keys).zip(objects) {
            if object.is_some() {
                bind.push((names[i].as_ref(), key));
            }
            found[i] = object;
        }
        if !self.is_read_only() {
            self.name(&bind)?;
        }
        Ok(())
    }

    /// Checks `names`, sorts them, splits them into parts on the pool, runs `part` on each
    /// (names in sorted order) and puts the answers back in input order.
    fn by_parts<N: AsRef<[u8]> + Sync, T: Send>(
        &self,
        names: &[N],
        part: impl Fn(&[&[u8]]) -> Result<Vec<T>> + Sync,
    ) -> Result<Vec<T>> {
        for name in names {
            names::check(name.as_ref())?;
        }
        let threads = self.pool.current_num_threads();
        let parts = parts::sorted_parts(
            names,
            |a, b| a.as_ref().cmp(b.as_ref()),
            threads,
            GET_MANY_MIN_PART,
        );
        let run = |indices: &Vec<usize>| -> Result<Vec<(usize, T)>> {
            let sorted: Vec<&[u8]> = indices.iter().map(|&i| names[i].as_ref()).collect();
            Ok(indices.iter().copied().zip(part(&sorted)?).collect())
        };
        let answered: Vec<Vec<(usize, T)>> = if parts.len() <= 1 {
            parts.iter().map(run).collect::<Result<_>>()?
        } else {
            self.pool.install(|| parts.par_iter().map(run).collect::<Result<_>>())?
        };
        Ok(parts::scatter(names.len(), answered.into_iter().flatten()))
    }

    /// Resolves a part: pending names first, then the table in one read transaction (see
    /// the module documentation for the order).
    fn resolve_part(&self, names: &[&[u8]]) -> Result<Vec<Option<Key>>> {
        let queued: Vec<Option<Key>> =
            names.iter().map(|name| self.shared.names.get(name)).collect();
        if queued.iter().all(Option::is_some) {
            return Ok(queued);
        }
        let reader = self.readers.checkout()?;
        if !self.shared.names.table_exists(&reader)? {
            return Ok(queued);
        }
        let form = self.shared.names.form(&reader)?;
        reader.in_transaction(|conn| {
            names
                .iter()
                .zip(queued)
                .map(|(name, queued)| match queued {
                    Some(key) => Ok(Some(key)),
                    None => names::lookup(conn, form, name),
                })
                .collect()
        })
    }

    /// Reads a part's objects: names and rows still queued are taken from the pending maps
    /// before the read transaction starts; the others are found and read in it. A name
    /// read from the table was committed with or after its object, so the same snapshot
    /// holds the object; a pending name's object is pending or committed before the
    /// transaction begins.
    fn get_named_part(&self, names: &[&[u8]]) -> Result<Vec<Result<Option<Vec<u8>>>>> {
        /// What is known of a name's object as the part goes.
        enum Lookup {
            Row(Key, Stored),
            /// Pending, unless another handle withheld it since (`pending_servable`).
            Queued(Key, Stored),
            Key(Key),
            Unknown,
            Absent,
        }
        let now = uses::now();
        let mut found: Vec<Lookup> = names
            .iter()
            .map(|name| match self.shared.names.get(name) {
                Some(key) => match self.shared.pending.get(&key) {
                    Some(row) => Lookup::Queued(key, Stored::pending(row, now)),
                    None => Lookup::Key(key),
                },
                None => Lookup::Unknown,
            })
            .collect();
        if found.iter().any(|f| !matches!(f, Lookup::Row(..) | Lookup::Absent)) {
            let reader = self.readers.checkout()?;
            let table = self.shared.names.table_exists(&reader)?;
            let form = if table { Some(self.shared.names.form(&reader)?) } else { None };
            reader.in_transaction(|conn| {
                let models = self.models_in(conn)?;
                for (name, slot) in names.iter().zip(found.iter_mut()) {
                    if matches!(slot, Lookup::Queued(..))
                        && let Lookup::Queued(key, row) = std::mem::replace(slot, Lookup::Absent)
                    {
                        if self.pending_servable(conn, models, &key)? {
                            *slot = Lookup::Row(key, row);
                            continue;
                        }
                        *slot = Lookup::Key(key);
                    }
                    let key = match slot {
                        Lookup::Key(key) => Some(*key),
                        Lookup::Unknown if let Some(form) = form => {
                            names::lookup(conn, form, name)?
                        }
                        _ => continue,
                    };
                    *slot = match key {
                        Some(key) => match self.select_row(conn, &key)? {
                            Some(row) => Lookup::Row(key, row),
                            None => Lookup::Absent,
                        },
                        None => Lookup::Absent,
                    };
                }
                Ok(())
            })?;
        }
        Ok(found
            .into_iter()
            .map(|f| match f {
                Lookup::Row(key, row) => {
                    self.decode(&key, row.raw_len, &row.data, row.used).map(Some)
                }
                _ => Ok(None),
            })
            .collect())
    }

    /// One name: no hand-over to the pool and no explicit transaction. (One statement
    /// joining the names table to the single layout's table was measured 0.77x the speed
    /// of these two lookups: `bench/src/bin/names.rs`.)
    fn get_one_named(&self, name: &[u8]) -> Result<Option<Vec<u8>>> {
        names::check(name)?;
        if let Some(key) = self.shared.names.get(name) {
            return self.get_uncounted(&key);
        }
        // In a kept snapshot (readers.rs), renewed if it finds nothing.
        let key = {
            let mut reader = self.readers.checkout_held(&self.shared.commits)?;
            let mut key = self.lookup_name(&reader, name)?;
            if key.is_none() && reader.reused() {
                reader.renew(&self.shared.commits)?;
                key = self.lookup_name(&reader, name)?;
            }
            key
        };
        // The name was committed with or after its object: unless a remove came between
        // the two reads, the object is found.
        key.map_or(Ok(None), |key| self.get_uncounted(&key))
    }

    /// The committed key of `name`, read on `conn`.
    fn lookup_name(&self, conn: &rusqlite::Connection, name: &[u8]) -> Result<Option<Key>> {
        if !self.shared.names.table_exists(conn)? {
            return Ok(None);
        }
        names::lookup(conn, self.shared.names.form(conn)?, name)
    }

    /// The names among `names` that are not saved, in input order: what still has to be
    /// fetched.
    ///
    /// # Errors
    /// As [`Stash::resolve`].
    pub fn missing_named<'a, N: AsRef<[u8]> + Sync>(&self, names: &'a [N]) -> Result<Vec<&'a N>> {
        let keys = self.resolve(names)?;
        Ok(names.iter().zip(keys).filter(|(_, key)| key.is_none()).map(|(name, _)| name).collect())
    }

    /// Deletes names (not their objects, which other names or keys may still reach) in one
    /// transaction; returns whether each was saved. Committed when it returns. Removing an
    /// object ([`Stash::remove_all`]) drops its names.
    ///
    /// # Errors
    /// [`Error::BadName`](crate::Error::BadName) before anything is removed;
    /// [`Error::WriterStopped`](crate::Error::WriterStopped) if the writer has stopped.
    pub fn remove_named<N: AsRef<[u8]>>(&self, names: &[N]) -> Result<Vec<bool>> {
        for name in names {
            names::check(name.as_ref())?;
        }
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<Arc<[u8]>> = names.iter().map(|n| Arc::from(n.as_ref())).collect();
        self.ask(|answer| asked(Unname { names, found: Vec::new() }, answer))
    }
}
