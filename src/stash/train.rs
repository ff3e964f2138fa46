//! The zstd dictionary of a stash: sampling the first objects, training, retraining.
//!
//! With [`Codec::ZstdDict`] and no dictionary yet, the first objects saved are gathered
//! (and gzipped meanwhile) until the sample is full; the save call that fills it trains
//! the dictionary on its calling thread (a few hundred milliseconds) while other threads
//! keep saving with gzip, unless another handle has stored one by then, which is used
//! instead. A dictionary is queued for the writer before it becomes current, so a row
//! compressed with it always reaches the database after the dictionary itself.

use std::sync::Arc;

use crate::codec::Codec;
use crate::codec::zstd_dict::{self, Dictionaries, Dictionary};
use crate::error::{Error, Result};
use crate::writer::{self as ops, Message, unasked};

use super::Stash;
use super::save::SAVE_CHUNK;

/// What gathers the sample a dictionary is trained on ([`Codec::ZstdDict`] only).
pub(super) enum Trainer {
    /// No dictionary is wanted, one exists, or one is being trained.
    Off,
    /// The first objects saved, until their bytes reach the sample size.
    Sampling { samples: Vec<Vec<u8>>, bytes: usize },
}

impl Trainer {
    pub(super) fn new(codec: Codec, dicts: &Dictionaries) -> Self {
        if codec.trains_dictionary() && dicts.current().is_none() {
            Trainer::Sampling { samples: Vec::new(), bytes: 0 }
        } else {
            Trainer::Off
        }
    }
}

impl Stash {
    /// Trains a new dictionary on the objects stored so far (up to the sample size, see
    /// [`StashBuilder::dictionary_sample`](crate::StashBuilder::dictionary_sample)) and
    /// compresses new objects with it; returns its id. Objects already stored keep the
    /// codec they were written with and stay readable. Waits for pending writes to commit.
    ///
    /// # Errors
    /// [`Error::Training`] unless the stash's codec is [`Codec::ZstdDict`], or when it
    /// holds too few objects to train on; as [`Stash::flush`] otherwise.
    pub fn train(&self) -> Result<u32> {
        if !self.saving.codec.trains_dictionary() {
            return Err(Error::training(format!(
                "the stash's codec is {}; dictionaries are for zstd-dict",
                self.saving.codec
            )));
        }
        let totals = self.totals()?;
        // A uniform sample of the stored objects (reservoir sampling), sized to the sample
        // bytes by the mean object size: retraining sees what the stash holds now.
        let mean = (totals.raw_bytes / totals.objects.max(1)).max(1) as usize;
        let wanted = (self.saving.sample_bytes / mean).max(zstd_dict::MIN_SAMPLES);
        let mut rng = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
            | 1;
        let mut keys = Vec::with_capacity(wanted);
        for (seen, entry) in self.entries()?.enumerate() {
            let key = entry?.key;
            if keys.len() < wanted {
                keys.push(key);
                continue;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let slot = (rng % (seen as u64 + 1)) as usize;
            if slot < wanted {
                keys[slot] = key;
            }
        }
        let mut samples = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(SAVE_CHUNK) {
            samples.extend(self.get_many_uncounted(chunk)?.into_iter().flatten());
        }
        // An explicit training ends any sampling of first objects.
        *self.trainer.lock().unwrap_or_else(|p| p.into_inner()) = Trainer::Off;
        let id = self.train_and_send(&samples)?;
        self.flush()?;
        Ok(id)
    }

    /// The dictionary a new object is compressed with. While the codec wants one and none
    /// exists, the object joins the training sample (and is gzipped).
    pub(super) fn dictionary_for(&self, object: &[u8]) -> Option<Arc<Dictionary>> {
        if !self.saving.codec.trains_dictionary() {
            return None;
        }
        let current = self.dicts.current();
        if current.is_none() {
            self.sample(object);
        }
        current
    }

    /// Adds `object` to the training sample; the call that fills the sample trains the
    /// dictionary (a few hundred milliseconds, notes/design.md) while other threads keep
    /// saving with gzip.
    fn sample(&self, object: &[u8]) {
        let mut trainer = self.trainer.lock().unwrap_or_else(|p| p.into_inner());
        let Trainer::Sampling { samples, bytes } = &mut *trainer else { return };
        samples.push(object.to_vec());
        *bytes += object.len();
        if *bytes < self.saving.sample_bytes {
            return;
        }
        let samples = std::mem::take(samples);
        *trainer = Trainer::Off;
        drop(trainer);
        // Another handle, perhaps in another process, may have trained one since this one
        // opened: it is committed already, so rows compressed with it can be stored at once,
        // and every handle then shares one dictionary.
        match self.dicts.newest_stored() {
            Ok(Some(dict)) => {
                self.dicts.add(dict);
                return;
            }
            Ok(None) => {}
            Err(e) => log::warn!("objstash: looking for a stored dictionary failed ({e})"),
        }
        let trained = self.train_and_send(&samples);
        if let Err(e) = trained {
            log::warn!("objstash: no dictionary ({e}); objects stay gzipped");
        }
    }

    /// Trains a dictionary on `samples`, queues it for the writer, then makes it current: a
    /// row compressed with it can only be queued after the dictionary itself.
    fn train_and_send(&self, samples: &[Vec<u8>]) -> Result<u32> {
        let dict = Arc::new(Dictionary::train(samples).map_err(Error::training)?);
        if let Some(known) = self.dicts.get(dict.id) {
            if known.bytes != dict.bytes {
                return Err(Error::training(format!(
                    "the new dictionary's id {} is already taken; train again on another sample",
                    dict.id
                )));
            }
            // The same sample trained the same dictionary: it is stored already.
            self.dicts.add(known);
            return Ok(dict.id);
        }
        let op = ops::Dictionary { dict: Arc::clone(&dict), samples: samples.len() };
        self.send(Message::Op(unasked(op)))?;
        let id = dict.id;
        self.dicts.add(dict);
        Ok(id)
    }
}
