//! An async handle (feature `async`): the calls an async application makes, as futures
//! that never block its executor's threads.
//!
//! Each call runs on threads of the handle's own (`call.rs`) and its answer comes back as a
//! [`Call`] future. No runtime is needed: it works under tokio, async-std, smol or a plain
//! `block_on`, and a tokio application need not wrap each call in `spawn_blocking`. Inputs
//! are owned (`Vec<u8>`, `Vec<Key>`), as a future may outlive the caller's borrows. A future
//! dropped before its answer does not cancel its call: a save whose future was dropped is
//! saved all the same, so nothing acknowledged, or under way, is lost. [`AsyncStash::close`]
//! commits every save acknowledged before it; a handle dropped without it closes once its
//! calls under way end, off the caller's thread.

mod call;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key::Key;
use crate::report::model::Model;
use crate::stash::{ModelObjects, ObjectReader, Stash};

pub use call::Call;
use call::Threads;

/// Threads a handle runs its calls on unless told otherwise: calls mostly wait (for the
/// writer, the disk), and the stash decodes and hashes on threads of its own.
const DEFAULT_THREADS: usize = 4;

/// A [`Stash`] whose calls are futures (feature `async`); see the module documentation.
/// Share it between tasks by reference or in an `Arc`; it is `Send + Sync`.
pub struct AsyncStash {
    stash: Arc<Stash>,
    threads: Threads,
}

impl std::fmt::Debug for AsyncStash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncStash").field("stash", &self.stash).finish_non_exhaustive()
    }
}

impl AsyncStash {
    /// An async handle over `stash`, running its calls on four threads of its own.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) if the threads cannot be started.
    pub fn new(stash: Stash) -> Result<AsyncStash> {
        AsyncStash::with_threads(stash, DEFAULT_THREADS)
    }

    /// As [`AsyncStash::new`], with `threads` threads (at least 1): how many calls run at
    /// once.
    ///
    /// # Errors
    /// As [`AsyncStash::new`].
    pub fn with_threads(stash: Stash, threads: usize) -> Result<AsyncStash> {
        Ok(AsyncStash { stash: Arc::new(stash), threads: Threads::new(threads.max(1))? })
    }

    /// The blocking handle underneath, for what is not offered here (call it off the
    /// executor's threads).
    pub fn blocking(&self) -> &Stash {
        &self.stash
    }

    fn call<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Stash) -> Result<T> + Send + 'static,
    ) -> Call<T> {
        let stash = Arc::clone(&self.stash);
        self.threads.call(move || work(&stash))
    }

    /// [`Stash::save`].
    pub fn save(&self, object: Vec<u8>) -> Call<Key> {
        self.call(move |s| s.save(&object))
    }

    /// [`Stash::save_all`].
    pub fn save_all(&self, objects: Vec<Vec<u8>>) -> Call<Vec<Key>> {
        self.call(move |s| s.save_all(&objects))
    }

    /// [`Stash::save_named`].
    pub fn save_named(&self, items: Vec<(String, Vec<u8>)>) -> Call<Vec<Key>> {
        self.call(move |s| s.save_named(&items))
    }

    /// [`Stash::get`].
    pub fn get(&self, key: Key) -> Call<Option<Vec<u8>>> {
        self.call(move |s| s.get(&key))
    }

    /// [`Stash::get_many`].
    pub fn get_many(&self, keys: Vec<Key>) -> Call<Vec<Option<Vec<u8>>>> {
        self.call(move |s| s.get_many(&keys))
    }

    /// [`Stash::get_named`].
    pub fn get_named(&self, names: Vec<String>) -> Call<Vec<Option<Vec<u8>>>> {
        self.call(move |s| s.get_named(&names))
    }

    /// [`Stash::missing`].
    pub fn missing(&self, keys: Vec<Key>) -> Call<Vec<Key>> {
        self.call(move |s| s.missing(&keys))
    }

    /// [`Stash::flush`].
    pub fn flush(&self) -> Call<()> {
        self.call(Stash::flush)
    }

    /// [`Stash::save_model`].
    pub fn save_model(&self, root: Vec<u8>, members: Vec<Vec<u8>>) -> Call<Model> {
        self.call(move |s| s.save_model(&root, &members))
    }

    /// [`Stash::read_model`].
    pub fn read_model(&self, root: Key) -> Call<Option<ModelObjects>> {
        self.call(move |s| s.read_model(&root))
    }

    /// [`Stash::open_reader`]: a large object read in pieces, each a call of its own.
    pub fn open_reader(&self, key: Key) -> Call<Option<AsyncObjectReader>> {
        let threads = self.threads.clone();
        self.call(move |s| {
            Ok(s.open_reader(&key)?
                .map(|reader| AsyncObjectReader { reader: Some(reader), threads }))
        })
    }

    /// Commits every save acknowledged so far ([`Stash::flush`]) and lets the stash close
    /// once the calls under way end (on the handle's threads).
    ///
    /// # Errors
    /// As [`Stash::flush`]: the writer's failure, if it stopped.
    pub fn close(self) -> Call<()> {
        self.call(Stash::flush)
    }
}

/// A large object read in pieces, each read a future ([`AsyncStash::open_reader`]).
pub struct AsyncObjectReader {
    reader: Option<ObjectReader>,
    threads: Threads,
}

impl std::fmt::Debug for AsyncObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncObjectReader").finish_non_exhaustive()
    }
}

impl AsyncObjectReader {
    /// The next piece of at most `max` bytes (at least 1), each checked as the blocking
    /// reader checks it; `None` at the end.
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) for a piece that does not hash to its key,
    /// [`Error::Io`](crate::Error::Io) if the read fails; the reader is spent after an error.
    pub async fn next_piece(&mut self, max: usize) -> Result<Option<Vec<u8>>> {
        let Some(mut reader) = self.reader.take() else { return Ok(None) };
        let (reader, piece) = self
            .threads
            .call(move || {
                use std::io::Read;
                let mut piece = vec![0u8; max.max(1)];
                let n = reader.read(&mut piece).map_err(read_error)?;
                piece.truncate(n);
                Ok((reader, piece))
            })
            .await?;
        if piece.is_empty() {
            return Ok(None);
        }
        self.reader = Some(reader);
        Ok(Some(piece))
    }
}

/// The library's error a reader's `io::Error` carries (a piece that does not verify), or
/// the I/O error itself.
fn read_error(e: std::io::Error) -> Error {
    if !e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
        return Error::io("reading a large object", e);
    }
    match e.into_inner().map(|inner| inner.downcast::<Error>()) {
        Some(Ok(inner)) => *inner,
        _ => Error::io("reading a large object", std::io::Error::other("the read failed")),
    }
}
