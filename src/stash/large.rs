//! Saving large objects: from a reader or a file, in bounded memory, chunked by content
//! (`chunks.rs`) and committed before the call returns.
//!
//! A save of more than [`CHUNKED_ABOVE`] bytes, whichever call makes it, reads its source
//! in groups of chunks: each group is cut, hashed and looked up in one read transaction
//! on the calling thread's pool, its new chunks compressed in parallel, and the group sent
//! to the writer, which stores the chunks as pending (held by this save). The whole
//! content is hashed as it passes, so the key is the blake3 of the object whatever the
//! way in. Last comes the manifest, which the writer commits with the chunks' references
//! in one transaction: the object appears whole or not at all. A save that fails lets go
//! of its chunks; one killed leaves them to the next open alone with the stash.

use std::fs::File;
use std::io::{Cursor, Read};
use std::path::Path;
use std::sync::Arc;

use fastcdc::v2020::StreamCDC;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::key::Key;
use crate::large::chunks::{self, AVG_CHUNK, CHUNKED_ABOVE, MAX_CHUNK, MIN_CHUNK};
use crate::large::inflight::Budget;
use crate::large::manifest::{ChunkRef, Manifest};
use crate::writer::{CommitChunked, Message, Outgoing, PutChunks, Unhold, asked, unasked};

use super::Stash;

/// Raw bytes of chunks cut, hashed and compressed together.
const GROUP_BYTES: usize = 2 << 20;
/// Bytes of one save on their way to the writer or waiting for its commit.
const IN_FLIGHT: usize = 8 << 20;

impl Stash {
    /// Stores everything `source` yields as one object and returns its key, the blake3 of
    /// those bytes: the same key, and the same stored object, as [`Stash::save`] of them.
    /// Memory stays bounded (a few tens of MiB) whatever the size: an object of more than
    /// 8 MiB is cut into chunks by content, each stored once however many objects hold it,
    /// so two versions of a large file share what they have in common. The object is
    /// committed when the call returns.
    ///
    /// # Errors
    /// [`Error::Io`] if `source` fails (nothing of the object is kept); otherwise as
    /// [`Stash::save`].
    pub fn save_reader(&self, mut source: impl Read) -> Result<Key> {
        self.writer()?;
        let mut head = Vec::new();
        (&mut source)
            .take(CHUNKED_ABOVE as u64 + 1)
            .read_to_end(&mut head)
            .map_err(|e| Error::io("reading the object to save", e))?;
        if head.len() <= CHUNKED_ABOVE {
            return self.save(&head);
        }
        self.save_chunked(Cursor::new(head).chain(source))
    }

    /// Stores the content of the file at `path` as one object (see [`Stash::save_reader`]).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened or read; otherwise as [`Stash::save`].
    pub fn save_file(&self, path: impl AsRef<Path>) -> Result<Key> {
        let path = path.as_ref();
        let file = File::open(path)
            .map_err(|e| Error::io(format!("opening {} to save it", path.display()), e))?;
        self.save_reader(std::io::BufReader::with_capacity(1 << 20, file))
    }

    /// Saves a large object from `source`; see the module documentation.
    pub(super) fn save_chunked(&self, source: impl Read) -> Result<Key> {
        self.writer()?;
        let _call = self.shared.uses.saving();
        let mut sent = Vec::new();
        let saved = self.send_chunked(source, &mut sent);
        #[cfg(feature = "remote")]
        if let (Ok(key), Some(behind)) = (&saved, &self.behind) {
            behind.queue(*key);
        }
        if saved.is_err() && !sent.is_empty() {
            // The writer may be gone; then the next open alone reclaims them.
            let _ = self.send(Message::Op(unasked(Unhold(sent))));
        }
        saved
    }

    fn send_chunked(&self, source: impl Read, sent: &mut Vec<Key>) -> Result<Key> {
        let budget = Budget::new(IN_FLIGHT);
        let mut whole = blake3::Hasher::new();
        let mut manifest = Manifest { len: 0, chunks: Vec::new() };
        let mut group: Vec<Vec<u8>> = Vec::new();
        let mut group_bytes = 0;
        let mut cut = StreamCDC::new(source, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK);
        loop {
            let next = cut
                .next()
                .transpose()
                .map_err(|e| Error::io("reading the object to save", std::io::Error::from(e)))?;
            let end = next.is_none();
            if let Some(chunk) = next {
                whole.update(&chunk.data);
                manifest.len += chunk.data.len() as u64;
                if manifest.len > self.saving.max_object {
                    return Err(Error::TooLarge {
                        size: manifest.len,
                        limit: self.saving.max_object,
                    });
                }
                group_bytes += chunk.data.len();
                group.push(chunk.data);
            }
            if (end && !group.is_empty()) || group_bytes >= GROUP_BYTES {
                let refs = self.send_group(std::mem::take(&mut group), &budget)?;
                sent.extend(refs.iter().map(|r| r.key));
                manifest.chunks.extend(refs);
                group_bytes = 0;
            }
            if end {
                break;
            }
        }
        let key = Key::from_bytes(*whole.finalize().as_bytes());
        let manifest = Arc::new(manifest);
        self.ask(|answer| asked(CommitChunked { key, manifest, added: false }, answer))?;
        sent.clear();
        Ok(key)
    }

    /// Hashes a group of chunks, looks them up, compresses the new ones (in parallel) and
    /// sends them; their entries in the manifest.
    fn send_group(&self, group: Vec<Vec<u8>>, budget: &Arc<Budget>) -> Result<Vec<ChunkRef>> {
        let keys: Vec<Key> = self.pool.install(|| group.par_iter().map(|c| Key::of(c)).collect());
        let known = self.known_chunks(&keys)?;
        let level = self.saving.level;
        let refs = group.iter().zip(&keys).map(|(c, &key)| ChunkRef { key, len: c.len() as u32 });
        let refs: Vec<ChunkRef> = refs.collect();
        let outgoing: Vec<Outgoing> = self.pool.install(|| {
            group
                .into_par_iter()
                .zip(keys)
                .zip(known)
                .map(|((raw, key), known)| {
                    if known {
                        Outgoing::Known { key, raw, level }
                    } else {
                        Outgoing::Encoded(chunks::encode(key, raw, level))
                    }
                })
                .collect()
        });
        let bytes = outgoing.iter().map(Outgoing::bytes).sum();
        let permit = budget.take(bytes);
        self.send(Message::Op(unasked(PutChunks { chunks: outgoing, permit })))?;
        Ok(refs)
    }

    /// Which of `keys` are stored chunks, in one read transaction.
    fn known_chunks(&self, keys: &[Key]) -> Result<Vec<bool>> {
        self.readers.checkout()?.in_transaction(|conn| {
            if !chunks::table_exists(conn)? {
                return Ok(vec![false; keys.len()]);
            }
            keys.iter().map(|key| chunks::stored(conn, key)).collect()
        })
    }
}
