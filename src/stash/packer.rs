//! The packs a push builds (feature `remote`): the stash's rows read, checked and turned
//! into gzip members, chunked objects as their chunks then their manifest.

use std::collections::{HashSet, VecDeque};

use rayon::prelude::*;

use crate::codec;
use crate::codec::zstd_dict;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::large::chunks;
use crate::large::manifest::{self, ChunkRef, Manifest};
use crate::remote::{Builder, Kind, Remote, Sealed};
use crate::writer::pending::Row;

use super::Stash;

/// Builds packs of the objects of `keys` as they are asked for, so that one uploads while
/// the next is built. A chunked object goes as its chunks (those the remote lacks, each a
/// member under its own hash), read a pack's worth at a time, then its manifest.
pub(super) struct Packer<'a, I> {
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
    /// Packs of the objects of `keys` (in chunks), counting the corrupt ones left out.
    pub(super) fn new(
        stash: &'a Stash,
        remote: &'a Remote,
        keys: I,
        corrupt: &'a std::sync::atomic::AtomicU64,
    ) -> Self {
        Packer {
            stash,
            remote,
            keys,
            ready: VecDeque::new(),
            large: VecDeque::new(),
            packed: HashSet::new(),
            builder: Builder::default(),
            pack_size: remote.config.pack_size as usize,
            corrupt,
        }
    }

    /// Reads the rows of `keys`, checks each and turns it into a gzip member; a chunked
    /// object's manifest is checked and queued for its chunks.
    fn read(&mut self, keys: &[Key]) -> Result<()> {
        let stash = self.stash;
        let rows = stash.lookup(
            keys,
            |row: Row| (row.raw_len as i64, row.data),
            |conn, keys| {
                keys.iter()
                    .map(|key| Ok(stash.select_row(conn, key)?.map(|row| (row.raw_len, row.data))))
                    .collect()
            },
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
                    let member = if data.starts_with(&zstd_dict::MAGIC) {
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
