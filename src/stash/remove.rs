//! Removing objects: one transaction for any number of keys, committed before returning.

use crate::error::Result;
use crate::key::Key;
use crate::writer::{Remove, asked};

use super::Stash;

impl Stash {
    /// Deletes the object under `key`; returns whether one was stored. Committed when it
    /// returns.
    ///
    /// # Errors
    /// [`Error::WriterStopped`](crate::Error::WriterStopped) if the writer has stopped.
    pub fn remove(&self, key: &Key) -> Result<bool> {
        Ok(self.remove_all(std::slice::from_ref(key))?[0])
    }

    /// Deletes the objects under `keys` in one transaction; returns whether each was
    /// stored, in input order (a key given twice is found the first time only). Committed
    /// when it returns: one commit for the whole call, however many keys.
    ///
    /// # Errors
    /// [`Error::WriterStopped`](crate::Error::WriterStopped) if the writer has stopped;
    /// nothing of the call is removed then.
    pub fn remove_all(&self, keys: &[Key]) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.ask(|answer| asked(Remove { keys: keys.to_vec(), found: Vec::new() }, answer))
    }
}
