//! Read-through (feature `remote`): objects the stash lacks, fetched from the remote,
//! inflated and hashed before they are stored or returned. A pack whose body went (a
//! collection deleted it since this machine's copy of the indexes was refreshed) is
//! forgotten and its objects read where the remote still holds them.

use std::collections::HashSet;
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::counts::Count;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::remote::{self, Kind, Location, Remote};
use crate::writer::Message;
use crate::writer::pending::Row;

use super::Stash;
use super::remote_large::Fetched;

impl Stash {
    /// Checks fetched members in parallel and stores those that pass (unless the handle is
    /// read-only); each result is the object (empty unless `bytes`, for a large one), `None`
    /// for a large one whose chunks are not all on the remote yet, or why it was refused.
    /// Packs with a member that failed are quarantined (`Remote::quarantine`).
    pub(super) fn check_and_store(
        &self,
        remote: &Remote,
        wanted: &[Location],
        members: Vec<Result<bytes::Bytes>>,
        bytes: bool,
    ) -> Result<Vec<Result<Option<Vec<u8>>>>> {
        let results: Vec<Result<Option<Vec<u8>>>> = self.pool.install(|| {
            wanted
                .par_iter()
                .zip(members)
                .map(|(location, member)| {
                    let member = member?;
                    if location.entry.kind == Kind::Manifest {
                        return self.large_from(remote, location, &member, bytes);
                    }
                    let raw =
                        remote::check(location, &member).inspect_err(|e| log::error!("{e}"))?;
                    if !self.is_read_only() {
                        self.store_checked(location, &raw, &member)?;
                    }
                    Ok(Some(raw))
                })
                .collect()
        });
        let damaged: HashSet<&str> = results
            .iter()
            .filter_map(|r| match r {
                Err(Error::RemoteCorrupt { pack, .. }) => Some(pack.as_str()),
                _ => None,
            })
            .collect();
        for pack in damaged {
            remote.quarantine(pack)?;
        }
        Ok(results)
    }

    /// A large object from its manifest member: stored, then read back whole if `bytes`
    /// (for a read-only handle, which cannot store it, a miss); `None` while its chunks
    /// are not all on the remote.
    fn large_from(
        &self,
        remote: &Remote,
        location: &Location,
        member: &[u8],
        bytes: bool,
    ) -> Result<Option<Vec<u8>>> {
        if self.is_read_only() {
            return Ok(None);
        }
        let fetched = self.store_large(remote, location, member).inspect_err(|e| {
            log::error!("{e}");
            if matches!(e, Error::RemoteCorrupt { pack, .. } if *pack != location.pack) {
                // A damaged chunk: its pack is quarantined by the caller, and the
                // manifest's goes with it, so that a push sends the object again (its
                // manifest still listed would keep the push from seeing it is needed).
                if let Err(e) = remote.quarantine(&location.pack) {
                    log::warn!("{e}");
                }
            }
        })?;
        match fetched {
            Fetched::Incomplete => Ok(None),
            Fetched::Stored if bytes => {
                let key = location.entry.key;
                let readers = self.readers.checkout()?;
                let row = self.select_row(&readers, &key)?;
                let row =
                    row.ok_or_else(|| Error::corrupt(key, "it went at once after its save"))?;
                Ok(Some(self.assemble_chunks(&key, row.raw_len, &row.data)?))
            }
            Fetched::Stored => Ok(Some(Vec::new())),
        }
    }

    /// Stores an object fetched and checked: as the gzip member it came in when the stash
    /// stores gzip and it fits one row (no second compression), else saved as any new
    /// object (a large one in chunks).
    fn store_checked(&self, location: &Location, raw: &[u8], member: &[u8]) -> Result<()> {
        let one_row = raw.len() <= crate::large::chunks::CHUNKED_ABOVE;
        if self.saving.codec.stores_gzip_members()
            && one_row
            && raw.len() as u64 <= self.saving.max_object
        {
            let row = Row {
                key: location.entry.key,
                raw_len: location.entry.raw_len,
                data: Arc::new(member.to_vec()),
                model: None,
            };
            self.shared.show_pending(&row);
            self.send(Message::Save(row))
        } else {
            self.save(raw).map(|_| ())
        }
    }

    /// Read-through: the objects under `keys` from the remote (checked, then stored),
    /// `None` for those it does not hold either.
    pub(super) fn read_through(&self, keys: &[Key]) -> Result<Vec<Option<Vec<u8>>>> {
        let Some(remote) = self.remote.as_deref() else {
            return Ok(vec![None; keys.len()]);
        };
        let mut found = self.read_through_from(remote, keys, true)?;
        for (i, result) in found.iter_mut().enumerate() {
            if let Err(e) = result
                && Remote::is_gone(e)
            {
                log::warn!("{}: {e}", keys[i]);
                *result = Ok(None);
            }
        }
        for object in found.iter().flatten().flatten() {
            self.shared.counts.add(Count::ReadThroughs, 1);
            self.shared.counts.add(Count::ReadThroughBytes, object.len() as u64);
        }
        found.into_iter().collect()
    }

    /// One read-through of `keys`. A pack whose body is not there (collected since this
    /// machine's copy of the indexes was refreshed) is forgotten, the copy refreshed and
    /// its objects read again where the remote still holds them (with `retry`); without,
    /// such a pack, if a refresh still lists it, is quarantined (listed without its body, it
    /// must go out of the listing for a push to send its objects again).
    fn read_through_from(
        &self,
        remote: &Remote,
        keys: &[Key],
        retry: bool,
    ) -> Result<Vec<Result<Option<Vec<u8>>>>> {
        let located = remote.locate(keys)?;
        let (at, wanted): (Vec<usize>, Vec<Location>) =
            located.into_iter().enumerate().filter_map(|(i, l)| l.map(|l| (i, l))).unzip();
        let mut found: Vec<Result<Option<Vec<u8>>>> = (0..keys.len()).map(|_| Ok(None)).collect();
        if wanted.is_empty() {
            return Ok(found);
        }
        let members = remote.fetch(&wanted);
        let gone: Vec<String> = wanted
            .iter()
            .zip(&members)
            .filter(|(_, m)| m.as_ref().is_err_and(Remote::is_gone))
            .map(|(l, _)| l.pack.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let checked = self.check_and_store(remote, &wanted, members, true)?;
        let mut again = Vec::new();
        for (i, result) in at.into_iter().zip(checked) {
            if result.as_ref().is_err_and(Remote::is_gone) {
                again.push(i);
            }
            found[i] = result;
        }
        if gone.is_empty() {
            return Ok(found);
        }
        if !retry {
            // Gone again: collected too since (a clean miss, found at the next read), or
            // still listed without its body.
            remote.forget(&gone)?;
            for pack in remote.listed(&gone)? {
                remote.quarantine(&pack)?;
            }
            return Ok(found);
        }
        remote.forget(&gone)?;
        let retried: Vec<Key> = again.iter().map(|&i| keys[i]).collect();
        for (i, result) in again.into_iter().zip(self.read_through_from(remote, &retried, false)?) {
            found[i] = result;
        }
        Ok(found)
    }
}
