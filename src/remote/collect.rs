//! Garbage collection of the remote: duplicate packs of concurrent pushes, bodies of packs
//! taken out of the listing (duplicates, quarantined packs), orphan bodies of killed
//! pushes, and the pack log's events of packs long gone.
//!
//! Deletion is two-phase. A pack leaves the listing first: a `gone` event in the pack log,
//! then its index is deleted; a machine's next refresh forgets it. Its body stays for the
//! grace period (`CollectOptions::grace`, an hour by default), so a machine that located an
//! object in it before its refresh still reads it; a later collection deletes the body
//! once the `gone` event is older than the grace period and the clock margin. A machine
//! whose copy of the indexes is older than that and asks for a deleted body gets a "not
//! found" and recovers (`stash/remote.rs`): it forgets the pack, refreshes and reads the
//! object where the remote still holds it, or answers a clean miss.
//!
//! Which duplicates go: the packs are ordered by their first `added` event in the log (then
//! by name), the same order for every machine. A pack goes when each of its keys is in an
//! earlier pack. The earliest pack holding a key never goes this way, so whichever packs
//! two collectors take out, even without the lease, every key keeps a pack. A pack
//! sharing only some of its keys stays (repacking it is left to a trim).
//!
//! Orphans: a body with no event in the log and older than `orphan_grace` (a day) is what
//! a push killed between its body and its event left; a push in flight writes its event
//! within seconds of its body.
//!
//! The lease (`lease.rs`) keeps two collections from running at once; what each deletes is
//! safe beside the other anyway. A collection killed at any moment leaves packs either
//! listed and whole or out of the listing; the next collection finishes the job.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::client::{Listed, Part};
use super::lease::{self, Lease};
use super::pack_log::{self, What};
use super::{READS_IN_FLIGHT, Remote};
use crate::error::Result;

/// Default grace period of a pack taken out of the listing before its body is deleted.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);
/// Default age of a body with no event before it is taken for a killed push's.
pub const DEFAULT_ORPHAN_GRACE: Duration = Duration::from_secs(24 * 3600);
/// Default time a collection holds the lease between renewals.
const DEFAULT_LEASE_HOLD: Duration = Duration::from_secs(600);
/// The record of the last collection in the control folder.
const RECORD: &str = "last-collection";

/// How a collection treats what it finds ([`RemoteTier::collect`](crate::RemoteTier::collect)).
#[derive(Clone, Debug)]
#[must_use]
pub struct CollectOptions {
    pub(crate) grace: Duration,
    pub(crate) orphan_grace: Duration,
    pub(crate) duplicates: bool,
    pub(crate) lease: Duration,
}

impl Default for CollectOptions {
    fn default() -> Self {
        CollectOptions {
            grace: DEFAULT_GRACE,
            orphan_grace: DEFAULT_ORPHAN_GRACE,
            duplicates: true,
            lease: DEFAULT_LEASE_HOLD,
        }
    }
}

impl CollectOptions {
    /// How long the body of a pack taken out of the listing stays readable before a
    /// collection deletes it (default an hour): longer than any read or push in flight.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How old a body with no event in the pack log must be before it is deleted as a
    /// killed push's (default a day): longer than any push takes.
    pub fn orphan_grace(mut self, grace: Duration) -> Self {
        self.orphan_grace = grace;
        self
    }

    /// How long the lease is held between renewals (default 10 min): how long a collector
    /// killed mid-way keeps the others out, plus the clock margin.
    pub fn lease(mut self, hold: Duration) -> Self {
        self.lease = hold.max(Duration::from_millis(100));
        self
    }

    /// Whether packs whose every object an earlier pack holds are taken out (default yes).
    pub fn duplicates(mut self, take_out: bool) -> Self {
        self.duplicates = take_out;
        self
    }
}

/// What a collection did ([`RemoteTier::collect`](crate::RemoteTier::collect)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectReport {
    /// Packs taken out of the listing because earlier packs hold all their objects.
    pub duplicates: u64,
    /// Bodies of packs taken out of the listing (duplicates, damaged) deleted once their
    /// grace period was over.
    pub deleted: u64,
    /// Bodies of packs out of the listing kept until their grace period is over (the grace
    /// plus the clock margin, `RemoteConfig::clock_skew`, since they left the listing).
    pub waiting: u64,
    /// How long until the first of them may go, if any waits.
    pub next_deletion_in: Option<std::time::Duration>,
    /// Bodies of killed pushes (no event in the log) deleted.
    pub orphans: u64,
    /// Bytes of bodies deleted.
    pub bytes_freed: u64,
    /// Events of the pack log removed (of packs long gone).
    pub events_removed: u64,
    /// Indexes the remote did not serve (a timeout, a server down; the error is logged):
    /// their packs were left as they were, duplicates or not: collect again.
    pub left_unread: u64,
    /// Requests sent.
    pub requests: u64,
}

impl CollectReport {
    /// Whether the collection read every index (else it left some packs as they were).
    pub fn is_complete(&self) -> bool {
        self.left_unread == 0
    }
}

impl fmt::Display for CollectReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "took {} duplicate packs out of the listing; deleted {} packs out of the listing \
             and {} orphan bodies ({} bytes); {} packs wait for their grace period; {} log \
             events removed; {} requests",
            self.duplicates,
            self.deleted,
            self.orphans,
            self.bytes_freed,
            self.waiting,
            self.events_removed,
            self.requests
        )?;
        if let Some(wait) = self.next_deletion_in {
            write!(
                f,
                "\n(a pack out of the listing goes once the grace period and the clock margin \
                 have passed since it left: the first can go in {} min)",
                wait.as_secs().div_ceil(60)
            )?;
        }
        if self.left_unread > 0 {
            write!(
                f,
                "\n{} indexes could not be read and their packs were left as they were: \
                 collect again",
                self.left_unread
            )?;
        }
        Ok(())
    }
}

/// The record of the last collection on a remote (`remote status`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastCollection {
    /// When it finished, ms since 1970 by the collector's clock.
    pub finished_ms: u64,
    /// The collecting process (host, process id, random part).
    pub holder: String,
    /// What it did.
    pub report: CollectReport,
}

impl LastCollection {
    fn encode(&self) -> Bytes {
        let r = &self.report;
        Bytes::from(format!(
            "finished {}\nholder {}\nduplicates {}\ndeleted {}\nwaiting {}\norphans {}\n\
             bytes_freed {}\nevents_removed {}\nleft_unread {}\nrequests {}\n",
            self.finished_ms,
            self.holder,
            r.duplicates,
            r.deleted,
            r.waiting,
            r.orphans,
            r.bytes_freed,
            r.events_removed,
            r.left_unread,
            r.requests
        ))
    }

    fn decode(bytes: &[u8]) -> LastCollection {
        let text = String::from_utf8_lossy(bytes);
        let mut record = LastCollection {
            finished_ms: 0,
            holder: String::new(),
            report: CollectReport::default(),
        };
        for (name, value) in text.lines().filter_map(|l| l.split_once(' ')) {
            let n = || value.parse().unwrap_or(0);
            let r = &mut record.report;
            match name {
                "finished" => record.finished_ms = n(),
                "holder" => record.holder = value.to_string(),
                "duplicates" => r.duplicates = n(),
                "deleted" => r.deleted = n(),
                "waiting" => r.waiting = n(),
                "orphans" => r.orphans = n(),
                "bytes_freed" => r.bytes_freed = n(),
                "events_removed" => r.events_removed = n(),
                "left_unread" => r.left_unread = n(),
                "requests" => r.requests = n(),
                _ => {}
            }
        }
        record
    }
}

impl fmt::Display for LastCollection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ago = pack_log::now_ms().saturating_sub(self.finished_ms) / 1000;
        write!(f, "last collection {ago} s ago by {}: {}", self.holder, self.report)
    }
}

/// What the pack log says of one pack.
#[derive(Default)]
pub(super) struct History {
    /// Its first `added` event's time, the pack's place in the order of duplicates.
    pub first_added: Option<u64>,
    /// Its last event.
    pub last: Option<(u64, What)>,
    /// Every event's file name.
    pub events: Vec<String>,
}

/// The pack log read whole, pack by pack.
pub(super) fn histories(listing: &[String]) -> HashMap<String, History> {
    let mut packs: HashMap<String, History> = HashMap::new();
    for name in listing {
        let Some(event) = pack_log::parse(name) else { continue };
        let history = packs.entry(event.pack).or_default();
        if event.what == What::Added && history.first_added.is_none() {
            history.first_added = Some(event.ms);
        }
        // The listing is in name order, so in time order.
        history.last = Some((event.ms, event.what));
        history.events.push(name.clone());
    }
    packs
}

impl Remote {
    /// Collects the remote's garbage under the lease (see the module's comment).
    pub(crate) fn collect(&self, options: &CollectOptions) -> Result<CollectReport> {
        let before = self.client.requests();
        let holder = lease::holder_name();
        let mut lease = self.runtime.block_on(Lease::take(
            &self.client,
            holder.clone(),
            options.lease,
            self.config.clock_skew,
        ))?;
        let collected = self.collect_holding(&mut lease, options);
        let released = self.runtime.block_on(lease.release(&self.client));
        let mut report = collected?;
        report.requests = self.client.requests() - before;
        let record = LastCollection { finished_ms: pack_log::now_ms(), holder, report };
        self.runtime.block_on(self.client.put(Part::Control, RECORD, record.encode(), false))?;
        released?;
        Ok(record.report)
    }

    /// Clears the lease of a holder that is gone (`lease::break_lease`).
    pub(crate) fn break_lease(&self) -> Result<Option<String>> {
        self.runtime.block_on(lease::break_lease(&self.client))
    }

    /// The record of the last collection, if any ran.
    pub(crate) fn last_collection(&self) -> Result<Option<LastCollection>> {
        let bytes = self.runtime.block_on(self.client.get_if_there(Part::Control, RECORD))?;
        Ok(bytes.map(|b| LastCollection::decode(&b)))
    }

    pub(super) fn renew_if_due(&self, lease: &mut Lease) -> Result<()> {
        if pack_log::now_ms() + lease.hold.as_millis() as u64 / 2 > lease.expires_ms {
            let hold = lease.hold;
            self.runtime.block_on(lease.renew(&self.client, hold))?;
        }
        Ok(())
    }

    fn collect_holding(
        &self,
        lease: &mut Lease,
        options: &CollectOptions,
    ) -> Result<CollectReport> {
        let mut report = CollectReport {
            left_unread: self.sync_every_index()?.status.unreadable_indexes,
            ..CollectReport::default()
        };
        self.materialize()?;
        if options.duplicates {
            report.duplicates = self.take_out_duplicates(lease)?;
        }
        self.renew_if_due(lease)?;
        self.sweep(lease, options, &mut report)?;
        Ok(report)
    }

    /// Takes out of the listing every pack whose keys all have an earlier pack that stays.
    fn take_out_duplicates(&self, lease: &mut Lease) -> Result<u64> {
        let listing = self.runtime.block_on(self.client.list_log(None))?;
        let histories = histories(&listing);
        let order = |pack: &str| {
            let first = histories.get(pack).and_then(|h| h.first_added).unwrap_or(u64::MAX);
            (first, pack.to_string())
        };
        // A pack goes when each of its keys has an earlier holder: counted in one pass over
        // the keys two packs hold.
        let packs = self.catalog.pack_keys()?;
        let ordered = |id: &i64| packs.get(id).map(|(name, _)| order(name));
        let mut covered: HashMap<i64, u64> = HashMap::new();
        self.catalog.shared_keys(|holders| {
            let first = holders.iter().min_by_key(|id| ordered(id)).copied();
            for id in holders.iter().filter(|id| Some(**id) != first) {
                *covered.entry(*id).or_default() += 1;
            }
        })?;
        let mut candidates: Vec<&String> = covered
            .iter()
            .filter_map(|(id, n)| packs.get(id).filter(|(_, keys)| keys == n).map(|(name, _)| name))
            .collect();
        candidates.sort_by_cached_key(|p| order(p));
        let mut taken_out = Vec::new();
        let mut result = Ok(());
        for pack in candidates {
            let listed =
                histories.get(pack).and_then(|h| h.last).is_some_and(|(_, w)| w == What::Added);
            if !listed {
                continue;
            }
            log::info!("taking duplicate pack {pack} out of the listing of {}", self.url());
            result = self.take_out(pack, None).and_then(|()| {
                taken_out.push(pack.clone());
                self.renew_if_due(lease)
            });
            if result.is_err() {
                break;
            }
        }
        self.catalog.remove(&taken_out)?;
        result.map(|()| taken_out.len() as u64)
    }

    /// Phase one: the pack leaves the listing (its `gone` event, then its index); its body
    /// stays for the grace period. With `keep`, a copy of the index goes there first (a
    /// trimmed pack, which can come back if a machine turns out to use it). The caller
    /// forgets the packs it took out in one [`Catalog::remove`](super::catalog::Catalog)
    /// (key-ordered, far cheaper than a pack at a time); until then, or if it fails first,
    /// the next refresh sees their `gone` events.
    pub(super) fn take_out(&self, pack: &str, keep: Option<Part>) -> Result<()> {
        self.runtime.block_on(async {
            if let Some(part) = keep
                && let Some(index) = self.client.get_if_there(Part::Index, pack).await?
            {
                self.client.put(part, pack, index, false).await?;
            }
            let event = pack_log::name(pack_log::now_ms(), pack, What::Gone);
            self.client.put(Part::Log, &event, Bytes::new(), true).await?;
            self.client.delete(Part::Index, pack).await
        })
    }

    /// Phase two: deletes bodies out of the listing for longer than the grace period,
    /// orphan bodies, what interrupted collections left, and old events.
    pub(super) fn sweep(
        &self,
        lease: &mut Lease,
        options: &CollectOptions,
        report: &mut CollectReport,
    ) -> Result<()> {
        let now = pack_log::now_ms();
        let margin = self.config.clock_skew.as_millis() as u64;
        let grace = options.grace.as_millis() as u64;
        let orphan_grace = options.orphan_grace.as_millis() as u64;
        let (bodies, indexes, damaged, trimmed, moved) = self.runtime.block_on(async {
            let bodies = self.client.list(Part::Body).await?;
            let indexes = self.client.list(Part::Index).await?;
            let damaged = self.client.list(Part::Damaged).await?;
            let trimmed = self.client.list(Part::Trimmed).await?;
            let moved = self.client.list(Part::Moved).await?;
            Result::Ok((bodies, indexes, damaged, trimmed, moved))
        })?;
        // Listed after the files: a pack pushed again (healed) since shows its new event.
        let listing = self.runtime.block_on(self.client.list_log(None))?;
        let histories = histories(&listing);
        let by_name = |files: &[Listed]| -> BTreeMap<String, Listed> {
            files.iter().map(|f| (f.name.clone(), f.clone())).collect()
        };
        let (bodies, indexes) = (by_name(&bodies), by_name(&indexes));
        let records: Vec<(Part, Listed)> = damaged
            .into_iter()
            .map(|f| (Part::Damaged, f))
            .chain(trimmed.into_iter().map(|f| (Part::Trimmed, f)))
            .collect();
        let mut deletions: Vec<(Part, String)> = Vec::new();
        let mut freed = 0;
        for (name, body) in &bodies {
            match histories.get(name).and_then(|h| h.last) {
                Some((_, What::Added)) => {}
                Some((gone, What::Gone)) if gone + grace + margin <= now => {
                    report.deleted += 1;
                    freed += body.size;
                    deletions.push((Part::Body, name.clone()));
                }
                Some((gone, What::Gone)) => {
                    report.waiting += 1;
                    let wait = std::time::Duration::from_millis(gone + grace + margin - now);
                    report.next_deletion_in =
                        Some(report.next_deletion_in.map_or(wait, |w| w.min(wait)));
                }
                None if body.modified_ms + orphan_grace + margin <= now => {
                    report.orphans += 1;
                    freed += body.size;
                    deletions.push((Part::Body, name.clone()));
                }
                None => {}
            }
        }
        for (name, index) in &indexes {
            let remnant = match histories.get(name).and_then(|h| h.last) {
                // A collection stopped between a pack's `gone` event and its index.
                Some((_, What::Gone)) => true,
                Some((_, What::Added)) => false,
                // A push killed between its index and its event.
                None => index.modified_ms + orphan_grace + margin <= now,
            };
            if remnant {
                deletions.push((Part::Index, name.clone()));
            }
        }
        for (part, record) in records {
            // The index kept of a damaged or trimmed pack goes with its body, or once the
            // pack is back (healed, used again).
            let name = &record.name;
            let body_going = deletions.iter().any(|(p, n)| matches!(p, Part::Body) && n == name);
            let back =
                histories.get(name).and_then(|h| h.last).is_some_and(|(_, w)| w == What::Added);
            let old = record.modified_ms + grace + margin <= now;
            if (body_going || !bodies.contains_key(name) || back) && old {
                deletions.push((part, name.clone()));
            }
        }
        // Compacted indexes of generations before the current one, once older than the
        // grace period (a reader that read the older manifest reads the current one again).
        let shards = self.runtime.block_on(self.client.list(Part::Shards))?;
        let current = self
            .runtime
            .block_on(self.client.get_if_there(Part::Shards, super::compact::CURRENT))?
            .and_then(|b| super::shard::Manifest::decode(&b).ok())
            .map(|m| m.generation);
        for file in &shards {
            let Some((generation, _)) = file.name.split_once('/') else { continue };
            if Some(generation) != current.as_deref() && file.modified_ms + grace + margin <= now {
                deletions.push((Part::Shards, file.name.clone()));
            }
        }
        // The marker of a pack made of moved objects goes with its body.
        for marker in &moved {
            let name = &marker.name;
            let body_going = deletions.iter().any(|(p, n)| matches!(p, Part::Body) && n == name);
            let old = marker.modified_ms + grace + margin <= now;
            if (body_going || !bodies.contains_key(name)) && old {
                deletions.push((Part::Moved, name.clone()));
            }
        }
        // Events of packs gone for longer than a whole listing's period, with nothing left
        // of them: every machine has listed the `gone` event or will list the whole log.
        let forget_after = grace + margin + pack_log::LIST_WHOLE_EVERY.as_millis() as u64;
        for (name, history) in &histories {
            let Some((gone, What::Gone)) = history.last else { continue };
            let body_left = bodies.contains_key(name)
                && !deletions.iter().any(|(p, n)| matches!(p, Part::Body) && n == name);
            if gone + forget_after <= now && !body_left && !indexes.contains_key(name) {
                report.events_removed += history.events.len() as u64;
                deletions.extend(history.events.iter().map(|e| (Part::Log, e.clone())));
            }
        }
        report.bytes_freed = freed;
        for batch in deletions.chunks(256) {
            self.renew_if_due(lease)?;
            let results: Vec<Result<()>> = self.runtime.block_on(
                futures::stream::iter(
                    batch.iter().map(|(part, name)| self.client.delete(*part, name)),
                )
                .buffer_unordered(READS_IN_FLIGHT)
                .collect(),
            );
            results.into_iter().collect::<Result<()>>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back() {
        let record = LastCollection {
            finished_ms: 1_764_000_000_000,
            holder: "h:1:ab".into(),
            report: CollectReport {
                duplicates: 1,
                deleted: 2,
                waiting: 3,
                orphans: 4,
                bytes_freed: 5,
                events_removed: 6,
                left_unread: 8,
                requests: 7,
                // Not recorded: a moment's figure.
                next_deletion_in: None,
            },
        };
        assert_eq!(LastCollection::decode(&record.encode()), record);
    }

    #[test]
    fn the_log_reads_as_each_packs_history() {
        let [a, b] = ["a", "b"].map(|x| x.repeat(64));
        let listing = [
            pack_log::name(1, &a, What::Added),
            pack_log::name(2, &b, What::Added),
            pack_log::name(3, &a, What::Gone),
            pack_log::name(4, &a, What::Added),
        ];
        let h = histories(&listing);
        assert_eq!(h[&a].first_added, Some(1));
        assert_eq!(h[&a].last, Some((4, What::Added)));
        assert_eq!(h[&a].events.len(), 3);
        assert_eq!(h[&b].last, Some((2, What::Added)));
    }
}
