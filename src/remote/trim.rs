//! Keeping the remote within a size and an age: `remote trim --max-size 100GiB
//! --unused-for 90d`.
//!
//! An object's last use is the latest of what the machines' use reports (`usage.rs`) say
//! and when its pack was first announced (a push is a use), except for a pack a trim made
//! of objects it moved (marked in `moved/`): those keep the uses they had. A trim, holding the collectors'
//! lease:
//! 1. with an age, takes out of the listing the packs none of whose objects was used within
//!    it, and repacks first the packs whose objects still in use are less than
//!    `repack_below` of their bytes: those objects are fetched, checked and pushed in new
//!    packs, then the old pack is taken out;
//! 2. with a size, takes out the packs least recently used (by their latest object) until
//!    the packs listed fit;
//! 3. reads the use reports again: a pack it took out that a machine used meanwhile comes
//!    back (its index is kept in `trimmed/` until its body goes);
//! 4. merges the reports it read into one;
//! 5. deletes, as a collection does, the bodies out of the listing for longer than the
//!    grace period.
//!
//! A push relies on what the remote holds (it does not send it again): it reports those
//! objects as used before it says it is done, and then refreshes; objects a trim took out
//! meanwhile are sent by a second round (`stash/remote.rs`). Either the trim reads the
//! report and keeps (or brings back) the pack, or the push sees the pack go.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::client::Part;
use super::collect::{CollectOptions, CollectReport, DEFAULT_GRACE, histories};
use super::lease::{self, Lease};
use super::pack::{self, Builder, Entry, Kind};
use super::pack_log::{self, What};
use super::{Location, READS_IN_FLIGHT, Remote, usage};
use crate::codec;
use crate::error::{Error, Result};
use crate::key::Key;

/// Default share of a pack's bytes in use below which a trim by age repacks it.
const DEFAULT_REPACK_BELOW: f64 = 0.5;
/// The record of the last trim in the control folder.
const RECORD: &str = "last-trim";

/// What a trim keeps ([`RemoteTier::trim`](crate::RemoteTier::trim)).
#[derive(Clone, Debug)]
#[must_use]
pub struct TrimOptions {
    pub(crate) max_size: Option<u64>,
    pub(crate) unused: Option<Unused>,
    pub(crate) repack_below: f64,
    pub(crate) grace: Duration,
    pub(crate) lease: Duration,
    pub(crate) after_taking_out: Option<Hook>,
}

/// What a trim by age drops: objects unused for an age, or since a moment (ms since 1970).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unused {
    For(Duration),
    Since(u64),
}

/// A function a test runs at a given moment of a trim.
#[derive(Clone)]
pub(crate) struct Hook(std::sync::Arc<dyn Fn() + Send + Sync>);

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

impl Default for TrimOptions {
    fn default() -> Self {
        TrimOptions {
            max_size: None,
            unused: None,
            repack_below: DEFAULT_REPACK_BELOW,
            grace: DEFAULT_GRACE,
            lease: CollectOptions::default().lease,
            after_taking_out: None,
        }
    }
}

impl TrimOptions {
    /// The most bytes the remote holds under its prefix after the trim (least recently
    /// used packs go first): listed packs, bodies and indexes, with the compacted shards,
    /// the log, use reports and control files; the bodies of packs taken out go after the
    /// grace period.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = Some(bytes);
        self
    }

    /// Objects no machine used for this long go (default: no limit).
    pub fn unused_for(mut self, age: Duration) -> Self {
        self.unused = Some(Unused::For(age));
        self
    }

    /// Objects no machine used since `time` go (what [`TrimOptions::unused_for`] says
    /// with a moment instead of an age).
    pub fn unused_since(mut self, time: std::time::SystemTime) -> Self {
        let ms = time.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.unused = Some(Unused::Since(ms));
        self
    }

    /// A pack whose objects still in use are less than this share of its bytes is repacked
    /// (default 0.5; 0 never repacks, 1 repacks every pack with an object to drop).
    pub fn repack_below(mut self, share: f64) -> Self {
        self.repack_below = share.clamp(0.0, 1.0);
        self
    }

    /// How long a pack taken out stays readable before its body is deleted (default an
    /// hour), as [`CollectOptions::grace`].
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Runs `f` once the trim has taken its packs out and before it reads the use reports
    /// again (for tests: a machine using a pack at that moment).
    #[doc(hidden)]
    pub fn after_taking_out(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.after_taking_out = Some(Hook(std::sync::Arc::new(f)));
        self
    }

    /// How long the lease is held between renewals, as [`CollectOptions::lease`].
    pub fn lease(mut self, hold: Duration) -> Self {
        self.lease = hold.max(Duration::from_millis(100));
        self
    }
}

/// What a trim did ([`RemoteTier::trim`](crate::RemoteTier::trim)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrimReport {
    /// Bytes the remote held under its prefix before the trim: listed packs (bodies and
    /// indexes), compacted shards, the log, use reports and control files (bodies of packs
    /// already out of the listing, which go after their grace period, not counted).
    pub size_before: u64,
    /// The same after it: what `max_size` bounds.
    pub size_after: u64,
    /// Packs taken out because none of their objects was used within the age.
    pub unused: u64,
    /// Packs taken out after their objects still in use went into new packs.
    pub repacked: u64,
    /// Objects moved into new packs.
    pub objects_moved: u64,
    /// New packs those objects went into.
    pub new_packs: u64,
    /// Packs taken out, least recently used first, to fit the size.
    pub over_size: u64,
    /// Packs taken out and brought back because a machine used them meanwhile.
    pub brought_back: u64,
    /// Use reports read (and merged into one).
    pub reports: u64,
    /// Packs left as they were because the remote did not serve their index or the objects
    /// to repack (a timeout, a server down; the error is logged): trim again.
    pub left_unread: u64,
    /// What deleting the bodies out of the listing did (as a collection).
    pub swept: CollectReport,
    /// Requests sent.
    pub requests: u64,
}

impl fmt::Display for TrimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "listed {} bytes, now {}: took out {} unused packs, {} packs repacked ({} \
             objects moved into {} new packs) and {} packs over the size; {} brought back as \
             used meanwhile; {} use reports merged; {} requests\n{}",
            self.size_before,
            self.size_after,
            self.unused,
            self.repacked,
            self.objects_moved,
            self.new_packs,
            self.over_size,
            self.brought_back,
            self.reports,
            self.requests,
            self.swept
        )?;
        if self.left_unread > 0 {
            write!(
                f,
                "\n{} packs could not be read and were left as they were: trim again",
                self.left_unread
            )?;
        }
        Ok(())
    }
}

impl TrimReport {
    /// Whether the trim read every pack it had to (else it left some as they were).
    pub fn is_complete(&self) -> bool {
        self.left_unread == 0
    }
}

/// What a trim takes out, repacks and keeps, before it takes anything out.
struct Plan {
    unused: Vec<String>,
    repack: Vec<Seen>,
    /// Last use, name and bytes of each pack kept.
    kept: Vec<(u64, String, u64)>,
}

/// The bytes under the remote's prefix that a trim's size counts besides pack bodies.
struct Sizes {
    /// Bytes of each listed pack's index, by name.
    index: HashMap<String, u64>,
    /// Bytes of the compacted shards, the log, use reports, control files and indexes of
    /// damaged packs. (The index of a pack taken out goes with its body.)
    other: u64,
}

impl Sizes {
    /// The bytes a listed pack of `body` bytes counts: its body and its index.
    fn pack(&self, name: &str, body: u64) -> u64 {
        body + self.index.get(name).copied().unwrap_or(0)
    }
}

/// A pack as a trim sees it.
struct Seen {
    name: String,
    body_len: u64,
    /// When it was first announced.
    added: u64,
    /// The latest use of any of its objects.
    last_use: u64,
    /// Its objects used within the age, and their bytes.
    live: Vec<Entry>,
    live_bytes: u64,
    entries: usize,
}

impl Remote {
    /// Trims the remote under the collectors' lease (see the module's comment).
    pub(crate) fn trim(&self, options: &TrimOptions) -> Result<TrimReport> {
        let before = self.client.requests();
        let holder = lease::holder_name();
        let mut lease = self.runtime.block_on(Lease::take(
            &self.client,
            holder,
            options.lease,
            self.config.clock_skew,
        ))?;
        let trimmed = self.trim_holding(&mut lease, options);
        let released = self.runtime.block_on(lease.release(&self.client));
        let mut report = trimmed?;
        released?;
        report.requests = self.client.requests() - before;
        let record = format!("finished {}\n{report}\n", pack_log::now_ms());
        self.runtime.block_on(self.client.put(
            Part::Control,
            RECORD,
            Bytes::from(record),
            false,
        ))?;
        Ok(report)
    }

    /// What the last trim recorded, if one ran: when (ms) and its report as text.
    pub(crate) fn last_trim(&self) -> Result<Option<String>> {
        let bytes = self.runtime.block_on(self.client.get_if_there(Part::Control, RECORD))?;
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    fn trim_holding(&self, lease: &mut Lease, options: &TrimOptions) -> Result<TrimReport> {
        // A pack whose index cannot be read is not seen, so it stays: read again first.
        let unread_indexes = self.sync_every_index()?.status.unreadable_indexes;
        let mut report = TrimReport { left_unread: unread_indexes, ..TrimReport::default() };
        self.materialize()?;
        let now = pack_log::now_ms();
        let listing = self.runtime.block_on(self.client.list_log(None))?;
        let histories = histories(&listing);
        let (read, mut uses) = self.read_uses(&HashSet::new())?;
        // A use of one object of a model is a use of all of them: a model goes whole.
        let models = self.read_models()?;
        super::models::spread_uses(&models, &mut uses);
        let moved: HashSet<String> = self
            .runtime
            .block_on(self.client.list(Part::Moved))?
            .into_iter()
            .map(|f| f.name)
            .collect();
        report.reports = read.len() as u64;
        let cut = options.unused.map(|unused| match unused {
            Unused::For(age) => now.saturating_sub(age.as_millis() as u64),
            Unused::Since(ms) => ms,
        });

        let mut seen = Vec::new();
        for (name, body_len) in self.catalog.pack_sizes()? {
            // A pack the log does not date (it cannot be listed without an event) counts
            // as pushed now: never trimmed by age.
            let added = histories.get(&name).and_then(|h| h.first_added).unwrap_or(now);
            let dated = if moved.contains(&name) { 0 } else { added };
            let entries = self.catalog.entries(&name)?;
            let use_of = |e: &Entry| uses.get(&e.key).copied().unwrap_or(0).max(dated);
            let last_use = entries.iter().map(use_of).max().unwrap_or(added);
            let live: Vec<Entry> = entries
                .iter()
                .filter(|e| cut.is_none_or(|cut| use_of(e) >= cut))
                .copied()
                .collect();
            let live_bytes = live.iter().map(|e| u64::from(e.len)).sum();
            let entries = entries.len();
            seen.push(Seen { name, body_len, added: dated, last_use, live, live_bytes, entries });
        }

        // The size is the bucket's under the prefix, not only the pack bodies': every
        // file but the bodies already out of the listing (they go after their grace).
        let sizes = self.sizes()?;
        report.size_before =
            sizes.other + seen.iter().map(|p| sizes.pack(&p.name, p.body_len)).sum::<u64>();
        let moving = !repack_candidates(&seen, options).is_empty();
        let mut plan = Plan { unused: Vec::new(), repack: Vec::new(), kept: Vec::new() };
        for pack in seen {
            if pack.live.is_empty() {
                report.unused += 1;
                plan.unused.push(pack.name);
            } else if to_repack(&pack, options) {
                // Moved objects keep their last use, not the time of their new pack.
                for e in &pack.live {
                    let at = uses.entry(e.key).or_insert(pack.added);
                    *at = (*at).max(pack.added);
                }
                plan.repack.push(pack);
            } else {
                plan.kept.push((pack.last_use, pack.name, pack.body_len));
            }
        }
        let mut out = Vec::new();
        let taken = self.take_outs(lease, options, &mut report, plan, &sizes, &mut out);
        // The catalog forgets every pack taken out at once (in key order), failed or not.
        self.catalog.remove(&out)?;
        taken?;

        if let Some(Hook(f)) = &options.after_taking_out {
            f();
        }

        // Uses reported since the reports were read bring their packs back.
        let (_, mut since) = self.read_uses(&read)?;
        super::models::spread_uses(&models, &mut since);
        report.brought_back = self.bring_back(&out, &since)?;
        // The files of models whose root went go too.
        let roots: Vec<Key> = models.iter().map(|(root, _)| *root).collect();
        let gone: Vec<Key> = roots
            .iter()
            .zip(self.known(&roots)?)
            .filter(|(_, held)| !held)
            .map(|(root, _)| *root)
            .collect();
        self.delete_models(&gone)?;
        if report.brought_back > 0 {
            report.size_after = sizes.other
                + self
                    .catalog
                    .pack_sizes()?
                    .iter()
                    .map(|(name, len)| sizes.pack(name, *len))
                    .sum::<u64>();
        }
        if read.len() > 1 || moving {
            self.merge_uses(&read, &uses, unread_indexes == 0)?;
        }
        self.renew_if_due(lease)?;
        let sweep = CollectOptions::default().grace(options.grace).duplicates(false);
        let before = self.client.requests();
        self.sweep(lease, &sweep, &mut report.swept)?;
        report.swept.requests = self.client.requests() - before;
        Ok(report)
    }

    /// Every use report but those in `skip`: the names read and the latest use of each key.
    fn read_uses(&self, skip: &HashSet<String>) -> Result<(HashSet<String>, HashMap<Key, u64>)> {
        let files = self.runtime.block_on(self.client.list(Part::Uses))?;
        let names: Vec<String> = files
            .into_iter()
            .map(|f| f.name)
            .filter(|n| usage::is_name(n) && !skip.contains(n))
            .collect();
        let read = self.runtime.block_on(async {
            futures::stream::iter(names.iter().map(|name| async move {
                (name, self.client.get_if_there(Part::Uses, name).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
        });
        let mut uses: HashMap<Key, u64> = HashMap::new();
        let mut names_read = HashSet::new();
        for (name, bytes) in read {
            let Some(bytes) = bytes? else { continue };
            match usage::decode(&bytes) {
                Ok(entries) => {
                    for (key, ms) in entries {
                        let at = uses.entry(key).or_insert(ms);
                        *at = (*at).max(ms);
                    }
                    names_read.insert(name.clone());
                }
                // Left alone: neither trusted nor deleted.
                Err(reason) => log::warn!("use report {name} on {}: {reason}", self.url()),
            }
        }
        Ok((names_read, uses))
    }

    /// Takes the unused packs out of the listing, repacks the mostly unused ones and takes
    /// out the least recently used beyond the size; `out` gets every pack taken out, also
    /// when it stops at an error.
    fn take_outs(
        &self,
        lease: &mut Lease,
        options: &TrimOptions,
        report: &mut TrimReport,
        plan: Plan,
        sizes: &Sizes,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let Plan { unused, repack, mut kept } = plan;
        for name in unused {
            self.take_out(&name, Some(Part::Trimmed))?;
            out.push(name);
            self.renew_if_due(lease)?;
        }
        // Repacked: the objects in use go into new packs before the old packs go, a new
        // pack's worth of old packs at a time.
        let mut group: Vec<Seen> = Vec::new();
        let mut group_bytes = 0;
        let mut repack = repack.into_iter().peekable();
        while let Some(pack) = repack.next() {
            group_bytes += pack.live_bytes;
            group.push(pack);
            if group_bytes < self.config.pack_size && repack.peek().is_some() {
                continue;
            }
            self.renew_if_due(lease)?;
            let packs = std::mem::take(&mut group);
            group_bytes = 0;
            match self.repack(&packs) {
                Ok((objects, new, bytes)) => {
                    report.objects_moved += objects;
                    report.new_packs += new;
                    let last_use = packs.iter().map(|p| p.last_use).max().unwrap_or(0);
                    kept.push((last_use, String::new(), bytes));
                    for pack in packs {
                        self.take_out(&pack.name, Some(Part::Trimmed))?;
                        report.repacked += 1;
                        out.push(pack.name);
                    }
                }
                Err(e) => {
                    log::warn!("{} packs kept whole: {e}", packs.len());
                    report.left_unread += packs.len() as u64;
                    kept.extend(packs.into_iter().map(|p| (p.last_use, p.name, p.body_len)));
                }
            }
        }
        // Over the size: least recently used first (new packs, unnamed here, stay). A pack
        // counts its body and its index; the rest under the prefix counts as it is.
        let mut size: u64 =
            sizes.other + kept.iter().map(|(_, name, bytes)| sizes.pack(name, *bytes)).sum::<u64>();
        if let Some(max) = options.max_size {
            kept.sort();
            for (_, name, bytes) in &kept {
                if size <= max {
                    break;
                }
                if name.is_empty() {
                    continue;
                }
                self.take_out(name, Some(Part::Trimmed))?;
                self.renew_if_due(lease)?;
                out.push(name.clone());
                size -= sizes.pack(name, *bytes);
                report.over_size += 1;
            }
        }
        report.size_after = size;
        Ok(())
    }

    /// The bytes under the prefix a trim's size counts besides the pack bodies: the
    /// bucket's size is what a user's maximum means.
    fn sizes(&self) -> Result<Sizes> {
        self.runtime.block_on(async {
            let index = self.client.list(Part::Index).await?;
            let mut other = 0;
            for part in [
                Part::Shards,
                Part::Log,
                Part::Uses,
                Part::Control,
                Part::Moved,
                Part::Damaged,
                Part::Models,
            ] {
                other += self.client.list(part).await?.iter().map(|f| f.size).sum::<u64>();
            }
            Ok(Sizes { index: index.into_iter().map(|f| (f.name, f.size)).collect(), other })
        })
    }

    /// Brings back the packs of `out` holding a key of `since`: their kept index is listed
    /// again and announced.
    fn bring_back(&self, out: &[String], since: &HashMap<Key, u64>) -> Result<u64> {
        if since.is_empty() {
            return Ok(0);
        }
        let mut back = 0;
        for name in out {
            let index = self.runtime.block_on(self.client.get_if_there(Part::Trimmed, name))?;
            let Some(index) = index else { continue };
            let parsed = pack::parse_index(name, &index).map_err(|reason| {
                Error::remote(
                    format!("reading trimmed index {name}"),
                    std::io::Error::other(reason),
                )
            })?;
            if !parsed.entries.iter().any(|e| since.contains_key(&e.key)) {
                continue;
            }
            log::info!("pack {name} was used during the trim: it stays");
            self.runtime.block_on(async {
                self.client.put(Part::Index, name, index.clone(), false).await?;
                let event = pack_log::name(pack_log::now_ms(), name, What::Added);
                self.client.put(Part::Log, &event, Bytes::new(), true).await
            })?;
            self.catalog.add(name, &parsed)?;
            back += 1;
        }
        Ok(back)
    }

    /// Replaces the reports `read` by one holding the uses of keys still listed.
    /// With `every_index_read` false, uses of keys the catalog does not hold are kept too:
    /// they may be objects of the packs whose index could not be read.
    fn merge_uses(
        &self,
        read: &HashSet<String>,
        uses: &HashMap<Key, u64>,
        every_index_read: bool,
    ) -> Result<()> {
        let keys: Vec<Key> = uses.keys().copied().collect();
        let mut merged = Vec::new();
        for chunk in keys.chunks(4_096) {
            for (key, held) in chunk.iter().zip(self.catalog.holds(chunk)?) {
                if held || !every_index_read {
                    merged.push((*key, uses[key]));
                }
            }
        }
        self.runtime.block_on(async {
            if !merged.is_empty() {
                let name = usage::name(pack_log::now_ms());
                self.client.put(Part::Uses, &name, usage::encode(&merged), false).await?;
            }
            let deleted: Vec<Result<()>> =
                futures::stream::iter(read.iter().map(|name| self.client.delete(Part::Uses, name)))
                    .buffer_unordered(READS_IN_FLIGHT)
                    .collect()
                    .await;
            deleted.into_iter().collect::<Result<()>>()
        })
    }

    /// Pushes the objects of `packs` still in use into new packs: fetched, checked, packed
    /// in the same order. Returns the objects moved and the packs and bytes uploaded.
    fn repack(&self, packs: &[Seen]) -> Result<(u64, u64, u64)> {
        let wanted: Vec<Location> = packs
            .iter()
            .flat_map(|p| p.live.iter().map(|e| Location { pack: p.name.clone(), entry: *e }))
            .collect();
        let members = self.fetch_unnoted(&wanted);
        let mut builder = Builder::default();
        let mut sealed = Vec::new();
        for (location, member) in wanted.iter().zip(members) {
            let member = member?;
            let entry = location.entry;
            let damaged = |reason| Error::RemoteCorrupt {
                key: entry.key,
                pack: location.pack.clone(),
                reason,
            };
            match entry.kind {
                // A manifest inflates to itself; its chunks are checked when it is read.
                Kind::Manifest => {
                    codec::decompress(&member, entry.raw_len).map_err(damaged)?;
                }
                // A name's record checks itself and is kept under its name's key.
                Kind::Name => {
                    let record = codec::decompress(&member, entry.raw_len).map_err(damaged)?;
                    let (name, _) = super::names::parse_any(&record).map_err(damaged)?;
                    if super::names::key_of(name) != entry.key {
                        return Err(damaged("a name record under another name's key".into()));
                    }
                }
                Kind::Object | Kind::Chunk => {
                    super::check(location, &member)?;
                }
            }
            builder.push(entry.key, entry.raw_len, &member, entry.kind);
            if builder.body_len() >= self.config.pack_size as usize {
                sealed.push(builder.seal());
            }
        }
        if !builder.is_empty() {
            sealed.push(builder.seal());
        }
        let names: Vec<String> = sealed.iter().map(|s| s.name.clone()).collect();
        let uploaded = self.upload(sealed.into_iter().map(Ok))?;
        // Marked as made of moved objects: their uses stay what they were.
        self.runtime.block_on(async {
            for name in &names {
                self.client.put(Part::Moved, name, Bytes::new(), false).await?;
            }
            Result::Ok(())
        })?;
        Ok((wanted.len() as u64, uploaded.packs, uploaded.bytes))
    }
}

/// Whether a trim by age repacks `pack`: some of its objects go, and those in use are less
/// than `repack_below` of its bytes.
fn to_repack(pack: &Seen, options: &TrimOptions) -> bool {
    !pack.live.is_empty()
        && pack.live.len() < pack.entries
        && (pack.live_bytes as f64) < options.repack_below * pack.body_len as f64
}

fn repack_candidates<'a>(seen: &'a [Seen], options: &TrimOptions) -> Vec<&'a Seen> {
    seen.iter().filter(|p| to_repack(p, options)).collect()
}
