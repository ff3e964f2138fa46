//! Which generation of the key index a read asks first (format 5, `key_index.rs`).
//!
//! A read by key looks the key's prefix up in one generation, then, if the row is not
//! there, in the other: a key found in the second costs a descent of the first for
//! nothing. Neither order suits every stash. Past the first million objects most keys are
//! in the old index (nine in ten at ten million), so asking the young one first costs
//! most reads a descent; but the objects a program saved last, a model it reads back,
//! are in the young index, and asking the old one first costs each of those a descent of
//! a far larger tree (notes/experiments.md, "Which generation a read asks first": at ten
//! million objects the young index first reads random keys at 0.83x-0.93x the old index
//! first, and the old index first reads the last model saved at 0.61x-0.83x).
//!
//! So a stash asks first the generation where the last read found its key: reads come in
//! runs (a model saved together is read together, and sits in one generation), and a
//! stash read at random pays a wasted descent only when two reads in a row land in
//! different generations, about twice the young index's share of the keys. The guess is
//! one byte shared by the handle's threads, written only when it changes.

use std::sync::atomic::{AtomicU8, Ordering};

/// A generation of the key index, as a read statement names the branch that found a row
/// (`key_index.rs`, [`KeyIndex::select`](crate::db::key_index::KeyIndex::select)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Generation {
    Young = 0,
    Old = 1,
}

impl Generation {
    /// The generation a read statement's last column names: `None` for a row found
    /// neither way first (a shared prefix, or a stash with a full key index).
    pub(crate) fn of_column(value: i64) -> Option<Generation> {
        match value {
            0 => Some(Generation::Young),
            1 => Some(Generation::Old),
            _ => None,
        }
    }

    /// The other generation.
    pub(crate) fn other(self) -> Generation {
        match self {
            Generation::Young => Generation::Old,
            Generation::Old => Generation::Young,
        }
    }
}

/// The generation a handle's next read asks first.
#[derive(Debug, Default)]
pub(crate) struct FirstGeneration(AtomicU8);

impl FirstGeneration {
    /// The generation to ask first.
    pub(crate) fn get(&self) -> Generation {
        match self.0.load(Ordering::Relaxed) {
            0 => Generation::Young,
            _ => Generation::Old,
        }
    }

    /// A read found its key in `found` (if the statement says where).
    pub(crate) fn found(&self, found: Option<Generation>) {
        if let Some(found) = found
            && self.get() != found
        {
            self.0.store(found as u8, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guess_follows_the_last_read_that_says_where() {
        let first = FirstGeneration::default();
        assert_eq!(first.get(), Generation::Young, "a new handle asks the young index first");
        first.found(Some(Generation::Old));
        assert_eq!(first.get(), Generation::Old);
        first.found(None);
        assert_eq!(first.get(), Generation::Old, "a row found neither way first says nothing");
        first.found(Some(Generation::Young));
        assert_eq!(first.get(), Generation::Young);
        assert_eq!(Generation::of_column(2), None);
        assert_eq!(Generation::Young.other(), Generation::Old);
    }
}
