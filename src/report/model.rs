//! What the stash reports of a model ([`Stash::models`](crate::Stash::models),
//! [`Stash::model`](crate::Stash::model)).

use std::time::SystemTime;

use crate::key::Key;

/// A model: a root object and the objects it lists, kept and evicted together.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Model {
    /// The key of its root.
    pub root: Key,
    /// The name it was declared under, if any.
    pub name: Option<Vec<u8>>,
    /// Objects it lists, its root included.
    pub objects: u64,
    /// Of those, how many are not stored. While any is, the root reads as absent.
    pub missing: u64,
    /// Stored bytes of its objects that are stored (an object several models list counts
    /// in each).
    pub stored_bytes: u64,
    /// Its last use: its declaration, or a read of it or of one of its objects.
    pub last_use: Option<SystemTime>,
    /// Whether it is pinned: never evicted.
    pub pinned: bool,
}

impl Model {
    /// Whether every object it lists is stored: then, and only then, its root can be read.
    #[must_use]
    pub fn complete(&self) -> bool {
        self.missing == 0
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.root)?;
        if let Some(name) = &self.name {
            write!(f, " {}", String::from_utf8_lossy(name))?;
        }
        write!(f, ": {} objects, {} bytes", self.objects, self.stored_bytes)?;
        match self.missing {
            0 => write!(f, ", complete")?,
            n => write!(f, ", {n} missing (the root reads as absent)")?,
        }
        if self.pinned {
            write!(f, ", pinned")?;
        }
        Ok(())
    }
}
