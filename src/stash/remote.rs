//! The remote tier on a stash (feature `remote`): push, pull, read-through.
//!
//! A push lists the stash's objects in storage order (objects saved together, a model's,
//! go into the same packs, so reading them back takes few ranges), leaves out those the
//! remote holds, reads and checks the rest in parallel (a damaged local row is never
//! uploaded) and packs their gzip members; each pack is uploaded while the next is built.
//! A read of a key the stash lacks asks the remote; whatever comes back is inflated and
//! hashed before it is stored or returned.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use rayon::prelude::*;

use crate::chunks;
use crate::codec;
use crate::dict::{self, Codec};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::manifest::{self, ChunkRef, Manifest};
use crate::pending::Row;
use crate::remote::{
    self, Builder, DamagedPack, Kind, Location, PullReport, PushReport, Remote, RemoteStatus,
    Sealed,
};
use crate::writer::Message;

use super::Stash;
use super::remote_large::Fetched;

/// Keys looked up in the catalog, and rows read from the stash, at once by a push.
const PUSH_CHUNK: usize = 4_096;
/// Bytes of members a pull fetches before checking and storing them.
const PULL_BATCH: u64 = 32 << 20;

/// The remote tier of a stash opened with one ([`Stash::remote`]): push, pull, what the
/// remote lacks, refreshing its indexes, and waiting for background uploads.
#[derive(Clone, Copy)]
pub struct RemoteTier<'a> {
    stash: &'a Stash,
    remote: &'a Remote,
}

impl std::fmt::Debug for RemoteTier<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTier").field("url", &self.url()).finish_non_exhaustive()
    }
}

impl Stash {
    /// The remote tier, if the stash was opened with one
    /// ([`StashBuilder::remote`](crate::StashBuilder::remote)).
    #[must_use]
    pub fn remote(&self) -> Option<RemoteTier<'_>> {
        Some(RemoteTier { stash: self, remote: self.remote.as_deref()? })
    }
}

impl RemoteTier<'_> {
    /// The URL of the remote.
    #[must_use]
    pub fn url(&self) -> &str {
        self.remote.url()
    }

    /// Requests this handle has sent the remote so far (every list, get and put, retries
    /// included): what a read-through, a push or a pull cost, counted.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.remote.requests()
    }

    /// Brings the local copy of the remote's pack indexes up to date: lists the packs and
    /// reads the indexes of new ones.
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails.
    pub fn refresh(&self) -> Result<RemoteStatus> {
        self.remote.refresh()
    }

    /// The keys among `keys` the remote does not hold, in input order (no request per
    /// key: the local copy of the remote's indexes answers, refreshed if it is older than
    /// the refresh interval).
    ///
    /// # Errors
    /// As [`RemoteTier::refresh`].
    pub fn missing(&self, keys: &[Key]) -> Result<Vec<Key>> {
        let holds = self.remote.holds(keys)?;
        Ok(keys.iter().zip(holds).filter(|(_, held)| !held).map(|(k, _)| *k).collect())
    }

    /// Uploads every stored object the remote does not hold, in packs. An interrupted push
    /// (killed, remote down) leaves no pack half-visible; the next one sends only what the
    /// remote still lacks.
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails (packs uploaded before the failure stay
    /// uploaded); database errors as for reads.
    pub fn push(&self) -> Result<PushReport> {
        if !self.stash.is_read_only() {
            self.stash.flush()?;
        }
        self.stash.push_to(self.remote, None)
    }

    /// Fetches every object the remote holds and the stash lacks, checks each and stores
    /// it. Objects of a damaged pack that fail their check are left out and the pack is
    /// named in the report; everything else is stored.
    ///
    /// # Errors
    /// [`Error::ReadOnly`] for a read-only handle; [`Error::Remote`] if the remote fails
    /// (objects stored before stay stored).
    pub fn pull(&self) -> Result<PullReport> {
        self.stash.pull_from(self.remote)
    }

    /// Collects the remote's garbage: takes duplicate packs of concurrent pushes out of the
    /// listing, deletes the bodies of packs out of the listing for longer than the grace
    /// period (duplicates, damaged packs) and orphan bodies of killed pushes. One
    /// machine collects at a time (a lease on the remote); safe beside pushes and reads of
    /// other machines (`notes/design.md`, "Garbage collection").
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails or another machine holds the lease (what was
    /// done before stays done; the next collection finishes the job).
    pub fn collect(&self, options: &crate::CollectOptions) -> Result<crate::CollectReport> {
        self.remote.collect(options)
    }

    /// Keeps the remote within a size and an age: takes out of the listing the packs whose
    /// objects no machine used within `unused_for` (repacking first the objects still in
    /// use of mostly unused packs), then the least recently used packs beyond `max_size`;
    /// their bodies go after the grace period. "Used" is what any machine's push, pull or
    /// read-through reported. Holds the collectors' lease; safe beside other machines'
    /// pushes and reads (a push that relied on a pack taken out sends its objects again).
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails or another machine holds the lease.
    pub fn trim(&self, options: &crate::TrimOptions) -> Result<crate::TrimReport> {
        self.remote.trim(options)
    }

    /// The record of the last trim (when it finished, in ms since 1970, and its report as
    /// text), if one ran (one request).
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails.
    pub fn last_trim(&self) -> Result<Option<String>> {
        self.remote.last_trim()
    }

    /// Compacts the remote's pack indexes into key-sharded files, so that a new machine
    /// reads only the parts it needs instead of every index (`notes/design.md`,
    /// "Compacted indexes"). Holds the collectors' lease; readers see the old generation
    /// or the new one, whole.
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails or another machine holds the lease.
    pub fn compact(&self) -> Result<crate::CompactReport> {
        self.remote.compact(crate::CollectOptions::default().lease)
    }

    /// Bytes of indexes (pack indexes, compacted shards) this handle has read from the
    /// remote so far: what knowing where objects are cost.
    #[must_use]
    pub fn index_bytes(&self) -> u64 {
        self.remote.index_bytes()
    }

    /// The record of the last collection on the remote, if one ran (one request).
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails.
    pub fn last_collection(&self) -> Result<Option<crate::LastCollection>> {
        self.remote.last_collection()
    }

    /// Waits until every object saved by this handle before the call is on the remote
    /// (with write-behind on; without it, pushes everything, as [`RemoteTier::push`]).
    ///
    /// # Errors
    /// [`Error::Remote`] if the round that would have uploaded them failed (the upload is
    /// retried in the background); as [`Stash::flush`] for the local commit.
    pub fn flush(&self) -> Result<()> {
        if self.stash.is_read_only() {
            return self.push().map(drop);
        }
        self.stash.flush()?;
        match &self.stash.behind {
            Some(behind) => behind.wait(),
            None => self.push().map(drop),
        }
    }
}

impl Stash {
    /// Pushes `keys` (those the remote lacks), or every stored object the remote lacks.
    pub(super) fn push_to(&self, remote: &Remote, keys: Option<Vec<Key>>) -> Result<PushReport> {
        self.push_round(remote, keys, true)
    }

    /// One push; with `again`, what a trim took out of the listing while the push relied
    /// on it (found on the remote, so not sent) is sent by a second round.
    fn push_round(
        &self,
        remote: &Remote,
        keys: Option<Vec<Key>>,
        again: bool,
    ) -> Result<PushReport> {
        let before = remote.requests();
        let all = keys.is_none();
        let mut report = PushReport::default();
        let mut unpushed = Vec::new();
        let mut relied = Vec::new();
        let mut sort = |chunk: &mut Vec<Key>, report: &mut PushReport| -> Result<()> {
            // The catalog was refreshed below, once for the whole push.
            let holds = remote.known(chunk)?;
            for (key, held) in chunk.drain(..).zip(holds) {
                if held {
                    report.already_remote += 1;
                    relied.push(key);
                } else {
                    unpushed.push(key);
                }
            }
            Ok(())
        };
        match keys {
            Some(keys) => {
                remote.refresh_if_due()?;
                for chunk in keys.chunks(PUSH_CHUNK) {
                    sort(&mut chunk.to_vec(), &mut report)?;
                }
            }
            None => {
                remote.refresh()?;
                let mut chunk = Vec::with_capacity(PUSH_CHUNK);
                for entry in self.entries()? {
                    chunk.push(entry?.key);
                    if chunk.len() == PUSH_CHUNK {
                        sort(&mut chunk, &mut report)?;
                    }
                }
                sort(&mut chunk, &mut report)?;
            }
        }
        let corrupt = std::sync::atomic::AtomicU64::new(0);
        let packs = Packer {
            stash: self,
            remote,
            large: VecDeque::new(),
            packed: HashSet::new(),
            keys: unpushed.chunks(PUSH_CHUNK),
            ready: VecDeque::new(),
            builder: Builder::default(),
            pack_size: remote.config.pack_size as usize,
            corrupt: &corrupt,
        };
        let uploaded = remote.upload(packs)?;
        report.packs = uploaded.packs;
        report.objects = uploaded.objects;
        report.bytes = uploaded.bytes;
        report.corrupt = corrupt.into_inner();
        // What this stash holds and found on the remote counts as used there, reported
        // before the push says it is done: a trim that reads the report keeps it, and one
        // that took it out before is seen by the refresh below.
        // The names of what is now on the remote, after it (a push of every object).
        if all {
            let (names, uploaded) = self.push_names(remote)?;
            report.names = names;
            report.packs += uploaded.packs;
            report.bytes += uploaded.bytes;
        }
        remote.note_used(relied.iter().copied());
        remote.send_uses()?;
        if again && !relied.is_empty() && remote.refresh()?.gone_packs > 0 {
            let held = remote.known(&relied)?;
            let lost: Vec<Key> =
                relied.iter().zip(held).filter(|(_, held)| !held).map(|(k, _)| *k).collect();
            if !lost.is_empty() {
                log::info!(
                    "{} objects went from the remote during the push: sent again",
                    lost.len()
                );
                let second = self.push_round(remote, Some(lost), false)?;
                report.packs += second.packs;
                report.objects += second.objects;
                report.bytes += second.bytes;
                report.already_remote -= second.objects.min(report.already_remote);
                report.corrupt += second.corrupt;
            }
        }
        report.requests = remote.requests() - before;
        Ok(report)
    }

    /// Pulls what `remote` holds and the stash lacks (see [`RemoteTier::pull`]).
    fn pull_from(&self, remote: &Remote) -> Result<PullReport> {
        self.writer()?;
        let before = remote.requests();
        let status = remote.refresh()?;
        let mut report = PullReport::default();
        let mut unreachable = HashSet::new();
        let mut wanted: Vec<Location> = Vec::new();
        let mut wanted_bytes = 0;
        let mut named: Vec<Location> = Vec::new();
        for pack in remote.packs()? {
            // Chunks come with the manifests that list them, not as objects; names after
            // the objects.
            let (names, entries): (Vec<_>, Vec<_>) = remote
                .entries(&pack)?
                .into_iter()
                .filter(|e| e.kind != Kind::Chunk)
                .partition(|e| e.kind == Kind::Name);
            named.extend(names.into_iter().map(|entry| Location { pack: pack.clone(), entry }));
            let keys: Vec<Key> = entries.iter().map(|e| e.key).collect();
            let missing: HashSet<Key> = self.missing(&keys)?.into_iter().collect();
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

    /// Pushes the names whose objects the remote holds and whose names it lacks, in packs
    /// of their own: the names pushed and what went up.
    fn push_names(&self, remote: &Remote) -> Result<(u64, remote::Uploaded)> {
        let mut records: Vec<(Key, Vec<u8>)> = Vec::new();
        let mut chunk: Vec<(Vec<u8>, Key)> = Vec::with_capacity(PUSH_CHUNK);
        let mut sort = |chunk: &mut Vec<(Vec<u8>, Key)>| -> Result<()> {
            let derived: Vec<Key> = chunk.iter().map(|(n, _)| remote::name_key(n)).collect();
            let targets: Vec<Key> = chunk.iter().map(|(_, k)| *k).collect();
            let named = remote.known(&derived)?;
            let held = remote.known(&targets)?;
            for (((name, key), derived), (named, held)) in
                chunk.drain(..).zip(derived).zip(named.into_iter().zip(held))
            {
                if !named && held {
                    records.push((derived, remote::name_record(&name, &key)));
                }
            }
            Ok(())
        };
        let reader = self.readers.checkout()?;
        let mut failed = None;
        crate::names::each(&reader, |name, key| {
            chunk.push((name.to_vec(), key));
            if chunk.len() == PUSH_CHUNK
                && failed.is_none()
                && let Err(e) = sort(&mut chunk)
            {
                failed = Some(e);
            }
        })?;
        drop(reader);
        if let Some(e) = failed {
            return Err(e);
        }
        sort(&mut chunk)?;
        let count = records.len() as u64;
        let pack_size = remote.config.pack_size as usize;
        let level = self.saving.level;
        let mut records = records.into_iter().peekable();
        let packs = std::iter::from_fn(|| {
            let mut builder = Builder::default();
            while builder.body_len() < pack_size {
                let (derived, record) = records.next()?;
                let member = codec::compress(&record, level);
                builder.push(derived, record.len() as u64, &member, Kind::Name);
                if records.peek().is_none() {
                    break;
                }
            }
            (!builder.is_empty()).then(|| Ok(builder.seal()))
        });
        Ok((count, remote.upload(packs)?))
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

    /// Checks fetched members in parallel and stores those that pass (unless the handle is
    /// read-only); each result is the object (empty unless `bytes`, for a large one), `None`
    /// for a large one whose chunks are not all on the remote yet, or why it was refused.
    /// Packs with a member that failed are quarantined (`Remote::quarantine`).
    fn check_and_store(
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
                Ok(Some(self.assemble(&key, row.raw_len, &row.data)?))
            }
            Fetched::Stored => Ok(Some(Vec::new())),
        }
    }

    /// Stores an object fetched and checked: as the gzip member it came in when the stash
    /// stores gzip and it fits one row (no second compression), else saved as any new
    /// object (a large one in chunks).
    fn store_checked(&self, location: &Location, raw: &[u8], member: &[u8]) -> Result<()> {
        let one_row = raw.len() <= crate::chunks::CHUNKED_ABOVE;
        if self.saving.codec == Codec::Gzip && one_row && raw.len() as u64 <= self.saving.max_object
        {
            let row = Row {
                key: location.entry.key,
                raw_len: location.entry.raw_len,
                data: Arc::new(member.to_vec()),
            };
            self.shared.pending.insert(row.clone());
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

/// Builds packs of the objects of `keys` as they are asked for, so that one uploads while
/// the next is built. A chunked object goes as its chunks (those the remote lacks, each a
/// member under its own hash), read a pack's worth at a time, then its manifest.
struct Packer<'a, I> {
    stash: &'a Stash,
    remote: &'a Remote,
    keys: I,
    /// Checked members not yet in a pack: (key, raw length, member, kind).
    ready: VecDeque<(Key, u64, Vec<u8>, Kind)>,
    /// Chunked objects whose chunks are being packed: (key, manifest, next chunk).
    large: VecDeque<(Key, Manifest, usize)>,
    /// Chunks packed by this push (several objects may share one).
    packed: HashSet<Key>,
    builder: Builder,
    pack_size: usize,
    corrupt: &'a std::sync::atomic::AtomicU64,
}

impl<'a, I: Iterator<Item = &'a [Key]>> Packer<'a, I> {
    /// Reads the rows of `keys`, checks each and turns it into a gzip member; a chunked
    /// object's manifest is checked and queued for its chunks.
    fn read(&mut self, keys: &[Key]) -> Result<()> {
        let stash = self.stash;
        let rows = stash.lookup(
            keys,
            |row: Row| (row.raw_len as i64, row.data),
            |conn, key| Ok(stash.select_row(conn, key)?.map(|row| (row.raw_len, row.data))),
        )?;
        let corrupt = |e: Error| {
            log::error!("not pushed: {e}");
            self.corrupt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        let members: Vec<Option<Pushed>> = stash.pool.install(|| {
            keys.par_iter()
                .zip(rows)
                .map(|(key, row)| {
                    // Removed or evicted since it was listed: nothing to push.
                    let (raw_len, data) = row?;
                    if manifest::is_manifest(&data) {
                        return Manifest::decode(&data, raw_len)
                            .map(|m| Pushed::Large(*key, m))
                            .map_err(|reason| corrupt(Error::corrupt(*key, reason)))
                            .ok();
                    }
                    let raw = codec::decode_checked(key, raw_len, &data, &stash.dicts)
                        .map_err(corrupt)
                        .ok()?;
                    let member = if data.starts_with(&dict::MAGIC) {
                        codec::compress(&raw, stash.saving.level)
                    } else {
                        data.to_vec()
                    };
                    Some(Pushed::Member(*key, raw_len as u64, member))
                })
                .collect()
        });
        for pushed in members.into_iter().flatten() {
            match pushed {
                Pushed::Member(key, raw_len, member) => {
                    self.ready.push_back((key, raw_len, member, Kind::Object));
                }
                Pushed::Large(key, manifest) => self.large.push_back((key, manifest, 0)),
            }
        }
        Ok(())
    }

    /// Queues the next chunks of the first chunked object, about a pack's worth, and its
    /// manifest once they are all queued. A chunk that is missing or damaged here makes
    /// the object corrupt: its manifest is not pushed (the chunks pushed are harmless).
    fn read_chunks(&mut self) -> Result<()> {
        let Some((key, manifest, next)) = self.large.front_mut() else { return Ok(()) };
        let (key, start) = (*key, *next);
        let mut bytes = 0;
        let mut end = start;
        while end < manifest.chunks.len() && bytes < self.pack_size {
            bytes += manifest.chunks[end].len as usize;
            end += 1;
        }
        let wanted: Vec<ChunkRef> = manifest.chunks[start..end].to_vec();
        *next = end;
        let done = end == manifest.chunks.len();
        let keys: Vec<Key> = wanted.iter().map(|c| c.key).collect();
        let held = self.remote.known(&keys)?;
        // Chunks the remote holds are relied on, as objects are (`push_round`).
        self.remote.note_used(keys.iter().zip(&held).filter(|(_, h)| **h).map(|(k, _)| *k));
        let reader = self.stash.readers.checkout()?;
        for (chunk, held) in wanted.iter().zip(held) {
            if held || !self.packed.insert(chunk.key) {
                continue;
            }
            match chunks::read_member(&reader, chunk) {
                Ok(member) => {
                    self.ready.push_back((chunk.key, chunk.len.into(), member, Kind::Chunk))
                }
                Err(reason) => {
                    self.large.pop_front();
                    log::error!("not pushed: object {key}: {reason}");
                    self.corrupt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
        if done {
            let (key, manifest, _) = self.large.pop_front().expect("the front was read");
            let stored = manifest.encode();
            let member = codec::compress(&stored, self.stash.saving.level);
            self.ready.push_back((key, stored.len() as u64, member, Kind::Manifest));
        }
        Ok(())
    }
}

/// What a push makes of one row.
enum Pushed {
    Member(Key, u64, Vec<u8>),
    Large(Key, Manifest),
}

impl<'a, I: Iterator<Item = &'a [Key]>> Iterator for Packer<'a, I> {
    type Item = Result<Sealed>;

    fn next(&mut self) -> Option<Result<Sealed>> {
        loop {
            while let Some((key, raw_len, member, kind)) = self.ready.pop_front() {
                self.builder.push(key, raw_len, &member, kind);
                if self.builder.body_len() >= self.pack_size {
                    return Some(Ok(self.builder.seal()));
                }
            }
            if !self.large.is_empty() {
                if let Err(e) = self.read_chunks() {
                    return Some(Err(e));
                }
                continue;
            }
            match self.keys.next() {
                Some(keys) => {
                    if let Err(e) = self.read(keys) {
                        return Some(Err(e));
                    }
                }
                None if self.builder.is_empty() => return None,
                None => return Some(Ok(self.builder.seal())),
            }
        }
    }
}
