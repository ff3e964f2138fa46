//! Zstandard with dictionaries trained on the stash's own objects ([`Codec::ZstdDict`]).
//!
//! Small objects compress badly one at a time because each starts with an empty window;
//! a dictionary trained on a sample of the stash's objects gives every object the shared
//! vocabulary (property names, type names, layer names) up front.
//!
//! Rows say how they were written: a gzip member starts with `1f 8b`, a zstd frame with
//! `28 b5 2f fd` and names its dictionary's id in its header. So gzip rows and rows of any
//! number of dictionaries coexist, and a row stays readable after retraining: dictionaries
//! are stored in the `objstash_dicts` table (`db/dicts.rs`) and never deleted. A dictionary is committed in
//! the same transaction as, or before, the first row compressed with it, because the
//! writer receives it through the same channel before any such row; and no two
//! dictionaries with one id are ever stored (`db::dicts::store` refuses the second).
//!
//! Other handles, in this process or others, train dictionaries too, so a handle's set is
//! never final: a row naming an id this handle does not know sends it to the database
//! (once per id, one thread at a time), and only an id the database does not hold either
//! makes the row damaged. Any row a read finds was committed with or after its dictionary,
//! so the lookup, which starts a transaction later, always sees it.
//!
//! Compression and decompression use digested dictionaries (`CDict`/`DDict`) built once
//! per dictionary and one zstd context per thread, reused for every object.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use crate::codec::scratch;
use crate::error::{Error, Result};

/// The zstd level rows are written at. Measured on 200,000 Speckle objects with a 64 KiB
/// dictionary (notes/design.md): level 1 was both the fastest and the smallest
/// (ratio 3.38, against 3.35 at level 3 and 2.58 at level 5).
pub(crate) const LEVEL: i32 = 1;
/// The size a trained dictionary may reach.
pub(crate) const DICT_BYTES: usize = 64 << 10;
/// Bytes of objects sampled to train a dictionary, by default.
pub(crate) const SAMPLE_BYTES: usize = 4 << 20;
/// Fewer samples than this give zstd's trainer too little to work with.
pub(crate) const MIN_SAMPLES: usize = 64;
/// The frame magic number of zstd, as it appears at the start of a stored value.
pub(crate) const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// zstd can expand at most about 43,000 to 1 (RLE blocks); a recorded length beyond this
/// bound is a damaged row, not a reason to allocate.
const MAX_RATIO: usize = 1 << 16;

/// One trained dictionary, digested for both directions.
pub(crate) struct Dictionary {
    pub id: u32,
    pub bytes: Vec<u8>,
    cdict: CDict<'static>,
    ddict: DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Dictionary {
    /// Digests a dictionary in zstd's format; its id comes from its header.
    pub(crate) fn new(bytes: Vec<u8>) -> std::result::Result<Self, String> {
        let id = zstd_safe::get_dict_id(&bytes)
            .ok_or("not a zstd dictionary (no dictionary id in its header)")?
            .get();
        let cdict = CDict::try_create(&bytes, LEVEL).ok_or("zstd rejected the dictionary")?;
        let ddict = DDict::try_create(&bytes).ok_or("zstd rejected the dictionary")?;
        Ok(Dictionary { id, bytes, cdict, ddict })
    }

    /// Trains a dictionary on `samples` (whole objects).
    pub(crate) fn train<S: AsRef<[u8]>>(samples: &[S]) -> std::result::Result<Self, String> {
        if samples.len() < MIN_SAMPLES {
            return Err(format!(
                "{} objects are too few to train a dictionary (at least {MIN_SAMPLES})",
                samples.len()
            ));
        }
        let bytes = zstd::dict::from_samples(samples, DICT_BYTES)
            .map_err(|e| format!("training a dictionary failed: {e}"))?;
        Dictionary::new(bytes)
    }

    /// Compresses `raw` into one zstd frame naming this dictionary and its content size.
    pub(crate) fn compress(&self, raw: &[u8]) -> Vec<u8> {
        scratch::exact_output(zstd_safe::compress_bound(raw.len()), |out| {
            COMPRESSOR.with(|cell| {
                let mut cctx = cell.borrow_mut();
                let cctx = cctx.get_or_insert_with(CCtx::create);
                cctx.compress_using_cdict(out, raw, &self.cdict)
                    .expect("a buffer of compress_bound bytes always holds the frame")
            })
        })
    }
}

thread_local! {
    static COMPRESSOR: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// Why a stored value could not be decoded.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// The bytes are wrong: the row is damaged.
    Damaged(String),
    /// The database could not be asked for a dictionary the row names: nothing is known to
    /// be wrong with the row.
    Lookup(Error),
}

impl From<String> for DecodeError {
    fn from(reason: String) -> Self {
        DecodeError::Damaged(reason)
    }
}

impl From<&str> for DecodeError {
    fn from(reason: &str) -> Self {
        DecodeError::Damaged(reason.to_string())
    }
}

/// Where a handle finds the dictionaries other handles store after it loaded its own:
/// the stash's database (`db/dicts.rs`).
pub(crate) trait Source: std::fmt::Debug + Send + Sync {
    /// The stored dictionaries, oldest first (only the one of `id`, if given).
    fn read(&self, id: Option<u32>) -> Result<Vec<Arc<Dictionary>>>;
}

/// Every dictionary of a stash by id, and the one new objects are compressed with.
#[derive(Debug, Default)]
pub(crate) struct Dictionaries {
    known: RwLock<HashMap<u32, Arc<Dictionary>>>,
    current: RwLock<Option<Arc<Dictionary>>>,
    /// `None` for a file nobody else writes (salvage, repair): what was loaded is all.
    source: Option<Box<dyn Source>>,
    /// Held while the database is asked for an id; the ids it does not hold.
    absent: Mutex<HashSet<u32>>,
}

impl Dictionaries {
    /// The dictionaries given, oldest first (the newest becomes current); with a
    /// `source`, dictionaries other handles store later are read from it when a row names
    /// one.
    pub(crate) fn new(stored: Vec<Arc<Dictionary>>, source: Option<Box<dyn Source>>) -> Self {
        let dicts = Dictionaries { source, ..Dictionaries::default() };
        for dict in stored {
            dicts.add(dict);
        }
        dicts
    }

    /// Every known dictionary, oldest id first and the current one last (to store again:
    /// salvage).
    pub(crate) fn all(&self) -> Vec<Arc<Dictionary>> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let current = self.current().map(|d| d.id);
        let mut dicts: Vec<Arc<Dictionary>> =
            known.values().filter(|d| Some(d.id) != current).cloned().collect();
        dicts.sort_by_key(|d| d.id);
        dicts.extend(current.and_then(|id| known.get(&id).cloned()));
        dicts
    }

    /// Makes `dict` known and current.
    pub(crate) fn add(&self, dict: Arc<Dictionary>) {
        self.learn(Arc::clone(&dict));
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(dict);
    }

    /// Makes `dict` known, for reading.
    fn learn(&self, dict: Arc<Dictionary>) {
        self.known.write().unwrap_or_else(|p| p.into_inner()).insert(dict.id, dict);
    }

    /// The dictionary new objects are compressed with, if one has been trained.
    pub(crate) fn current(&self) -> Option<Arc<Dictionary>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The dictionary of this id, if known.
    pub(crate) fn get(&self, id: u32) -> Option<Arc<Dictionary>> {
        self.known.read().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// The dictionary of this id: known, or stored since by another handle.
    fn find(&self, id: u32) -> Result<Option<Arc<Dictionary>>> {
        if let Some(dict) = self.get(id) {
            return Ok(Some(dict));
        }
        let Some(source) = &self.source else { return Ok(None) };
        let mut absent = self.absent.lock().unwrap_or_else(|p| p.into_inner());
        // Another thread may have read it while this one waited.
        if let Some(dict) = self.get(id) {
            return Ok(Some(dict));
        }
        if absent.contains(&id) {
            return Ok(None);
        }
        let found = source.read(Some(id))?.pop();
        match &found {
            Some(dict) => self.learn(Arc::clone(dict)),
            None => {
                absent.insert(id);
            }
        }
        Ok(found)
    }

    /// The newest dictionary the stash holds, read again from the database (another
    /// handle may have trained one since this one opened); every stored one becomes known.
    pub(crate) fn newest_stored(&self) -> Result<Option<Arc<Dictionary>>> {
        let Some(source) = &self.source else { return Ok(self.current()) };
        let stored = source.read(None)?;
        for dict in &stored {
            self.learn(Arc::clone(dict));
        }
        Ok(stored.last().cloned())
    }

    /// Decompresses a zstd frame that must hold exactly `raw_len` bytes.
    pub(crate) fn decompress(
        &self,
        stored: &[u8],
        raw_len: u64,
    ) -> std::result::Result<Vec<u8>, DecodeError> {
        let raw_len =
            usize::try_from(raw_len).map_err(|_| "recorded length does not fit memory")?;
        if raw_len > stored.len().saturating_mul(MAX_RATIO) {
            return Err(format!(
                "recorded length {raw_len} is impossible for {} compressed bytes",
                stored.len()
            )
            .into());
        }
        match zstd_safe::get_frame_content_size(stored) {
            Ok(Some(size)) if size == raw_len as u64 => {}
            Ok(Some(size)) => {
                return Err(format!("frame holds {size} bytes, {raw_len} recorded").into());
            }
            Ok(None) | Err(_) => return Err("zstd frame header is damaged".into()),
        }
        let id = zstd_safe::get_dict_id_from_frame(stored)
            .ok_or("zstd frame names no dictionary")?
            .get();
        let dict = self.find(id).map_err(DecodeError::Lookup)?.ok_or_else(|| {
            format!("zstd frame names dictionary {id}, which the stash does not hold")
        })?;
        let mut out = Vec::with_capacity(raw_len);
        let written = DECOMPRESSOR.with(|cell| {
            let mut dctx = cell.borrow_mut();
            let dctx = dctx.get_or_insert_with(DCtx::create);
            dctx.decompress_using_ddict(&mut out, stored, &dict.ddict).map_err(|code| {
                format!("zstd frame is damaged: {}", zstd_safe::get_error_name(code))
            })
        })?;
        if written != raw_len {
            return Err(format!("decodes to {written} bytes, {raw_len} recorded").into());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Vec<u8>> {
        (0..500)
            .map(|i| {
                format!(
                    "{{\"speckle_type\":\"Objects.Geometry.Line\",\"units\":\"mm\",\"x\":{i}.25,\
                     \"layer\":\"A-WALL-{}\",\"elementId\":\"{}\"}}",
                    i % 7,
                    i * 7919
                )
                .into_bytes()
            })
            .collect()
    }

    #[test]
    fn round_trip_with_a_trained_dictionary() {
        let objs = samples();
        let dict = Arc::new(Dictionary::train(&objs).unwrap());
        let dicts = Dictionaries::default();
        dicts.add(Arc::clone(&dict));
        for obj in &objs {
            let stored = dict.compress(obj);
            assert_eq!(stored[..4], MAGIC);
            assert!(stored.len() < obj.len());
            assert_eq!(&dicts.decompress(&stored, obj.len() as u64).unwrap(), obj);
        }
    }

    #[test]
    fn lies_and_unknown_dictionaries_are_errors() {
        let objs = samples();
        let dict = Dictionary::train(&objs).unwrap();
        let stored = dict.compress(&objs[0]);
        let empty = Dictionaries::default();
        let lacking = empty.decompress(&stored, objs[0].len() as u64).unwrap_err();
        assert!(
            matches!(&lacking, DecodeError::Damaged(r) if r.contains("does not hold")),
            "{lacking:?}"
        );
        let dicts = Dictionaries::default();
        dicts.add(Arc::new(dict));
        let len = objs[0].len() as u64;
        assert!(dicts.decompress(&stored, len + 1).is_err());
        assert!(dicts.decompress(&stored, u64::MAX).is_err());
        assert!(dicts.decompress(&stored[..stored.len() - 1], len).is_err());
        let mut flipped = stored.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x55;
        // Either an error or bytes the caller's hash check rejects; never a panic.
        if let Ok(bytes) = dicts.decompress(&flipped, len) {
            assert_ne!(&bytes, &objs[0]);
        }
    }

    #[test]
    fn too_few_samples_is_an_error() {
        assert!(Dictionary::train(&samples()[..10]).unwrap_err().contains("too few"));
    }
}
