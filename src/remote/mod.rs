//! The shared remote tier: a stash's objects in packs on an S3-compatible object store
//! (feature `remote`).
//!
//! Objects of a few hundred bytes are far too small to be remote files of their own: a
//! push packs many into one file with an index beside it (`pack.rs`), names both by their
//! content, and uploads the body before the index, so a pack is visible (listed) only
//! once whole and a push stopped at any point leaves nothing half-visible. Each machine
//! keeps a local copy of every index (`catalog/mod.rs`), so "does the remote hold this key,
//! and where" costs no request; the copy is refreshed by listing what the pack log
//! (`pack_log.rs`) recorded since the last refresh, one request however many packs the
//! remote holds, and reading the new indexes. Reads of objects the stash lacks fetch byte ranges of the packs,
//! neighbours merged, and check every object's hash before it is stored or returned.
//!
//! - `config.rs`: where the remote is ([`RemoteConfig`]).
//! - `client.rs`: the S3 client, its runtime and its request count.
//! - `pack.rs`: the pack and index format.
//! - `pack_log.rs`: the pack log, which packs came and went, listed in time order.
//! - `catalog/`: the local copy of the remote's indexes.
//! - `locate.rs`: where the remote holds keys (the catalog, the shards, refreshes).
//! - `report.rs`: what push, pull and refresh did.
//! - `collect.rs`: garbage collection, two-phase (out of the listing, then deleted).
//! - `lease.rs`: the lease that keeps two collections from running at once.
//! - `names.rs`: names on the remote, so objects are read through by an application's ids.
//! - `shard.rs`, `compact.rs`, `sharded.rs`: compacted indexes: their format, writing
//!   them, reading them in parts.
//! - `usage.rs`: use reports, which objects machines used and when.
//! - `trim.rs`: keeping the remote within a size and an age.
//! - `stash/remote.rs`: push, pull and read-through on [`Stash`](crate::Stash).

mod catalog;
mod client;
mod collect;
mod compact;
mod config;
mod lease;
mod locate;
mod models;
mod names;
mod pack;
mod pack_log;
mod report;
mod shard;
mod sharded;
mod trim;
mod usage;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;

pub use collect::{CollectOptions, CollectReport, LastCollection};
pub use compact::CompactReport;
pub use config::{DEFAULT_PACK_SIZE, RemoteConfig};
pub use report::{DamagedPack, PullReport, PushReport, RemoteStatus};
pub use trim::{TrimOptions, TrimReport};

pub(crate) use catalog::Location;
pub(crate) use names::{key_of as name_key, parse_any as parse_name, record as name_record};
pub(crate) use pack::{Builder, Kind, Sealed};

use crate::codec;
use crate::error::{Error, Result};
use crate::key::Key;
use catalog::Catalog;
use client::{Client, Part};

/// Indexes read at once by a refresh, and packs read at once by a fetch.
const READS_IN_FLIGHT: usize = 16;
/// Refreshes a trim or a collection makes before it decides, while indexes cannot be read.
const REFRESH_TRIES: usize = 3;
/// After a listing fails, how long reads that would refresh answer with that failure
/// instead of waiting for the remote's timeouts again.
const QUIET_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// What an upload sent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Uploaded {
    pub packs: u64,
    pub objects: u64,
    /// Bytes of pack bodies.
    pub bytes: u64,
}

/// What bringing the catalog up to date did ([`Remote::sync`]).
pub(crate) struct Synced {
    /// The compacted index this catalog reads parts of.
    pub compacted: Option<shard::Manifest>,
    /// What the refresh did; what the remote holds (packs, objects, bytes, the local
    /// copy's bytes) is left at 0: [`Remote::refresh`] counts it.
    pub status: RemoteStatus,
}

/// A stash's remote: the client, the runtime it runs on and the local copy of the indexes.
pub(crate) struct Remote {
    pub config: RemoteConfig,
    client: Client,
    catalog: Catalog,
    runtime: tokio::runtime::Runtime,
    /// When the catalog was last brought up to date with the remote's listing.
    refreshed: Mutex<Option<Instant>>,
    /// When a listing last failed, and why.
    failed: Mutex<Option<(Instant, String)>>,
    /// Objects used and not yet reported.
    usage: usage::Usage,
    /// Where the uses a closing handle did not send wait for a later one (`usage.rs`).
    parked: std::path::PathBuf,
}

impl Remote {
    pub(crate) fn open(stash: &Path, config: RemoteConfig, busy: Duration) -> Result<Remote> {
        config.validate()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("objstash-remote")
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the remote's runtime", e))?;
        let client = Client::new(&config)?;
        let catalog = Catalog::open(stash, &config.url(), busy)?;
        Ok(Remote {
            config,
            client,
            catalog,
            runtime,
            refreshed: Mutex::new(None),
            failed: Mutex::new(None),
            usage: usage::Usage::default(),
            parked: crate::files::sibling(stash, usage::PARKED),
        })
    }

    /// Requests sent so far by this handle.
    pub(crate) fn requests(&self) -> u64 {
        self.client.requests()
    }

    /// Bytes of indexes (pack indexes, compacted shards) read so far by this handle.
    pub(crate) fn index_bytes(&self) -> u64 {
        self.client.index_bytes()
    }

    pub(crate) fn url(&self) -> &str {
        self.client.url()
    }

    /// Brings the catalog up to date ([`Remote::sync`]) and counts what the remote holds:
    /// a pass over every key this machine holds, so only `remote status` asks for it.
    pub(crate) fn refresh(&self) -> Result<RemoteStatus> {
        let Synced { compacted, status } = self.sync()?;
        let mut counts = self.catalog.counts()?;
        // Reading a compacted index: what it covers less the packs gone since (their
        // objects estimated from their bytes), and what was pushed since.
        if let Some(m) = &compacted {
            let (gone_packs, gone_bytes) = self.catalog.gone_counts()?;
            let gone_objects =
                (m.objects as f64 * gone_bytes as f64 / m.bytes.max(1) as f64).round() as u64;
            counts.packs += m.packs.saturating_sub(gone_packs);
            counts.objects += m.objects.saturating_sub(gone_objects);
            counts.bytes += m.bytes.saturating_sub(gone_bytes);
        }
        Ok(RemoteStatus {
            packs: counts.packs,
            objects: counts.objects,
            bytes: counts.bytes,
            local_index_bytes: counts.file_bytes,
            ..status
        })
    }

    /// Brings the catalog up to date: lists what is new in the pack log since the last
    /// refresh (one request), or the whole log at a catalog's first refresh, and reads the
    /// indexes the catalog lacks.
    pub(crate) fn sync(&self) -> Result<Synced> {
        let before = self.client.requests();
        let started = pack_log::now_ms();
        // A new catalog of a remote with a compacted index starts from it (sharded.rs).
        let compacted = self.bootstrap()?.then(|| self.catalog.manifest()).transpose()?.flatten();
        // The log is the listing: a pack is on the remote once its event is, and a listing
        // of the whole log (a catalog's first, then one a day in case a clock was off by
        // more than the margin) sees what listings from a cursor see. Reading a compacted
        // index, the whole log is what came after it.
        let cursor = self.catalog.cursor()?.and_then(|(cursor, whole)| {
            if started.saturating_sub(whole) < pack_log::LIST_WHOLE_EVERY.as_millis() as u64 {
                Some(cursor)
            } else {
                compacted.as_ref().map(|m| m.covered_ms)
            }
        });
        let after = cursor.map(|cursor| pack_log::start_after(cursor, self.config.clock_skew));
        // The packs known before the listing: one a push of this machine records while the
        // log is listed is not taken for gone by a listing of the whole log that missed it.
        let known = self.catalog.packs()?;
        let listing = self.runtime.block_on(self.client.list_log(after.as_deref()));
        *self.failed.lock().unwrap_or_else(PoisonError::into_inner) =
            listing.as_ref().err().map(|e| (Instant::now(), e.to_string()));
        let listing = listing?;
        let listed = listing.len() as u64;
        let (mut new, gone) =
            pack_log::changes(&listing, &known, self.catalog.unread()?, cursor.is_none());
        // Packs the compacted index holds are not read again.
        if let Some(m) = &compacted {
            let recent: std::collections::HashSet<&String> = m.recent.iter().collect();
            new.retain(|name| !recent.contains(name));
        }
        self.catalog.remove(&gone)?;
        if let Some(m) = &compacted {
            self.catalog.mark_gone(&gone)?;
            self.count_gone_covered(m, &gone)?;
        }
        let gone_packs = gone.iter().filter(|name| known.contains(*name)).count() as u64;
        let read = self.runtime.block_on(async {
            futures::stream::iter(new.iter().map(|name| async move {
                (name, self.client.get_if_there(Part::Index, name).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
        });
        let mut damaged = Vec::new();
        let mut unreadable = Vec::new();
        let mut added = 0;
        for (name, bytes) in read {
            // An index that cannot be read now (a volume server down) is read at the next
            // refresh; the others are usable meanwhile.
            let bytes = match bytes {
                Ok(Some(bytes)) => bytes,
                // Taken out of the listing since it was announced.
                Ok(None) => continue,
                Err(e) => {
                    log::warn!("{e}");
                    unreadable.push(name.clone());
                    continue;
                }
            };
            match pack::parse_index(name, &bytes) {
                Ok(index) => {
                    self.catalog.add(name, &index)?;
                    added += 1;
                }
                Err(reason) => {
                    log::error!("remote index {name} on {} is damaged: {reason}", self.url());
                    damaged.push(name.clone());
                }
            }
        }
        let settled: Vec<String> =
            new.iter().chain(&gone).filter(|name| !unreadable.contains(name)).cloned().collect();
        self.catalog.mark_unread(&unreadable, &settled)?;
        self.catalog.advance_cursor(started, cursor.is_none())?;
        *self.refreshed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let status = RemoteStatus {
            url: self.url().to_string(),
            index_shards: compacted.as_ref().map_or(0, |m| m.shards.len() as u64),
            new_packs: added,
            gone_packs,
            damaged_indexes: damaged,
            unreadable_indexes: unreadable.len() as u64,
            full_listing: cursor.is_none(),
            listed,
            requests: self.client.requests() - before,
            ..RemoteStatus::default()
        };
        Ok(Synced { compacted, status })
    }

    /// Brings the catalog up to date, again while indexes cannot be read (a few times): a
    /// trim or a collection does not see a pack whose index it has not read.
    pub(crate) fn sync_every_index(&self) -> Result<Synced> {
        let mut synced = self.sync()?;
        for _ in 1..REFRESH_TRIES {
            if synced.status.unreadable_indexes == 0 {
                break;
            }
            synced = self.sync()?;
        }
        Ok(synced)
    }

    /// Refreshes unless the catalog was refreshed within the refresh interval.
    pub(crate) fn refresh_if_due(&self) -> Result<()> {
        let last = *self.refreshed.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|t| t.elapsed() >= self.config.refresh) {
            self.refresh_unless_failing()?;
        }
        Ok(())
    }

    /// Whether a listing failed in the last seconds.
    pub(crate) fn failing_recently(&self) -> bool {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < QUIET_AFTER_FAILURE)
    }

    /// Records a failure of the remote, which reads that would refresh answer for a few
    /// seconds without a request.
    pub(crate) fn note_failure(&self, e: &Error) {
        *self.failed.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), e.to_string()));
    }

    /// Refreshes, unless a listing failed in the last seconds: then that failure again,
    /// at once, so that reads of a stash whose remote is unreachable do not each wait for
    /// the remote's timeouts.
    fn refresh_unless_failing(&self) -> Result<()> {
        if let Some((at, reason)) = &*self.failed.lock().unwrap_or_else(PoisonError::into_inner)
            && at.elapsed() < QUIET_AFTER_FAILURE
        {
            return Err(Error::Remote {
                operation: format!(
                    "listing the packs of {} ({:.1} s ago; tried again after {} s)",
                    self.url(),
                    at.elapsed().as_secs_f64(),
                    QUIET_AFTER_FAILURE.as_secs()
                ),
                source: std::sync::Arc::new(std::io::Error::other(reason.clone())),
            });
        }
        self.sync().map(drop)
    }

    /// Every object of the pack `name` the catalog knows.
    pub(crate) fn entries(&self, name: &str) -> Result<Vec<pack::Entry>> {
        self.materialize()?;
        self.catalog.entries(name)
    }

    /// Names of the packs the catalog knows (every entry of a compacted index read first).
    pub(crate) fn packs(&self) -> Result<Vec<String>> {
        self.materialize()?;
        let mut packs: Vec<String> = self.catalog.packs()?.into_iter().collect();
        packs.sort();
        Ok(packs)
    }

    /// The gzip members of `wanted`, read pack by pack (each pack's ranges in one or few
    /// requests, packs in parallel). A pack that cannot be read fails all its objects.
    pub(crate) fn fetch(&self, wanted: &[Location]) -> Vec<Result<Bytes>> {
        self.note_used(wanted.iter().map(|l| l.entry.key));
        self.fetch_unnoted(wanted)
    }

    /// As [`Remote::fetch`], without noting a use (a trim moving objects).
    fn fetch_unnoted(&self, wanted: &[Location]) -> Vec<Result<Bytes>> {
        let mut by_pack: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, location) in wanted.iter().enumerate() {
            by_pack.entry(&location.pack).or_default().push(i);
        }
        let fetched = self.runtime.block_on(async {
            futures::stream::iter(by_pack.into_iter().map(|(pack, indices)| async move {
                let ranges: Vec<_> = indices.iter().map(|&i| wanted[i].entry.range()).collect();
                (indices, self.client.get_ranges(pack, &ranges).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
        });
        let answers = fetched.into_iter().flat_map(|(indices, result)| {
            let answers: Vec<(usize, Result<Bytes>)> = match result {
                Ok(parts) => indices.into_iter().zip(parts.into_iter().map(Ok)).collect(),
                Err(e) => indices.into_iter().map(|i| (i, Err(e.duplicate()))).collect(),
            };
            answers
        });
        crate::parts::scatter(wanted.len(), answers)
    }

    /// Whether a fetch failed because the pack's body is not there.
    pub(crate) fn is_gone(e: &Error) -> bool {
        client::is_not_found(e)
    }

    /// Forgets packs whose bodies were not there (a collection deleted them after
    /// taking them out of the listing, which this machine's copy of the indexes had not
    /// seen yet) and refreshes, so that their objects are found where the remote still
    /// holds them.
    pub(crate) fn forget(&self, packs: &[String]) -> Result<()> {
        log::info!("{} packs of {} are gone: refreshing", packs.len(), self.url());
        self.catalog.remove(packs)?;
        self.sync().map(drop)
    }

    /// Which of `packs` the catalog lists.
    pub(crate) fn listed(&self, packs: &[String]) -> Result<Vec<String>> {
        let known = self.catalog.packs()?;
        Ok(packs.iter().filter(|p| known.contains(*p)).cloned().collect())
    }

    /// Takes a pack whose bytes failed their check out of the remote's listing: its index
    /// moves to `damaged/`, so every machine's next refresh forgets the pack and the next
    /// push of a machine holding its objects uploads them again (the same objects in the
    /// same order make the same pack, which overwrites the damaged body). Objects are
    /// content-addressed, so a failed check is damage, never a newer version.
    pub(crate) fn quarantine(&self, name: &str) -> Result<()> {
        log::error!(
            "remote pack {name} on {} is damaged: taking it out of the listing",
            self.url()
        );
        self.runtime.block_on(async {
            match self.client.get(Part::Index, name).await {
                Ok(index) => self.client.put(Part::Damaged, name, index, false).await?,
                // Another reader moved it already.
                Err(Error::Remote { .. }) => {}
                Err(e) => return Err(e),
            }
            self.client.delete(Part::Index, name).await?;
            // Other machines' next refreshes forget the pack.
            let event = pack_log::name(pack_log::now_ms(), name, pack_log::What::Gone);
            self.client.put(Part::Log, &event, Bytes::new(), true).await
        })?;
        self.catalog.remove(&[name.to_string()])
    }

    /// Uploads sealed packs, at most `uploads` at once, and records each in the catalog
    /// once both its files are written. Returns what went up, or the first error (packs
    /// uploaded before it stay recorded).
    pub(crate) fn upload(&self, packs: impl Iterator<Item = Result<Sealed>>) -> Result<Uploaded> {
        let mut running: std::collections::VecDeque<tokio::task::JoinHandle<Result<Sealed>>> =
            std::collections::VecDeque::new();
        let mut done = Uploaded::default();
        let mut finish = |handle: tokio::task::JoinHandle<Result<Sealed>>| -> Result<()> {
            let sealed = self
                .runtime
                .block_on(handle)
                .map_err(|e| Error::remote("an upload task".to_string(), e))??;
            let index = pack::parse_index(&sealed.name, &sealed.index)
                .expect("a pack this process sealed parses");
            self.catalog.add(&sealed.name, &index)?;
            done.packs += 1;
            // Chunks are parts of the objects counted, not objects of their own.
            done.objects +=
                sealed.entries.iter().filter(|e| e.kind != pack::Kind::Chunk).count() as u64;
            done.bytes += sealed.body.len() as u64;
            Ok(())
        };
        let mut first_error = None;
        for sealed in packs {
            let sealed = match sealed {
                Ok(sealed) => sealed,
                Err(e) => {
                    first_error = Some(e);
                    break;
                }
            };
            while running.len() >= self.config.uploads {
                if let Err(e) = finish(running.pop_front().expect("uploads running")) {
                    first_error.get_or_insert(e);
                }
            }
            if first_error.is_some() {
                break;
            }
            let client = self.client.clone();
            running.push_back(self.runtime.spawn(async move {
                client.put(Part::Body, &sealed.name, sealed.body.clone(), false).await?;
                client.put(Part::Index, &sealed.name, sealed.index.clone(), true).await?;
                // Announced last: an event in the log means the pack is whole.
                let event = pack_log::name(pack_log::now_ms(), &sealed.name, pack_log::What::Added);
                client.put(Part::Log, &event, Bytes::new(), true).await?;
                Ok(sealed)
            }));
        }
        for handle in running {
            if let Err(e) = finish(handle) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

/// Inflates a member fetched for `location` and checks it against its key.
pub(crate) fn check(location: &Location, member: &[u8]) -> Result<Vec<u8>> {
    let key = location.entry.key;
    let damaged =
        |reason: String| Error::RemoteCorrupt { key, pack: location.pack.clone(), reason };
    if member.len() != location.entry.len as usize {
        return Err(damaged(format!(
            "{} bytes came back for a {}-byte object",
            member.len(),
            location.entry.len
        )));
    }
    let raw = codec::decompress(member, location.entry.raw_len).map_err(damaged)?;
    let actual = Key::of(&raw);
    if actual != key {
        return Err(damaged(format!("its bytes hash to {actual}")));
    }
    Ok(raw)
}
