//! Reading an object as a stream: [`Stash::open_reader`] and [`ObjectReader`], and `get`
//! of a chunked object.
//!
//! A chunked object is read chunk by chunk, each in a read transaction of its own and
//! checked against its own key before a byte of it is returned, so memory holds one chunk
//! whatever the object's size and a range costs only the chunks it covers. A read from
//! the start to the end also checks the whole object's hash against its key. An object of
//! one row is decoded and checked whole, as `get` does.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use crate::db::readers::Readers;
use crate::error::{Error, Result};
use crate::key::Key;
use crate::large::chunks::{self, ChunkError};
use crate::large::manifest::Manifest;

use super::Stash;

/// An object opened for reading ([`Stash::open_reader`]): `Read` and `Seek`, in bounded
/// memory. A damaged chunk fails the read that reaches it with an `io::Error` of kind
/// `InvalidData` wrapping [`Error::Corrupt`] naming the object; no unchecked byte is ever
/// returned.
pub struct ObjectReader {
    key: Key,
    len: u64,
    source: Source,
    pos: u64,
    /// The whole object's hash, while it is read from the start without a seek.
    whole: Option<blake3::Hasher>,
}

enum Source {
    /// An object of one row, checked whole.
    Row(Vec<u8>),
    Chunked {
        readers: Arc<Readers>,
        manifest: Manifest,
        /// The statement that says whether the object's row is still stored.
        exists: String,
        offsets: Vec<u64>,
        /// The chunk read last: its index and bytes.
        current: Option<(usize, Vec<u8>)>,
    },
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader")
            .field("key", &self.key)
            .field("len", &self.len)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl ObjectReader {
    /// The object's key.
    pub fn key(&self) -> Key {
        self.key
    }

    /// The object's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the object is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn corrupt(&self, reason: impl Into<String>) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, Error::corrupt(self.key, reason))
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            if let Some(whole) = self.whole.take()
                && Key::from_bytes(*whole.finalize().as_bytes()) != self.key
            {
                return Err(self.corrupt("its chunks do not hash to its key"));
            }
            return Ok(0);
        }
        let key = self.key;
        let pos = self.pos;
        let bytes: &[u8] = match &mut self.source {
            Source::Row(bytes) => &bytes[pos as usize..],
            Source::Chunked { readers, manifest, exists, offsets, current } => {
                let index = offsets.partition_point(|&start| start <= pos) - 1;
                if current.as_ref().is_none_or(|(i, _)| *i != index) {
                    let chunk = read_chunk(readers, &key, manifest, exists, index)?;
                    *current = Some((index, chunk));
                }
                let (_, chunk) = current.as_ref().expect("read above");
                &chunk[(pos - offsets[index]) as usize..]
            }
        };
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        if let Some(whole) = &mut self.whole {
            whole.update(&bytes[..n]);
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for ObjectReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        };
        let Some(target) = target else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a seek before the start of the object",
            ));
        };
        if target != self.pos {
            // Read from elsewhere than the start: only the chunks' own checks apply.
            self.whole = None;
        }
        self.pos = target;
        Ok(target)
    }
}

/// Reads chunk `index` of the object `key`, checked. A missing chunk of an object that is
/// still stored (`exists`, its table's statement) is damage; of one removed meanwhile, the
/// object is gone.
fn read_chunk(
    readers: &Readers,
    key: &Key,
    manifest: &Manifest,
    exists: &str,
    index: usize,
) -> io::Result<Vec<u8>> {
    let entry = &manifest.chunks[index];
    let conn = readers.checkout().map_err(io::Error::other)?;
    let damaged =
        |reason: String| io::Error::new(io::ErrorKind::InvalidData, Error::corrupt(*key, reason));
    match chunks::read(&conn, entry) {
        Ok(bytes) => Ok(bytes),
        Err(ChunkError::Read(e)) => Err(io::Error::other(e)),
        Err(ChunkError::Damaged(reason)) => Err(damaged(reason)),
        Err(ChunkError::Missing) => {
            let stored = conn
                .prepare_cached(exists)
                .and_then(|mut stmt| stmt.exists([&key.as_bytes()[..]]))
                .map_err(io::Error::other)?;
            if stored {
                return Err(damaged(format!("its chunk {} is missing", entry.key)));
            }
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "object {key} was removed while it was read (its chunk {} is gone)",
                    entry.key
                ),
            ))
        }
    }
}

impl Stash {
    /// Opens the object stored under `key` for reading as a stream, or `None` if it is not
    /// stored. Reading it, whole or in ranges, holds one chunk in memory at a time; see
    /// [`ObjectReader`]. Opening counts as a use of it.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if its stored row is damaged; [`Error::Database`] if the read
    /// fails.
    pub fn open_reader(&self, key: &Key) -> Result<Option<ObjectReader>> {
        let reader = self.open_reader_uncounted(key)?;
        self.shared.counts.read(1, usize::from(reader.is_some()));
        Ok(reader)
    }

    fn open_reader_uncounted(&self, key: &Key) -> Result<Option<ObjectReader>> {
        let row = match self.pending_row(key)? {
            Some(row) => {
                Some((row.raw_len as i64, row.data.to_vec(), Some(crate::cache::uses::now())))
            }
            None => {
                let reader = self.readers.checkout()?;
                self.select_row(&reader, key)?.map(|row| (row.raw_len, row.data.to_vec(), row.used))
            }
        };
        let Some((raw_len, data, used)) = row else {
            // Not here: read it through the remote, if the stash has one.
            #[cfg(feature = "remote")]
            if self.remote.is_some() {
                return Ok(self.get_uncounted(key)?.map(|bytes| ObjectReader {
                    key: *key,
                    len: bytes.len() as u64,
                    source: Source::Row(bytes),
                    pos: 0,
                    whole: Some(blake3::Hasher::new()),
                }));
            }
            return Ok(None);
        };
        let source = if crate::large::manifest::is_manifest(&data) {
            let manifest = Manifest::decode(&data, raw_len).map_err(|r| Error::corrupt(*key, r))?;
            self.shared.uses.record_read(key, used);
            Source::Chunked {
                readers: Arc::clone(&self.readers),
                exists: self.table(key).exists.clone(),
                offsets: manifest.offsets(),
                manifest,
                current: None,
            }
        } else {
            Source::Row(self.decode(key, raw_len, &data, used)?)
        };
        let len = match &source {
            Source::Row(bytes) => bytes.len() as u64,
            Source::Chunked { manifest, .. } => manifest.len,
        };
        Ok(Some(ObjectReader {
            key: *key,
            len,
            source,
            pos: 0,
            whole: Some(blake3::Hasher::new()),
        }))
    }

    /// The bytes of a chunked object whose stored row is `stored`, every chunk checked and
    /// the whole checked against `key`.
    pub(super) fn assemble_chunks(
        &self,
        key: &Key,
        raw_len: i64,
        stored: &[u8],
    ) -> Result<Vec<u8>> {
        let manifest = Manifest::decode(stored, raw_len).map_err(|r| Error::corrupt(*key, r))?;
        let len = usize::try_from(manifest.len)
            .map_err(|_| Error::corrupt(*key, "its length does not fit in memory"))?;
        let mut object = Vec::with_capacity(len);
        for index in 0..manifest.chunks.len() {
            let exists = &self.table(key).exists;
            let chunk = read_chunk(&self.readers, key, &manifest, exists, index).map_err(|e| {
                Error::from_io(e).unwrap_or_else(|e| Error::io(format!("reading {key}"), e))
            })?;
            object.extend_from_slice(&chunk);
        }
        if Key::of(&object) != *key {
            return Err(Error::corrupt(*key, "its chunks do not hash to its key"));
        }
        Ok(object)
    }
}
