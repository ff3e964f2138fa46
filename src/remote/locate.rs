//! Where the remote holds keys: the local copy of the indexes first, then the compacted
//! index's shards (`sharded.rs`), then a refresh if one is due.

use std::sync::PoisonError;

use futures::StreamExt;

use super::catalog::Location;
use super::client::Part;
use super::{READS_IN_FLIGHT, Remote, pack};
use crate::error::Result;
use crate::key::Key;

/// Keys a lookup of many first finds in the shards to learn which packs hold them.
const SHARD_PROBE: usize = 8;

impl Remote {
    /// Where the remote holds each of `keys`; keys the catalog lacks make it refresh once
    /// if it is due.
    pub(crate) fn locate(&self, keys: &[Key]) -> Result<Vec<Option<Location>>> {
        // A new machine of a compacted remote finds keys in its shards before it lists
        // anything (sharded.rs).
        self.bootstrap()?;
        let found = self.locate_known(keys)?;
        if found.iter().all(Option::is_some) {
            return Ok(found);
        }
        let last = *self.refreshed.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < self.config.refresh) {
            return Ok(found);
        }
        self.refresh_unless_failing()?;
        self.locate_known(keys)
    }

    /// Where the catalog, and the compacted index it reads in parts if any, say the remote
    /// holds each of `keys`.
    fn locate_known(&self, keys: &[Key]) -> Result<Vec<Option<Location>>> {
        let mut found = self.catalog.locate(keys)?;
        if self.catalog.manifest()?.is_none() {
            return Ok(found);
        }
        let mut missing: Vec<usize> = (0..keys.len()).filter(|&i| found[i].is_none()).collect();
        // Many keys are most likely a model's, pushed together into few packs: a few keys
        // found in the shards name those packs, whose whole indexes then answer for the
        // rest (a pack index costs 52 bytes a key of that pack; shard blocks hit at random
        // would be most of the shards).
        while missing.len() > SHARD_PROBE {
            let sample: Vec<Key> = missing.iter().take(SHARD_PROBE).map(|&i| keys[i]).collect();
            let known = self.catalog.packs()?;
            let packs: std::collections::BTreeSet<String> = self
                .locate_in_shards(&sample)?
                .into_iter()
                .flatten()
                .map(|l| l.pack)
                .filter(|p| !known.contains(p))
                .collect();
            if packs.is_empty() {
                break;
            }
            let packs: Vec<String> = packs.into_iter().collect();
            self.read_indexes(&packs)?;
            self.catalog.mark_covered(&packs)?;
            let asked: Vec<Key> = missing.iter().map(|&i| keys[i]).collect();
            for (&i, location) in missing.iter().zip(self.catalog.locate(&asked)?) {
                found[i] = location;
            }
            missing.retain(|&i| found[i].is_none());
        }
        if !missing.is_empty() {
            let asked: Vec<Key> = missing.iter().map(|&i| keys[i]).collect();
            for (i, location) in missing.into_iter().zip(self.locate_in_shards(&asked)?) {
                found[i] = location;
            }
        }
        Ok(found)
    }

    /// Reads the indexes of `packs` into the catalog (those that cannot be read are left
    /// to the shards).
    fn read_indexes(&self, packs: &[String]) -> Result<()> {
        let read = self.runtime.block_on(async {
            futures::stream::iter(packs.iter().map(|name| async move {
                (name, self.client.get_if_there(Part::Index, name).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
        });
        for (name, bytes) in read {
            if let Some(bytes) = bytes? {
                match pack::parse_index(name, &bytes) {
                    Ok(index) => self.catalog.add(name, &index)?,
                    Err(reason) => log::error!("remote index {name} is damaged: {reason}"),
                }
            }
        }
        Ok(())
    }

    /// Which of `keys` the remote is known to hold (after a refresh if one is due).
    pub(crate) fn holds(&self, keys: &[Key]) -> Result<Vec<bool>> {
        self.refresh_if_due()?;
        self.known(keys)
    }

    /// Which of `keys` the catalog (and the compacted index it reads in parts) knows the
    /// remote to hold, without refreshing it.
    pub(crate) fn known(&self, keys: &[Key]) -> Result<Vec<bool>> {
        if self.catalog.manifest()?.is_none() {
            return self.catalog.holds(keys);
        }
        Ok(self.locate_known(keys)?.iter().map(Option::is_some).collect())
    }
}
