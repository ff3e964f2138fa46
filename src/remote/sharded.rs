//! Reading a compacted index in parts: a machine whose copy of the indexes is new starts
//! from the remote's compacted index (`shards/current`, one request) instead of reading
//! every pack index; it then fetches a shard's header (its block fences and filter) and the
//! blocks its keys fall in, as it needs them, and keeps what it fetched in its catalog
//! (blocks up to 64 MiB). What was pushed after the compaction it reads from the pack log
//! as before, and packs the log takes out after the compaction it remembers as gone.
//!
//! A first read-through of one key on a new machine: the manifest, the shard's header,
//! one block, then the object: four requests, and index bytes of a header (its filter is
//! 10 bits a key of the shard) and a block of ~21 KiB. A key the filter rules out costs no
//! block. A pull, a collection, a trim or a compaction needs every entry: the catalog is
//! then filled from the whole shard files (`materialize`) and stops reading in parts.

use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;

use super::catalog::Location;
use super::client::Part;
use super::compact::CURRENT;
use super::shard::{self, Header, Located, Manifest};
use super::{READS_IN_FLIGHT, Remote, pack_log};
use crate::error::{Error, Result};
use crate::key::Key;

/// Blocks' entries by (shard, block).
type Blocks = BTreeMap<(usize, usize), Vec<Located>>;

impl Remote {
    /// A catalog that never listed the remote starts from its compacted index, if it has
    /// one (one request); whether it does now.
    pub(crate) fn bootstrap(&self) -> Result<bool> {
        if self.catalog.manifest()?.is_some() {
            return Ok(true);
        }
        // Known already to list the whole log, or the remote failing (the listing that
        // follows answers with that failure without a request).
        if self.catalog.cursor()?.is_some() || self.failing_recently() {
            return Ok(false);
        }
        let adopted = self.adopt_current();
        if let Err(e) = &adopted {
            self.note_failure(e);
        }
        adopted
    }

    /// Reads `shards/current` and reads through it from now on; whether there is one.
    fn adopt_current(&self) -> Result<bool> {
        let Some(bytes) = self.runtime.block_on(self.client.get_if_there(Part::Shards, CURRENT))?
        else {
            return Ok(false);
        };
        let manifest = Manifest::decode(&bytes).map_err(|reason| {
            Error::remote(
                format!("reading the compacted index of {}", self.url()),
                std::io::Error::other(reason),
            )
        })?;
        self.catalog.adopt(&manifest, pack_log::now_ms())?;
        Ok(true)
    }

    /// Where the compacted index says the remote holds each of `keys` (`None` where it
    /// does not, or the pack went since), fetching what it lacks of headers and blocks.
    pub(crate) fn locate_in_shards(&self, keys: &[Key]) -> Result<Vec<Option<Location>>> {
        let mut found = vec![None; keys.len()];
        let Some(mut manifest) = self.catalog.manifest()? else { return Ok(found) };
        let gone = self.catalog.gone()?;
        for attempt in 0..2 {
            if self.lookup(&manifest, keys, &gone, &mut found)? {
                return Ok(found);
            }
            // A file of the generation is not there: it was collected since, and the
            // current generation is read again.
            if attempt == 0 && self.adopt_current()? {
                manifest = self.catalog.manifest()?.expect("just adopted");
            }
        }
        Err(Error::remote(
            format!("reading the compacted index of {}", self.url()),
            std::io::Error::other("its files went while they were read"),
        ))
    }

    /// Looks `keys` up in `manifest`'s generation; `false` if a file of it is not there.
    fn lookup(
        &self,
        manifest: &Manifest,
        keys: &[Key],
        gone: &HashSet<String>,
        found: &mut [Option<Location>],
    ) -> Result<bool> {
        let mut by_shard: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            if found[i].is_none() {
                by_shard.entry(shard::shard_of(key, manifest.bits)).or_default().push(i);
            }
        }
        let Some(headers) = self.headers(manifest, by_shard.keys().copied())? else {
            return Ok(false);
        };
        // The blocks the keys the filters let through fall in.
        let mut wanted: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for (shard, indices) in &by_shard {
            let header = &headers[shard];
            for &i in indices {
                if header.may_hold(&keys[i])
                    && let Some(block) = header.block_of(&keys[i])
                {
                    wanted.entry((*shard, block)).or_default().push(i);
                }
            }
        }
        let Some(blocks) = self.blocks(manifest, &headers, wanted.keys().copied())? else {
            return Ok(false);
        };
        for ((shard, block), indices) in wanted {
            let entries = &blocks[&(shard, block)];
            for i in indices {
                let at = entries.partition_point(|e| e.entry.key < keys[i]);
                found[i] = entries[at..]
                    .iter()
                    .take_while(|e| e.entry.key == keys[i])
                    .find(|e| !gone.contains(&e.pack))
                    .map(|e| Location { pack: e.pack.clone(), entry: e.entry });
            }
        }
        Ok(true)
    }

    /// The headers of `shards`, from the catalog or fetched (one ranged read each).
    fn headers(
        &self,
        manifest: &Manifest,
        shards: impl Iterator<Item = usize>,
    ) -> Result<Option<BTreeMap<usize, Header>>> {
        let mut headers = BTreeMap::new();
        let mut fetch = Vec::new();
        for s in shards {
            match self.catalog.header(s)? {
                Some(bytes) => {
                    headers.insert(s, Header::decode(&bytes).map_err(|r| self.damaged(r))?);
                }
                None => fetch.push(s),
            }
        }
        let fetched = self.runtime.block_on(
            futures::stream::iter(fetch.into_iter().map(|s| async move {
                let range = 0..u64::from(manifest.shards[s].1);
                let name = format!("{}/{s:04x}", manifest.generation);
                (s, self.client.get_ranges_of(Part::Shards, &name, &[range]).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>(),
        );
        for (s, bytes) in fetched {
            let Some(bytes) = bytes? else { return Ok(None) };
            let bytes = bytes.concat();
            let header = Header::decode(&bytes).map_err(|r| self.damaged(r))?;
            self.catalog.keep_header(s, &bytes)?;
            headers.insert(s, header);
        }
        Ok(Some(headers))
    }

    /// The entries of `blocks` (shard, block), from the catalog or fetched (one request
    /// per shard, neighbouring blocks merged).
    fn blocks(
        &self,
        manifest: &Manifest,
        headers: &BTreeMap<usize, Header>,
        blocks: impl Iterator<Item = (usize, usize)>,
    ) -> Result<Option<Blocks>> {
        let mut out = BTreeMap::new();
        let mut fetch: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (s, b) in blocks {
            match self.catalog.block(s, b)? {
                Some(bytes) => {
                    out.insert((s, b), shard::parse_block(&bytes).map_err(|r| self.damaged(r))?);
                }
                None => fetch.entry(s).or_default().push(b),
            }
        }
        let fetched = self.runtime.block_on(
            futures::stream::iter(fetch.into_iter().map(|(s, wanted)| async move {
                let ranges: Vec<_> = wanted
                    .iter()
                    .map(|&b| headers[&s].block_range(b, manifest.shards[s].1))
                    .collect();
                let name = format!("{}/{s:04x}", manifest.generation);
                (s, wanted, self.client.get_ranges_of(Part::Shards, &name, &ranges).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>(),
        );
        let mut keep = Vec::new();
        for (s, wanted, parts) in fetched {
            let Some(parts) = parts? else { return Ok(None) };
            for (b, bytes) in wanted.into_iter().zip(parts) {
                out.insert((s, b), shard::parse_block(&bytes).map_err(|r| self.damaged(r))?);
                keep.push((s, b, bytes.to_vec()));
            }
        }
        self.catalog.keep_blocks(&keep)?;
        Ok(Some(out))
    }

    /// The error of a compacted index's file that fails its checks.
    fn damaged(&self, reason: String) -> Error {
        Error::remote(
            format!("reading the compacted index of {}", self.url()),
            std::io::Error::other(format!("a damaged file: {reason}")),
        )
    }

    /// Fills the catalog with every entry of the compacted index it reads in parts (whole
    /// shard files), then reads the remote whole as before. Nothing to do for a catalog that
    /// does not read a compacted index.
    pub(crate) fn materialize(&self) -> Result<()> {
        let Some(manifest) = self.catalog.manifest()? else { return Ok(()) };
        match self.materialize_from(&manifest) {
            // The generation was collected since: the current one is read instead.
            Err(e) if super::client::is_not_found(&e) && self.adopt_current()? => {
                let manifest = self.catalog.manifest()?.expect("just adopted");
                self.materialize_from(&manifest)
            }
            other => other,
        }
    }

    /// The packs `manifest`'s generation covers, with the lengths of their bodies.
    fn covered_packs(&self, manifest: &Manifest) -> Result<Vec<(String, u64)>> {
        let packs_file = format!("{}/packs", manifest.generation);
        let packs = self.runtime.block_on(self.client.get(Part::Shards, &packs_file))?;
        shard::decode_packs(&packs).map_err(|reason| self.unreadable(reason))
    }

    fn unreadable(&self, reason: String) -> Error {
        Error::remote(
            format!("reading the compacted index of {}", self.url()),
            std::io::Error::other(reason),
        )
    }

    /// Records which of `gone` (packs taken out of the listing) the compacted index of
    /// `manifest` covers, so that the status leaves them out: one request for the
    /// generation's list of packs, when a refresh finds packs gone.
    pub(crate) fn count_gone_covered(&self, manifest: &Manifest, gone: &[String]) -> Result<()> {
        let gone = self.catalog.not_counted_gone(gone)?;
        if gone.is_empty() {
            return Ok(());
        }
        let gone: HashSet<&String> = gone.iter().collect();
        let covered: Vec<(String, u64)> = self
            .covered_packs(manifest)?
            .into_iter()
            .filter(|(name, _)| gone.contains(name))
            .collect();
        self.catalog.count_gone(&covered)
    }

    fn materialize_from(&self, manifest: &Manifest) -> Result<()> {
        let failed = |reason: String| self.unreadable(reason);
        let packs = self.covered_packs(manifest)?;
        let names: Vec<String> = (0..manifest.shards.len())
            .map(|s| format!("{}/{s:04x}", manifest.generation))
            .collect();
        for batch in names.chunks(READS_IN_FLIGHT) {
            let files = self.runtime.block_on(
                futures::stream::iter(batch.iter().map(|name| self.client.get(Part::Shards, name)))
                    .buffered(READS_IN_FLIGHT)
                    .collect::<Vec<_>>(),
            );
            for (name, file) in batch.iter().zip(files) {
                let file = file?;
                let s =
                    usize::from_str_radix(name.rsplit('/').next().unwrap_or("0"), 16).unwrap_or(0);
                let header_len = manifest.shards[s].1 as usize;
                let header =
                    Header::decode(file.get(..header_len).unwrap_or_default()).map_err(failed)?;
                let entries = shard::parse_block(&file[header_len..]).map_err(failed)?;
                if entries.len() != header.entries as usize {
                    return Err(failed(format!("shard {name} lists {} entries", entries.len())));
                }
                self.catalog.add_compacted(&packs, &entries)?;
            }
        }
        let gone: Vec<String> = self.catalog.gone()?.into_iter().collect();
        self.catalog.remove(&gone)?;
        self.catalog.drop_manifest()
    }
}
