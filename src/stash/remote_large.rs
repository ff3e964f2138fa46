//! Large objects from the remote: a manifest member read through or pulled becomes the
//! object again, its chunks fetched a few MiB at a time, each checked against its own
//! hash, and streamed into a chunked save, which checks the whole against the object's
//! key. Memory stays bounded whatever the object's size.
//!
//! A chunk the remote does not list (a push whose pack of chunks has not landed yet, while
//! its manifest's has) is a clean miss: the object is not there yet. A chunk or a whole
//! that fails its check is damage of the remote, as for any member.

use std::io::{self, Read};
use std::sync::{Arc, Mutex, PoisonError};

use crate::codec;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::large::manifest::Manifest;
use crate::remote::{self, Location, Remote};

use super::Stash;

/// Bytes of chunks fetched at once.
const FETCH_BYTES: usize = 8 << 20;

/// What became of a large object from the remote.
pub(super) enum Fetched {
    /// Stored under its key.
    Stored,
    /// A chunk it lists is not on the remote (yet).
    Incomplete,
}

impl Stash {
    /// Stores the large object whose manifest member `member` was fetched from `location`.
    ///
    /// # Errors
    /// [`Error::RemoteCorrupt`] if the manifest, a chunk or the whole fails its check;
    /// [`Error::Remote`] if a fetch fails; as [`Stash::save_reader`] otherwise.
    pub(super) fn store_large(
        &self,
        remote: &Remote,
        location: &Location,
        member: &[u8],
    ) -> Result<Fetched> {
        let key = location.entry.key;
        let damaged =
            |reason: String| Error::RemoteCorrupt { key, pack: location.pack.clone(), reason };
        if member.len() != location.entry.len as usize {
            return Err(damaged(format!("{} bytes came back", member.len())));
        }
        let stored = codec::decompress(member, location.entry.raw_len).map_err(damaged)?;
        let manifest = Manifest::parse(&stored).map_err(damaged)?;
        let failed = Arc::new(Mutex::new(None));
        let chunks = RemoteChunks {
            remote,
            manifest: &manifest,
            next: 0,
            buffer: Vec::new(),
            at: 0,
            failed: Arc::clone(&failed),
        };
        let saved = self.save_chunked(chunks);
        if let Some(why) = failed.lock().unwrap_or_else(PoisonError::into_inner).take() {
            return match why {
                Failure::Missing => Ok(Fetched::Incomplete),
                Failure::Error(e) => Err(e),
            };
        }
        let saved = saved?;
        if saved != key {
            return Err(damaged(format!("its chunks make an object that hashes to {saved}")));
        }
        Ok(Fetched::Stored)
    }
}

/// Why reading the chunks stopped.
enum Failure {
    Missing,
    Error(Error),
}

/// The chunks of a manifest as one stream, fetched `FETCH_BYTES` at a time and checked.
struct RemoteChunks<'a> {
    remote: &'a Remote,
    manifest: &'a Manifest,
    /// The next chunk to fetch.
    next: usize,
    /// Checked bytes not yet read, from `at`.
    buffer: Vec<u8>,
    at: usize,
    failed: Arc<Mutex<Option<Failure>>>,
}

impl RemoteChunks<'_> {
    fn fail(&self, why: Failure) -> io::Error {
        *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
        io::Error::other("reading the chunks from the remote stopped")
    }

    /// Fetches and checks the next chunks into the buffer.
    fn refill(&mut self) -> io::Result<()> {
        let chunks = &self.manifest.chunks;
        let mut end = self.next;
        let mut bytes = 0;
        while end < chunks.len() && (end == self.next || bytes < FETCH_BYTES) {
            bytes += chunks[end].len as usize;
            end += 1;
        }
        let keys: Vec<Key> = chunks[self.next..end].iter().map(|c| c.key).collect();
        let mut buffer = Vec::with_capacity(bytes);
        // A chunk whose pack a collection deleted since the copy of the indexes was
        // refreshed: the packs are forgotten, the copy refreshed, and the chunks read again
        // where the remote still holds them (once).
        for retry in [true, false] {
            let located = match self.remote.locate(&keys) {
                Ok(located) => located,
                Err(e) => return Err(self.fail(Failure::Error(e))),
            };
            let Some(located) = located.into_iter().collect::<Option<Vec<Location>>>() else {
                return Err(self.fail(Failure::Missing));
            };
            let members = self.remote.fetch(&located);
            let gone: std::collections::BTreeSet<String> = located
                .iter()
                .zip(&members)
                .filter(|(_, m)| m.as_ref().is_err_and(Remote::is_gone))
                .map(|(l, _)| l.pack.clone())
                .collect();
            if retry && !gone.is_empty() {
                let gone: Vec<String> = gone.into_iter().collect();
                if let Err(e) = self.remote.forget(&gone) {
                    return Err(self.fail(Failure::Error(e)));
                }
                continue;
            }
            for (location, member) in located.iter().zip(members) {
                let checked = member.and_then(|member| remote::check(location, &member));
                match checked {
                    Ok(raw) => buffer.extend_from_slice(&raw),
                    Err(e) => return Err(self.fail(Failure::Error(e))),
                }
            }
            break;
        }
        self.buffer = buffer;
        self.at = 0;
        self.next = end;
        Ok(())
    }
}

impl Read for RemoteChunks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.buffer.len() {
            if self.next == self.manifest.chunks.len() {
                return Ok(0);
            }
            self.refill()?;
        }
        let n = buf.len().min(self.buffer.len() - self.at);
        buf[..n].copy_from_slice(&self.buffer[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
