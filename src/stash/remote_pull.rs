//! Pull (feature `remote`): every object the remote holds and the stash lacks, fetched
//! pack by pack, checked and stored; then the remote's names of those objects.

use std::collections::HashSet;

use crate::codec;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::remote::{self, DamagedPack, Kind, Location, PullReport, Remote};

use super::Stash;
use super::remote::PUSH_CHUNK;

/// Bytes of members a pull fetches before checking and storing them.
const PULL_BATCH: u64 = 32 << 20;

impl Stash {
    /// Pulls what `remote` holds and the stash lacks (see [`RemoteTier::pull`]).
    pub(super) fn pull_from(&self, remote: &Remote) -> Result<PullReport> {
        self.writer()?;
        let before = remote.requests();
        let status = remote.sync()?.status;
        let mut report = PullReport::default();
        let mut unreachable = HashSet::new();
        let mut wanted: Vec<Location> = Vec::new();
        let mut wanted_bytes = 0;
        let mut named: Vec<Location> = Vec::new();
        // A key in several packs (concurrent pushes) is fetched and counted once.
        let mut seen: HashSet<Key> = HashSet::new();
        for pack in remote.packs()? {
            // Chunks come with the manifests that list them, not as objects; names after
            // the objects.
            let (names, entries): (Vec<_>, Vec<_>) = remote
                .entries(&pack)?
                .into_iter()
                .filter(|e| e.kind != Kind::Chunk)
                .partition(|e| e.kind == Kind::Name);
            named.extend(names.into_iter().map(|entry| Location { pack: pack.clone(), entry }));
            let entries: Vec<_> = entries.into_iter().filter(|e| seen.insert(e.key)).collect();
            let keys: Vec<Key> = entries.iter().map(|e| e.key).collect();
            let missing: HashSet<Key> = self.missing_uncounted(&keys)?.into_iter().collect();
            report.already_local += (keys.len() - missing.len()) as u64;
            for entry in entries.into_iter().filter(|e| missing.contains(&e.key)) {
                wanted_bytes += u64::from(entry.len);
                wanted.push(Location { pack: pack.clone(), entry });
            }
            if wanted_bytes >= PULL_BATCH {
                self.pull_batch(
                    remote,
                    &std::mem::take(&mut wanted),
                    &mut report,
                    &mut unreachable,
                )?;
                wanted_bytes = 0;
            }
        }
        self.pull_batch(remote, &wanted, &mut report, &mut unreachable)?;
        self.flush()?;
        report.names = self.pull_names(remote, &named, &mut unreachable)?;
        self.flush()?;
        if let Err(e) = remote.send_uses() {
            log::warn!("{e}");
        }
        report.unreachable = status.unreadable_indexes + unreachable.len() as u64;
        report.requests = remote.requests() - before;
        Ok(report)
    }

    /// Fetches, checks and stores `wanted`; packs that cannot be read go into
    /// `unreachable`, and the pull goes on with the others.
    fn pull_batch(
        &self,
        remote: &Remote,
        wanted: &[Location],
        report: &mut PullReport,
        unreachable: &mut HashSet<String>,
    ) -> Result<()> {
        if wanted.is_empty() {
            return Ok(());
        }
        let members = remote.fetch(wanted);
        let checked = self.check_and_store(remote, wanted, members, false)?;
        for (location, result) in wanted.iter().zip(checked) {
            match result {
                Ok(Some(_)) => {
                    report.objects += 1;
                    report.bytes += u64::from(location.entry.len);
                }
                // A large object whose chunks are not all on the remote yet.
                Ok(None) => {
                    unreachable.insert(location.pack.clone());
                }
                Err(Error::RemoteCorrupt { pack, reason, .. }) => {
                    match report.damaged.iter_mut().find(|d| d.pack == pack) {
                        Some(d) => d.objects += 1,
                        None => report.damaged.push(DamagedPack { pack, objects: 1, reason }),
                    }
                }
                Err(Error::Remote { .. }) => {
                    unreachable.insert(location.pack.clone());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Saves here the remote's names of `named` whose objects are here and whose names are
    /// not; the number saved.
    fn pull_names(
        &self,
        remote: &Remote,
        named: &[Location],
        unreachable: &mut HashSet<String>,
    ) -> Result<u64> {
        let mut saved = 0;
        for batch in named.chunks(PUSH_CHUNK) {
            let mut pairs: Vec<(Vec<u8>, Key)> = Vec::new();
            for (location, member) in batch.iter().zip(remote.fetch(batch)) {
                let member = match member {
                    Ok(member) => member,
                    Err(Error::Remote { .. }) => {
                        unreachable.insert(location.pack.clone());
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let parsed =
                    codec::decompress(&member, location.entry.raw_len).and_then(|record| {
                        let (name, key) = remote::parse_name(&record)?;
                        (remote::name_key(name) == location.entry.key)
                            .then(|| (name.to_vec(), key))
                            .ok_or_else(|| "a name record under another name's key".to_string())
                    });
                match parsed {
                    Ok(pair) => pairs.push(pair),
                    Err(reason) => {
                        log::error!("name record in remote pack {}: {reason}", location.pack);
                        remote.quarantine(&location.pack)?;
                    }
                }
            }
            let names: Vec<&[u8]> = pairs.iter().map(|(n, _)| n.as_slice()).collect();
            let local = self.resolve(&names)?;
            let new: Vec<(Vec<u8>, Key)> =
                pairs.into_iter().zip(local).filter(|(_, l)| l.is_none()).map(|(p, _)| p).collect();
            saved += self.name(&new)?.into_iter().filter(|named| *named).count() as u64;
        }
        Ok(saved)
    }
}
