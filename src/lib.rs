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
//!   [`Stash::remove_all`], [`Stash::flush`], [`Stash::len`], [`Stash::stats`],
//!   [`Stash::verify`], [`repair`], [`rescue`].
//! - Names: [`Stash::save_named`] also records each object under a name of the caller's
//!   own (a Speckle id, a path; up to [`MAX_NAME_LEN`] bytes), read back with
//!   [`Stash::get_named`], [`Stash::resolve`], [`Stash::missing_named`] and dropped with
//!   [`Stash::remove_named`]. A name is committed with or after its object, never before.
//! - A bounded cache: a size cap recorded in the stash ([`StashBuilder::max_size`],
//!   [`Stash::set_max_size`]) keeps the database files within it by evicting the least
//!   recently used objects (used: saved or read); [`Stash::evict_unused_since`] and
//!   [`Stash::trim_to`] evict on demand; [`Stash::pin`] and [`Stash::save_pinned`] keep
//!   objects that must never go; freed space is given back to the file system. What a
//!   save call under way has saved, and objects used in the last moment
//!   ([`StashBuilder::eviction_grace`]), are never evicted; a read within seconds of an
//!   object's last use records none ([`StashBuilder::use_resolution`]).
//! - Counters ([`Stash::counters`], [`Stash::handle_counters`], [`Stash::reset_counters`]):
//!   hits and misses of reads, lookups, saves of new and of stored objects, reads through
//!   the remote, evictions; every process's calls, kept in the stash. Spans of saves,
//!   commits, checkpoints, evictions, model declarations, remote requests and repairs go to
//!   a `tracing` subscriber if one is installed. [`Stash::named_objects`] lists every named
//!   object at once, in file order.
//! - An async handle (feature `async`, on by default, no dependencies): [`AsyncStash`]
//!   offers the calls as futures that run on threads of the handle's own, for tokio or any
//!   other executor; a future dropped before its answer cancels nothing.
//! - A shared remote tier (feature `remote`): `StashBuilder::remote` with a
//!   `RemoteConfig` (an S3-compatible bucket and prefix); `Stash::remote` gives its
//!   calls: `push` uploads what the remote lacks in packs, `pull`, `missing`, `refresh`,
//!   and `flush` waits for the write-behind uploads. `get` and `get_many` of keys the stash
//!   lacks read them through (checked, then stored). Without the feature there is no async
//!   runtime.
//! - Saving an object already stored costs a hash and an index lookup, no compression and
//!   no write.
//! - Once `save` returns, every read from any thread sees the object, before the writer
//!   commits it.
//! - A stash records its layout, durability and codec; an open without settings uses
//!   them, and changing one is a deliberate [`StashBuilder::reconfigure`].
//! - One writer thread batches rows into transactions; the channel to it is bounded, so
//!   memory stays flat however fast objects arrive.
//! - [`Layout::Single`] (one table) or [`Layout::Bucketed`] (256 tables by first key byte).
//! - [`Codec::Gzip`] (default: every row a standard gzip member) or [`Codec::ZstdDict`]
//!   (zstd with a dictionary trained on the stash's first objects, [`Stash::train`] to
//!   retrain): for small objects about 1.7x smaller than gzip, near the size of gzipping
//!   everything as one stream, and faster. Either setting reads rows of both.
//!
//! # Durability
//! Three modes, recorded in the stash ([`Durability`]); none ever serves wrong bytes, since
//! every read checks the hash.
//! - [`Durability::Fast`] (default): a write-ahead log (`journal_mode=WAL`) without syncs
//!   (`synchronous=OFF`). A killed process never damages the file and loses only what it
//!   had not committed; a power loss or OS crash can lose anything the OS had not written
//!   back and can damage the file. The next open after such a stop runs SQLite's
//!   integrity check and, if the file is damaged, rebuilds it from every object that still
//!   verifies; [`Stash::recovery`] says what was kept and lost.
//! - [`Durability::Safe`]: the log, synced (`synchronous=FULL`). Every object saved before
//!   a [`Stash::flush`] that returned `Ok` survives a process kill or a power loss.
//! - [`Durability::Owned`]: an in-memory rollback journal (`journal_mode=MEMORY`,
//!   `synchronous=OFF`), for one handle that owns the stash (every other open is
//!   [`Error::Owned`] until it closes). No log: a kill can tear the commit under way, and
//!   the next open checks the file, rebuilds it and reports every loss.
//!
//! # Many handles, many processes
//! Any number of handles, in this process or others, may have a stash open at once; each
//! saves, reads and removes. Their writers take turns (SQLite's write lock); reads never
//! wait for a writer. A wait for another handle's lock is bounded by
//! [`StashBuilder::busy_timeout`]: past it the call that waited gets [`Error::Busy`] and
//! nothing is lost. Once one process's `flush` returns, every other process's next read
//! sees its objects. A stash whose file or directory cannot be written opens read-only.
//!
//! # What it is not
//! Not a database of mutable records (an object's key is its content), and not a network
//! server: machines share objects through an object store they all reach (`remote`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The tree, from the top floor down: each folder a subsystem, each file one concept in it;
// a module imports only modules below it.
//
// What a user holds and opens.
#[cfg(feature = "async")]
mod nonblocking; // the async handle: calls as futures on threads of its own (feature `async`)
mod open; // builder, the open sequence, the header, repair
#[cfg(feature = "remote")]
mod remote; // the shared remote tier: packs on an S3-compatible store (feature `remote`)
mod stash; // the handle: saving, reading, names, bounds, large objects, remote calls

// The machinery below the handle.
mod cache; // uses, pins and eviction within a size cap; what a handle counts
mod check; // verify, salvage, the page scanner, mending a damaged header
mod codec; // gzip and zstd with dictionaries, the stash's gzip code, inflate
mod db; // the database: format versions, tables, rows, indexes, names, readers
mod files; // the files of a stash and their locks
mod large; // large objects: chunks and manifests
mod report; // what reports say: sizes, hits and misses, verify's and recovery's
mod values; // the file of values beside the database
mod writer; // the one writer thread, its batches, transactions and upkeep

// The words at the bottom.
mod closure; // the ids a Speckle object lists as its model (its own "__closure")
mod error;
mod key;
mod parts;
mod settings; // layout, durability, values, codec: parsed and printed alike

// Feeding the writer directly, for its benchmark only (feature `writer-benchmark`).
#[cfg(feature = "writer-benchmark")]
pub mod writer_benchmark;

pub use crate::check::salvage::rescue;
pub use crate::closure::{CLOSURE_FIELD, closure_ids};
pub use crate::codec::Codec;
pub use crate::db::names::MAX_NAME_LEN;
pub use crate::error::{Error, Result};
pub use crate::files::stash_files;
pub use crate::key::{Key, ParseKeyError};
#[cfg(feature = "async")]
pub use crate::nonblocking::{AsyncObjectReader, AsyncStash, Call};
pub use crate::open::builder::StashBuilder;
pub use crate::open::repair::repair;
#[cfg(feature = "remote")]
pub use crate::remote::{
    CollectOptions, CollectReport, CompactReport, DEFAULT_PACK_SIZE, DamagedPack, LastCollection,
    PullReport, PushReport, RemoteConfig, RemoteStatus, TrimOptions, TrimReport,
};
pub use crate::report::counters::Counters;
pub use crate::report::model::Model;
pub use crate::report::recovery::{RecoveryReport, Trigger};
pub use crate::report::stats::{Evicted, Stats, VerifyReport};
pub use crate::settings::durability::Durability;
pub use crate::settings::layout::Layout;
pub use crate::settings::parse::ParseSettingError;
pub use crate::settings::values::Values;
#[cfg(feature = "remote")]
pub use crate::stash::RemoteTier;
pub use crate::stash::entries::{Entries, Entry};
pub use crate::stash::{Assembly, AssemblyId, ModelObjects, ModelReader, ObjectReader, Stash};
