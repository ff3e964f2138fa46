//! The stash's gzip code on a handle (`gzip_code.rs`): the stored one, read at open; else
//! trained once on the first objects this handle saves.
//!
//! Until a code exists, the first objects saved (up to [`SAMPLE_OBJECTS`] or
//! [`SAMPLE_BYTES`]) are sampled and gzipped as before, unless one `save_all` call brings
//! enough of them: its objects are sampled before any is compressed, and all get the code.
//! The save that fills the sample uses a code another handle stored meanwhile if there is
//! one, else trains one (a few milliseconds) and sends it to the writer, which stores it
//! unless one was stored first.
//! A code is used only at the default gzip level: another level asks for libdeflate's
//! codes of each object.

use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use crate::codec::gzip_code::{GzipCode, MAX_OBJECT, SAMPLE_BYTES, SAMPLE_OBJECTS};
use crate::writer::{self as ops, Message, unasked};

use super::{Saving, Stash};

/// A handle's gzip code, or the sample it will be trained on.
pub(super) struct GzipTraining {
    code: OnceLock<Arc<GzipCode>>,
    /// The sampled objects and their bytes; `None` once no sample is wanted.
    sample: Mutex<Option<(Vec<Vec<u8>>, usize)>>,
}

impl GzipTraining {
    /// The stash's stored code, or a sample to gather when this handle's saves want one.
    pub(super) fn open(conn: &Connection, saving: &Saving) -> Self {
        let code = OnceLock::new();
        let wanted = saving.codec.trains_gzip_code(saving.level);
        if wanted {
            match crate::db::meta::read_gzip_code(conn) {
                Ok(Some(stored)) => {
                    let _ = code.set(Arc::new(stored));
                }
                Ok(None) => {}
                Err(e) => log::warn!("objstash: reading the stash's gzip code failed ({e})"),
            }
        }
        let sample = (wanted && code.get().is_none()).then(|| (Vec::new(), 0));
        Self { code, sample: Mutex::new(sample) }
    }
}

impl Stash {
    /// The code `object` is gzipped with, if the stash has one; while it has none and
    /// wants one, the object joins the sample.
    pub(super) fn gzip_code_for(&self, object: &[u8]) -> Option<&GzipCode> {
        if let Some(code) = self.gzip_training.code.get() {
            return Some(code);
        }
        if object.len() <= MAX_OBJECT {
            self.sample_for_gzip_code(object);
        }
        None
    }

    /// Trains the code before a call's objects are compressed, when the objects of the call
    /// alone fill what the sample still lacks: then every row of the call has the code,
    /// its first ones too (a row of its own code inflates at about twice a trained row's
    /// cost, notes/experiments.md). A call too small for that leaves the sampling to
    /// [`Stash::gzip_code_for`], as the objects are compressed.
    pub(super) fn train_gzip_code_ahead<'a>(
        &self,
        objects: impl Iterator<Item = &'a [u8]> + Clone,
    ) {
        if self.gzip_training.code.get().is_some() {
            return;
        }
        let small = objects.filter(|object| object.len() <= MAX_OBJECT);
        {
            let slot = self.gzip_training.sample.lock().unwrap_or_else(|p| p.into_inner());
            let Some((samples, bytes)) = &*slot else { return };
            let (mut count, mut bytes) = (samples.len(), *bytes);
            let fills = small.clone().any(|object| {
                count += 1;
                bytes += object.len();
                count >= SAMPLE_OBJECTS || bytes >= SAMPLE_BYTES
            });
            if !fills {
                return;
            }
        }
        for object in small {
            if self.gzip_training.code.get().is_some() {
                break;
            }
            self.sample_for_gzip_code(object);
        }
    }

    /// Adds `object` to the sample; the call that fills it makes the code.
    fn sample_for_gzip_code(&self, object: &[u8]) {
        let mut slot = self.gzip_training.sample.lock().unwrap_or_else(|p| p.into_inner());
        let Some((samples, bytes)) = &mut *slot else { return };
        samples.push(object.to_vec());
        *bytes += object.len();
        if samples.len() < SAMPLE_OBJECTS && *bytes < SAMPLE_BYTES {
            return;
        }
        let samples = std::mem::take(samples);
        *slot = None;
        drop(slot);
        // Another handle, perhaps in another process, may have stored one since this one
        // opened: every handle then sends the same header.
        let stored =
            self.readers.checkout().and_then(|r| r.in_transaction(crate::db::meta::read_gzip_code));
        let code = match stored {
            Ok(Some(stored)) => Arc::new(stored),
            other => {
                if let Err(e) = other {
                    log::warn!("objstash: looking for a stored gzip code failed ({e})");
                }
                let Some(trained) = GzipCode::train(&samples) else { return };
                let trained = Arc::new(trained);
                let op = ops::GzipCode(Arc::clone(&trained));
                if let Err(e) = self.send(Message::Op(unasked(op))) {
                    log::warn!("objstash: storing the trained gzip code failed ({e})");
                }
                trained
            }
        };
        let _ = self.gzip_training.code.set(code);
    }
}
