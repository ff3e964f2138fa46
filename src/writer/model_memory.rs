//! The writer's memory of models between transactions (`models.rs` changes them inside
//! each): the keys some model misses, the rows held for assemblies under way, and what a
//! transaction changed, applied once it commits.

use std::collections::{HashMap, HashSet};

use crate::key::Key;

/// What the writer knows of the stash's models between transactions.
#[derive(Debug, Default)]
pub(crate) struct Models {
    /// Whether the stash has models (its format says so at the transaction's start, or the
    /// transaction made the first).
    pub on: bool,
    /// Keys some model misses (a superset of what the database says).
    pub missing: HashSet<Key>,
    /// The rows this writer inserted into or held for each assembly under way, by key: a
    /// declaration finds its members there instead of looking each up (a tenth of the cost
    /// of saving them, `notes/performance.md`). A hint: whatever it lacks is looked up, and
    /// it is forgotten whenever another connection may have changed the rows.
    pub assembled: HashMap<i64, HashMap<Key, Held>>,
}

/// A row an assembly holds, as the writer saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub table: u16,
    pub rowid: i64,
    pub stored: i64,
}

/// The most rows [`Models::assembled`] remembers: beyond, declarations look rows up.
const ASSEMBLED_MAX: usize = 4 << 20;

/// What a transaction changed of models, applied to the writer's memory once it commits
/// (a transaction rolled back leaves the memory as it was).
#[derive(Debug, Default)]
pub(crate) struct ModelChanges {
    /// Keys models miss now.
    pub missing: Vec<Key>,
    /// Roots that may be read again.
    pub readable: Vec<Key>,
    /// Rows inserted into or held for assemblies: `(assembly, key, row)`.
    pub held: Vec<(i64, Key, Held)>,
}

impl Models {
    /// Applies what a committed transaction changed.
    pub(crate) fn apply(&mut self, changes: &mut ModelChanges) {
        self.missing.extend(changes.missing.drain(..));
        let mut count: usize = self.assembled.values().map(HashMap::len).sum();
        for (id, key, held) in changes.held.drain(..) {
            if count < ASSEMBLED_MAX
                && self.assembled.entry(id).or_default().insert(key, held).is_none()
            {
                count += 1;
            }
        }
    }
}
