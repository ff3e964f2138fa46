//! How the classes call the library: with the GIL released, and, for long calls,
//! answering Ctrl-C. Batch calls work in chunks and check for signals between them (what
//! earlier chunks saved is kept); calls that wait (`flush`, `verify`, trims) run on a
//! helper thread while the calling thread checks for signals, and an interrupted wait
//! leaves its call to finish in the background.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::errors;
use crate::handle::Handle;

/// Objects (or keys, or names) a batch call hands the library at once, at most.
const CHUNK_ITEMS: usize = 8_192;
/// Bytes of objects a saving call hands the library at once, at most: about 50 ms of
/// work here, so Ctrl-C is answered within ~100 ms.
const CHUNK_BYTES: usize = 4 << 20;
/// How often a thread waiting for a long call checks for signals.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

impl Handle {
    /// Runs `f` on the stash with the GIL released.
    pub fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&objstash::Stash) -> objstash::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.run(f)).map_err(errors::call_to_py)
    }

    /// Runs `f` on a helper thread and waits for it, checking for signals: Ctrl-C raises
    /// `KeyboardInterrupt` at once, and the call finishes in the background.
    pub fn waiting<T: Send + 'static>(
        self: &Arc<Self>,
        py: Python<'_>,
        f: impl FnOnce(&objstash::Stash) -> objstash::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        let handle = Arc::clone(self);
        let (tx, rx) = crossbeam_channel::bounded(1);
        crate::signals::blocked(|| {
            std::thread::Builder::new().name("objstash-call".to_string()).spawn(move || {
                let _ = tx.send(handle.run(f));
            })
        })
        .map_err(|e| PyRuntimeError::new_err(format!("starting a thread: {e}")))?;
        loop {
            match py.detach(|| rx.recv_timeout(SIGNAL_CHECK)) {
                Ok(done) => return done.map_err(errors::call_to_py),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err("the objstash call panicked"));
                }
            }
        }
    }

    /// Runs `f` on each chunk of `items` (cut by [`CHUNK_ITEMS`] and by `size`), checking
    /// for signals between chunks; the answers in input order.
    pub fn chunked<'a, I: Sync, T: Send>(
        &self,
        py: Python<'_>,
        items: &'a [I],
        size: impl Fn(&I) -> usize,
        f: impl Fn(&objstash::Stash, &'a [I]) -> objstash::Result<Vec<T>> + Sync,
    ) -> PyResult<Vec<T>> {
        let mut answers = Vec::with_capacity(items.len());
        let mut rest = items;
        while !rest.is_empty() {
            let (mut end, mut bytes) = (0, 0);
            while end < rest.len() && end < CHUNK_ITEMS && (end == 0 || bytes < CHUNK_BYTES) {
                bytes += size(&rest[end]);
                end += 1;
            }
            let (chunk, later) = rest.split_at(end);
            answers.extend(self.with(py, |s| f(s, chunk))?);
            rest = later;
            if !rest.is_empty() {
                py.check_signals()?;
            }
        }
        Ok(answers)
    }

    /// Refuses, before anything is saved, an object over the stash's limit: a call saves
    /// in chunks, and none of it may be stored when one object is refused.
    pub fn check_sizes(&self, py: Python<'_>, objects: &[Cow<'_, [u8]>]) -> PyResult<()> {
        let limit = self.with(py, |s| Ok(s.max_object_size()))?;
        match objects.iter().map(|o| o.len() as u64).find(|&size| size > limit) {
            Some(size) => Err(errors::raise(
                py,
                "TooLargeError",
                format!(
                    "an object of {size} bytes is larger than this stash's limit of {limit} \
                     bytes; nothing of the call was stored: split it, or open the stash with \
                     a larger max_object_size="
                ),
            )),
            None => Ok(()),
        }
    }
}
