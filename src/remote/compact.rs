//! Compaction: every pack index the remote lists merged into key-sharded files
//! (`shard.rs`), so that a new machine reads a few kilobytes of them instead of every index.
//!
//! Any machine compacts, holding the collectors' lease (`lease.rs`). A compaction writes a
//! new generation, `shards/<ms>-<random>/`: its shard files and its packs file, then points
//! `shards/current` at it (its manifest). A reader that read `current` before sees the
//! older generation whole; one that reads it after sees the new one whole: nothing half
//! compacted is ever visible, and two compactions (the lease keeps them apart; without it
//! each writes a generation of its own) cannot damage each other's files. A collection
//! deletes generations other than the current one once they are older than the grace
//! period. What was pushed or taken out after a compaction is in the pack log after its
//! time, which readers list as before.

use std::fmt;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;

use super::client::Part;
use super::lease::{self, Lease};
use super::shard::{self, Manifest};
use super::{Remote, pack_log};
use crate::error::Result;

/// Shards uploaded at once.
const UPLOADS: usize = 4;
/// The manifest's name in the shards folder.
pub(crate) const CURRENT: &str = "current";

/// What a compaction did ([`RemoteTier::compact`](crate::RemoteTier::compact)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactReport {
    /// The generation written.
    pub generation: String,
    /// Packs it covers.
    pub packs: u64,
    /// Entries it covers (a key of two packs counts twice).
    pub entries: u64,
    /// Shard files written.
    pub shards: u64,
    /// Bytes of the shard files.
    pub bytes: u64,
    /// Requests sent.
    pub requests: u64,
    /// How long it took, in ms.
    pub ms: u64,
}

impl fmt::Display for CompactReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compacted {} packs ({} entries) into {} shards of generation {} ({} bytes) in \
             {} ms; {} requests",
            self.packs,
            self.entries,
            self.shards,
            self.generation,
            self.bytes,
            self.ms,
            self.requests
        )
    }
}

/// A generation's name: when it was written, and a random part (two compactions of one
/// millisecond write two generations).
fn generation_name(ms: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(ms);
    format!("{ms:013}-{:016x}", h.finish())
}

/// A shard's first key (`from`) and the next shard's (`to`, `None` for the last).
fn bounds(shard: usize, bits: u8) -> ([u8; 32], Option<[u8; 32]>) {
    let at = |s: usize| -> [u8; 32] {
        let mut key = [0u8; 32];
        let prefix = ((s as u32) << (16 - u32::from(bits))) as u16;
        key[..2].copy_from_slice(&prefix.to_be_bytes());
        key
    };
    let last = shard + 1 == 1 << bits;
    (at(shard), (!last).then(|| at(shard + 1)))
}

impl Remote {
    /// Compacts the indexes under the lease (see the module's comment).
    pub(crate) fn compact(&self, hold: std::time::Duration) -> Result<CompactReport> {
        let started = Instant::now();
        let before = self.client.requests();
        let mut lease = self.runtime.block_on(Lease::take(
            &self.client,
            lease::holder_name(),
            hold,
            self.config.clock_skew,
        ))?;
        let compacted = self.compact_holding(&mut lease);
        let released = self.runtime.block_on(lease.release(&self.client));
        let mut report = compacted?;
        released?;
        report.requests = self.client.requests() - before;
        report.ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    fn compact_holding(&self, lease: &mut Lease) -> Result<CompactReport> {
        // Everything announced before this moment (less the clock margin) is in the
        // catalog once the refresh below is done.
        let covered_ms = pack_log::now_ms();
        self.sync()?;
        self.materialize()?;
        let counts = self.catalog.counts()?;
        let packs = self.catalog.pack_sizes()?;
        let rows = self.catalog.key_rows()?;
        let bits = shard::bits_for(rows);
        let generation = generation_name(covered_ms);
        let mut report = CompactReport {
            generation: generation.clone(),
            packs: packs.len() as u64,
            shards: 1 << bits,
            ..CompactReport::default()
        };
        let mut table = vec![(0u64, 0u32); 1 << bits];
        let shards: Vec<usize> = (0..1usize << bits).collect();
        for batch in shards.chunks(UPLOADS) {
            self.renew_if_due(lease)?;
            let mut files = Vec::with_capacity(batch.len());
            for &s in batch {
                let (from, to) = bounds(s, bits);
                let entries = self.catalog.range(&from, to.as_ref())?;
                report.entries += entries.len() as u64;
                let (file, header_len) = shard::build(entries);
                table[s] = (file.len() as u64, header_len);
                report.bytes += file.len() as u64;
                files.push((format!("{generation}/{s:04x}"), Bytes::from(file)));
            }
            let uploaded: Vec<Result<()>> = self.runtime.block_on(
                futures::stream::iter(files.into_iter().map(|(name, file)| async move {
                    self.client.put(Part::Shards, &name, file, false).await
                }))
                .buffer_unordered(UPLOADS)
                .collect(),
            );
            uploaded.into_iter().collect::<Result<()>>()?;
        }
        // The packs announced in the day before: readers list the log from a margin
        // before the compaction and leave these to the shards.
        let day = pack_log::LIST_WHOLE_EVERY;
        let after = pack_log::start_after(covered_ms, day);
        let listing = self.runtime.block_on(self.client.list_log(Some(&after)))?;
        let covered: std::collections::HashSet<&String> = packs.iter().map(|(n, _)| n).collect();
        let recent: std::collections::BTreeSet<String> = listing
            .iter()
            .filter_map(|e| pack_log::parse(e))
            .map(|e| e.pack)
            .filter(|p| covered.contains(p))
            .collect();
        let manifest = Manifest {
            generation: generation.clone(),
            recent: recent.into_iter().collect(),
            covered_ms,
            packs: counts.packs,
            objects: counts.objects,
            bytes: counts.bytes,
            bits,
            shards: table,
        };
        self.runtime.block_on(async {
            let packs_file = Bytes::from(shard::encode_packs(&packs));
            self.client
                .put(Part::Shards, &format!("{generation}/packs"), packs_file, false)
                .await?;
            // Last: readers see the generation once it is whole.
            self.client.put(Part::Shards, CURRENT, Bytes::from(manifest.encode()), false).await
        })?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Key;

    #[test]
    fn shards_split_the_key_space_in_order() {
        for bits in [0u8, 1, 4, 12] {
            let count = 1usize << bits;
            let mut previous: Option<[u8; 32]> = None;
            for s in 0..count {
                let (from, to) = bounds(s, bits);
                if let Some(p) = previous {
                    assert_eq!(p, from, "shard {s} of {count} starts where the last ended");
                }
                assert_eq!(shard::shard_of(&Key::from_bytes(from), bits), s);
                previous = to;
            }
            assert_eq!(previous, None);
        }
    }
}
