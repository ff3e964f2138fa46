//! The remote tier on a stash (feature `remote`): the `RemoteTier` handle, and push (its
//! packs built in `packer.rs`; pull in `remote_pull.rs`, read-through in
//! `read_through.rs`).
//!
//! A push lists the stash's objects in storage order (objects saved together, a model's,
//! go into the same packs, so reading them back takes few ranges), leaves out those the
//! remote holds, reads and checks the rest in parallel (a damaged local row is never
//! uploaded) and packs their gzip members; each pack is uploaded while the next is built.
//! A read of a key the stash lacks asks the remote; whatever comes back is inflated and
//! hashed before it is stored or returned.

use crate::codec;
use crate::error::{DbContext, Result};
use crate::key::Key;
use crate::remote::{self, Builder, Kind, PullReport, PushReport, Remote, RemoteStatus};

use super::Stash;
use super::packer::Packer;

/// Keys looked up in the catalog, and rows read from the stash, at once by a push.
pub(super) const PUSH_CHUNK: usize = 4_096;

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
    /// other machines (`notes/remote.md`, "Garbage collection").
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails or another machine holds the lease (what was
    /// done before stays done; the next collection finishes the job).
    pub fn collect(
        &self,
        options: &crate::remote::CollectOptions,
    ) -> Result<crate::remote::CollectReport> {
        self.remote.collect(options)
    }

    /// Clears the collectors' lease of a machine that is gone (a collection or trim killed
    /// there keeps every other collector out for its lease, 10 minutes, plus the clock
    /// margin): the holder it cleared, or `None` if nobody held it. A holder that is alive
    /// finds its lease gone at its next renewal and stops; what it did stays safe.
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails, or the holder renewed it meanwhile.
    pub fn break_lease(&self) -> Result<Option<String>> {
        self.remote.break_lease()
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
    pub fn trim(&self, options: &crate::remote::TrimOptions) -> Result<crate::remote::TrimReport> {
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
    /// reads only the parts it needs instead of every index (`notes/remote.md`,
    /// "Compacted indexes"). Holds the collectors' lease; readers see the old generation
    /// or the new one, whole.
    ///
    /// # Errors
    /// [`Error::Remote`] if the remote fails or another machine holds the lease.
    pub fn compact(&self) -> Result<crate::remote::CompactReport> {
        self.remote.compact(crate::remote::CollectOptions::default().lease)
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
    pub fn last_collection(&self) -> Result<Option<crate::remote::LastCollection>> {
        self.remote.last_collection()
    }

    /// Sends now the uses this handle noted (the objects it read through, pulled or found
    /// pushed) and those closed handles of this machine parked beside the stash. Without
    /// it they go up within 10 minutes, with a push or a pull, or once 100,000 wait: a
    /// machine's short-lived processes send one report between them, and a trim on
    /// another machine sees their uses from then on.
    ///
    /// # Errors
    /// [`Error::Remote`] if the report could not be sent (the uses wait for the next).
    pub fn report_uses(&self) -> Result<()> {
        self.remote.send_uses()
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
                remote.sync()?;
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
        let packs = Packer::new(self, remote, unpushed.chunks(PUSH_CHUNK), &corrupt);
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
            report.models = self.push_models(remote)?;
        }
        remote.note_used(relied.iter().copied());
        remote.send_uses()?;
        if again && !relied.is_empty() && remote.sync()?.status.gone_packs > 0 {
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

    /// Pushes the complete models the remote has no file for and whose objects it all
    /// holds (`remote/models.rs`): how many.
    fn push_models(&self, remote: &Remote) -> Result<u64> {
        // Asked of the remote only when the stash has models: no request otherwise.
        let mut there: Option<std::collections::HashSet<Key>> = None;
        let local: Vec<(Key, Vec<Key>)> = self.readers.checkout()?.in_transaction(|conn| {
            if !crate::db::models::exist(conn)? {
                return Ok(Vec::new());
            }
            let mut local = Vec::new();
            for model in crate::db::models::all(conn)? {
                let (Some(root), crate::db::models::State::Complete) = (model.root, model.state)
                else {
                    continue;
                };
                if there.is_none() {
                    there = Some(remote.model_roots()?);
                }
                if there.as_ref().is_some_and(|there| there.contains(&root)) {
                    continue;
                }
                // Its rows, the root's among them, by their runs.
                let mut members = Vec::with_capacity(model.runs.len() as usize);
                for (table, start, end) in model.runs.runs() {
                    let name = self.shared.schema.layout.table_name(usize::from(table));
                    let sql = format!("SELECT key FROM {name} WHERE rowid >= ?1 AND rowid < ?2");
                    let mut stmt = conn.prepare_cached(&sql).context(|| name.clone())?;
                    let keys = stmt
                        .query_map([start, end], |r| r.get::<_, Vec<u8>>(0))
                        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                        .context(|| format!("reading the members of model {root}"))?;
                    members.extend(keys.iter().filter_map(|k| Key::from_slice(k)));
                }
                local.push((root, members));
            }
            Ok(local)
        })?;
        if local.is_empty() {
            return Ok(0);
        }
        let mut ready = Vec::new();
        for (root, members) in local {
            if remote.known(&members)?.into_iter().all(|held| held) {
                ready.push((root, members));
            }
        }
        remote.put_models(&ready)
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
        crate::db::names::each(&reader, |name, key| {
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
}
