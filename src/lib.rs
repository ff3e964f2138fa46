//! objstash: a content-addressed object cache in one SQLite file.
//!
//! Applications that move large graphs of small objects (CAD/BIM models of millions of
//! JSON objects, build artefacts, documents) keep a local cache of them. objstash stores
//! each object under the blake3 hash of its bytes, compressed (gzip by default), and checks
//! the hash on every read: a damaged row is reported as [`Error::Corrupt`], never returned.
//!
//! # Quick start
//! ```
//! # fn main() -> objstash::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! use objstash::{Key, Stash};
//!
//! let stash = Stash::open(dir.path().join("cache.db"))?;
//! let key = stash.save(br#"{"speckle_type":"Objects.Geometry.Point","x":1.5}"#)?;
//! assert_eq!(key, Key::of(br#"{"speckle_type":"Objects.Geometry.Point","x":1.5}"#));
//!
//! let keys = stash.save_all(&[&b"a"[..], b"b", b"c"])?; // parallel, keys in input order
//! assert_eq!(stash.get(&key)?.as_deref(), Some(&br#"{"speckle_type":"Objects.Geometry.Point","x":1.5}"#[..]));
//! assert_eq!(stash.missing(&[keys[0], Key::of(b"d")])?, vec![Key::of(b"d")]);
//!
//! stash.flush()?; // everything saved so far is committed
//! println!("{}", stash.stats()?); // the size report
//! stash.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//! - [`Stash::save`], [`Stash::save_all`] (hash and compress in parallel), [`Stash::get`],
//!   [`Stash::get_many`], [`Stash::contains`], [`Stash::missing`], [`Stash::remove`],
//!   [`Stash::flush`], [`Stash::len`], [`Stash::stats`], [`Stash::verify`].
//! - Saving an object already stored costs a hash and an index lookup, no compression and
//!   no write.
//! - Reads see writes at once, from any thread, before the writer commits them.
//! - One writer thread batches rows into transactions; the channel to it is bounded, so
//!   memory stays flat however fast objects arrive.
//! - [`Layout::Single`] (one table) or [`Layout::Bucketed`] (256 tables by first key byte).
//! - [`Codec::Gzip`] (default: every row a standard gzip member) or [`Codec::ZstdDict`]
//!   (zstd with a dictionary trained on the stash's first objects, [`Stash::train`] to
//!   retrain): for small objects about 1.7x smaller than gzip, near the size of gzipping
//!   everything as one stream, and faster. Either setting reads rows of both.
//!
//! # Durability
//! - [`Durability::Fast`] (default): SQLite `journal_mode=MEMORY`, `synchronous=OFF`.
//!   Nothing is synced to disk; a process crash loses writes not yet committed and, if it
//!   hits a commit, can damage the file. The next open notices the unclean shutdown, runs
//!   SQLite's integrity check and, if the file is damaged, rebuilds it from every object
//!   that still verifies, keeping the damaged file aside; [`Stash::recovery`] says what
//!   was kept and lost. A power loss or OS crash can lose anything written since the OS
//!   last wrote its cache back, and is recovered the same way. Wrong bytes are never
//!   served in any case: every read checks the hash.
//! - [`Durability::Safe`]: `journal_mode=WAL`, `synchronous=FULL`. Every object saved
//!   before a [`Stash::flush`] that returned `Ok` survives a process kill or power loss.
//!
//! # What it is not
//! Not a database of mutable records (an object's key is its content), not a network
//! cache, and not shared between processes for writing: one handle per file, shared by
//! reference between threads; a second handle gets [`Error::Locked`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builder;
mod codec;
mod dict;
mod durability;
mod entries;
mod error;
mod key;
mod layout;
mod lock;
mod pagescan;
mod pending;
mod readers;
mod recovery;
mod schema;
mod stash;
mod stats;
mod writer;

pub use crate::builder::StashBuilder;
pub use crate::dict::Codec;
pub use crate::durability::Durability;
pub use crate::entries::{Entries, Entry};
pub use crate::error::{Error, Result};
pub use crate::key::{Key, ParseKeyError};
pub use crate::layout::Layout;
pub use crate::recovery::{RecoveryReport, repair};
pub use crate::stash::Stash;
pub use crate::stats::{Stats, VerifyReport, human};

/// The codec the stash uses, for benchmarks that measure it as a baseline beside the
/// store. Not part of the stable API.
#[doc(hidden)]
pub mod bench {
    pub use crate::codec::{compress, decompress};

    /// A zstd dictionary trained on samples, to size and time the `ZstdDict` codec
    /// outside a stash (the size reports of the examples).
    pub struct ZstdDict(crate::dict::Dictionary);

    impl ZstdDict {
        /// Trains a dictionary as a stash does on its first objects.
        ///
        /// # Errors
        /// When the samples are too few or zstd's trainer fails.
        pub fn train<S: AsRef<[u8]>>(samples: &[S]) -> Result<Self, String> {
            crate::dict::Dictionary::train(samples).map(ZstdDict)
        }

        /// The stored form of `raw`, as a stash with this dictionary writes it.
        #[must_use]
        pub fn compress(&self, raw: &[u8]) -> Vec<u8> {
            self.0.compress(raw)
        }

        /// The dictionary's size in bytes.
        #[must_use]
        pub fn len(&self) -> usize {
            self.0.bytes.len()
        }

        /// Whether the dictionary is empty (never, for a trained one).
        #[must_use]
        pub fn is_empty(&self) -> bool {
            self.0.bytes.is_empty()
        }
    }

    /// The most rows the writer puts in one fast-mode transaction so that the key-index
    /// pages they are expected to change fit its in-memory journal budget.
    #[must_use]
    pub fn journal_bounded_rows(batch_size: usize, objects: u64, page_size: u64) -> usize {
        crate::writer::journal_bounded_rows(batch_size, objects, page_size)
    }

    /// Bytes of objects a stash samples to train its dictionary, by default.
    pub const DICTIONARY_SAMPLE_BYTES: usize = crate::dict::SAMPLE_BYTES;
}
