//! The configurable way to open a stash: settings, each with its default, ended by `open`.
//!
//! The builder only gathers settings; `sequence.rs` validates them and runs the open sequence.

use std::path::Path;
use std::time::Duration;

use crate::cache::evict;
use crate::cache::uses;
use crate::codec;
use crate::codec::Codec;
use crate::codec::zstd_dict;
use crate::db::readers::ReadMap;
use crate::error::Result;
use crate::open::sequence::{self, Options};
use crate::settings::durability::Durability;
use crate::settings::layout::Layout;
use crate::settings::values::Values;
use crate::stash::Stash;

/// Default gzip level; see notes/design.md.
const DEFAULT_LEVEL: u32 = codec::DEFAULT_LEVEL;
/// Default rows per writer transaction; see notes/design.md.
const DEFAULT_BATCH: usize = 100_000;
/// Default keys a table's young index holds before they are moved into the old one; see
/// notes/experiments.md.
const DEFAULT_YOUNG_KEYS: usize = 1_000_000;
/// Default capacity of the channel to the writer, in objects.
const DEFAULT_CAPACITY: usize = 4_096;
/// Default longest wait for another handle's lock; see `busy_timeout`.
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default largest object: none (see `max_object_size`).
const DEFAULT_MAX_OBJECT: u64 = u64::MAX;

/// Settings for opening a stash. Made by [`Stash::builder`], ended by [`StashBuilder::open`].
#[derive(Clone, Debug)]
#[must_use]
pub struct StashBuilder {
    options: Options,
}

impl Default for StashBuilder {
    fn default() -> Self {
        StashBuilder {
            options: Options {
                layout: None,
                values: Values::default(),
                durability: None,
                codec: None,
                reconfigure: false,
                create: true,
                max_object: DEFAULT_MAX_OBJECT,
                level: DEFAULT_LEVEL,
                sample_bytes: zstd_dict::SAMPLE_BYTES,
                batch_size: DEFAULT_BATCH,
                young_keys: DEFAULT_YOUNG_KEYS,
                channel_capacity: DEFAULT_CAPACITY,
                threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
                read_map: ReadMap::SmallFile,
                read_snapshot: crate::db::readers::DEFAULT_READ_SNAPSHOT,
                busy_timeout: DEFAULT_BUSY_TIMEOUT,
                read_only: false,
                max_size: None,
                grace: evict::DEFAULT_GRACE,
                use_resolution: uses::DEFAULT_RESOLUTION,
                #[cfg(feature = "remote")]
                remote: None,
            },
        }
    }
}

impl Stash {
    /// Opens the stash at `path` with default settings, creating it if needed. An
    /// existing stash runs with the layout, durability and codec it records.
    ///
    /// # Errors
    /// As [`StashBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Stash> {
        StashBuilder::default().open(path)
    }

    /// Settings for opening a stash.
    pub fn builder() -> StashBuilder {
        StashBuilder::default()
    }
}

impl StashBuilder {
    /// The table layout of a new stash. An existing stash keeps the layout it was created
    /// with; asking for another one is [`Error::LayoutMismatch`](crate::Error).
    ///
    /// Default: the recorded layout for an existing stash, [`Layout::Single`] for a new one.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.options.layout = Some(layout);
        self
    }

    /// Where a new stash keeps its objects' stored bytes: in their rows (the default) or in
    /// a file beside the database ([`Values::InFile`]). An existing stash keeps where it
    /// was made to keep them, whatever is asked here.
    pub fn values(mut self, values: Values) -> Self {
        self.options.values = values;
        self
    }

    /// What acknowledged writes survive. Recorded in a new stash; an existing stash keeps
    /// the durability it records, and asking for another one is
    /// [`Error::SettingMismatch`](crate::Error) unless [`StashBuilder::reconfigure`] is set.
    ///
    /// Default: the recorded durability for an existing stash, [`Durability::Fast`] for a
    /// new one (and for a stash made before durability was recorded).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.options.durability = Some(durability);
        self
    }

    /// How new objects are compressed: [`Codec::Gzip`] or [`Codec::ZstdDict`]. Recorded
    /// like the durability, with the same rule for an existing stash. Every stash reads
    /// rows of either codec, so changing it (with [`StashBuilder::reconfigure`]) leaves the
    /// rows already stored readable.
    ///
    /// Default: the recorded codec for an existing stash, [`Codec::Gzip`] for a new one.
    pub fn codec(mut self, codec: Codec) -> Self {
        self.options.codec = Some(codec);
        self
    }

    /// Lets this open change the durability and codec an existing stash records to the
    /// ones set on this builder: a deliberate change, where a mere difference is an error.
    ///
    /// Default: off.
    pub fn reconfigure(mut self, reconfigure: bool) -> Self {
        self.options.reconfigure = reconfigure;
        self
    }

    /// Whether `open` may create a stash (and its directory) where there is none. Off, an
    /// open of a path without a stash is [`Error::NotFound`](crate::Error) and creates
    /// nothing: what a program that only reads wants.
    ///
    /// Default: on.
    pub fn create(mut self, create: bool) -> Self {
        self.options.create = create;
        self
    }

    /// The largest object `save` accepts, in bytes; a larger one is refused with
    /// [`Error::TooLarge`](crate::Error) before anything of its call is stored (a
    /// streamed save, [`Stash::save_reader`](crate::Stash::save_reader), once it has read
    /// that much, keeping nothing of it). Objects of more than 8 MiB are stored in chunks,
    /// so no size is too large for the stash; this is a limit of the caller's choosing.
    ///
    /// Default: none.
    pub fn max_object_size(mut self, bytes: u64) -> Self {
        self.options.max_object = bytes;
        self
    }

    /// With [`Codec::ZstdDict`] and no dictionary yet: how many bytes of the first objects
    /// saved are sampled to train one (they are gzipped meanwhile). The save call that
    /// fills the sample trains the dictionary on its own thread while other threads keep
    /// saving. Ignored once a dictionary exists; call
    /// [`Stash::train`](crate::Stash::train) to retrain.
    ///
    /// Default: 4 MiB (notes/design.md).
    pub fn dictionary_sample(mut self, bytes: usize) -> Self {
        self.options.sample_bytes = bytes;
        self
    }

    /// The gzip level of new objects, 0 (store) to 9 (smallest). Objects already stored keep
    /// theirs; every level reads back the same.
    ///
    /// Default: 1 with libdeflate (the default build), 2 with zlib-rs or miniz_oxide: the
    /// fastest level within 3% of the best ratio of levels 1 to 6 (notes/design.md).
    pub fn compression_level(mut self, level: u32) -> Self {
        self.options.level = level;
        self
    }

    /// The most objects the writer commits in one transaction.
    ///
    /// Default: 100,000 (a batch also ends at 16 MiB of compressed rows).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.options.batch_size = batch_size;
        self
    }

    /// How many keys the young key index of a stash holds (spread over its tables) before
    /// the writer moves them into the old index, a slice of the key space per transaction
    /// between batches. A larger young index means fewer moves and more of each batch's
    /// index pages out of the cache. Stashes made before format 5 have one key index and
    /// ignore it.
    ///
    /// Default: 1,000,000.
    pub fn young_keys(mut self, keys: usize) -> Self {
        self.options.young_keys = keys;
        self
    }

    /// How many objects may wait for the writer before savers block: this bounds memory
    /// when producers outrun the disk.
    ///
    /// Default: 4,096.
    pub fn channel_capacity(mut self, capacity: usize) -> Self {
        self.options.channel_capacity = capacity;
        self
    }

    /// Threads that hash and compress for [`Stash::save_all`] and decompress for
    /// [`Stash::get_many`] and [`Stash::verify`].
    ///
    /// Default: the number of CPUs.
    pub fn threads(mut self, threads: usize) -> Self {
        self.options.threads = threads;
        self
    }

    /// Lets each read connection map up to `bytes` of the database file into memory
    /// (SQLite's `mmap_size`) instead of copying pages into its own cache: a read then finds
    /// its pages where the OS page cache holds them, with no system call and no copy. The
    /// mapped pages are the OS page cache's own and the kernel drops them under memory
    /// pressure, but every page a read touches counts towards the process's resident memory
    /// (`RssFile`), with the pages around it that the kernel maps at each fault (64 KiB),
    /// up to `bytes` per read connection. SQLite drops the whole map at every commit it has
    /// not yet seen (saves, and the uses of objects recorded every half second), and maps at
    /// most the first 2 GiB of the file; pages beyond are read as without a map.
    ///
    /// Default: a map of 64 MiB (python-diskcache's) for a connection opened while the
    /// file fits in it, none for one opened on a larger file; a mapped connection is
    /// replaced by one without a map once the file outgrows it. A small stash is read whole
    /// and often, and the map pays there (`get` 1.17x-1.43x on 100,000 Speckle objects,
    /// 45 MB); a map of the first part of a large file serves only the reads that land
    /// there, and took the million example's peak memory from 115 to 216 MiB. A stash
    /// whose values are in a file of their own ([`Values::InFile`]) maps its database whole
    /// by default (up to 2 GiB, about 18 million rows of about 116 bytes): the values are
    /// read from their file, and the map holds only keys and places. `bytes` maps that much
    /// whatever the file's size; 0 never maps.
    pub fn read_mmap_size(mut self, bytes: u64) -> Self {
        self.options.read_map = ReadMap::Bytes(bytes);
        self
    }

    /// How long a read connection may keep its snapshot (an open read transaction) between
    /// reads of one key ([`Stash::get`], [`Stash::contains`]), instead of beginning one for
    /// each: a `get` loop runs faster without SQLite's two file-lock system calls per read
    /// (figures in notes/experiments.md). What a read can miss is bounded: this handle's own
    /// saves and removes are always seen; an object another handle or process committed
    /// before the read began is found (a read that finds nothing in a kept snapshot reads
    /// again in a new one); only an object another handle removed can still be read for up
    /// to this long. An idle connection gives its snapshot up after this long, so that it
    /// never holds back the write-ahead log's checkpoints for longer.
    /// `Duration::ZERO` begins a read transaction for every read. A stash in
    /// [`Durability::Owned`](crate::Durability::Owned) keeps none (a reader's lock would hold
    /// its writer back).
    ///
    /// Default: 20 milliseconds.
    pub fn read_snapshot(mut self, longest: Duration) -> Self {
        self.options.read_snapshot = longest;
        self
    }

    /// The longest this handle waits for another handle (in this or another process) that
    /// holds the stash's write lock, or is opening or closing it. Waits are never errors
    /// below it; past it, the call that waited gets [`Error::Busy`](crate::Error) and
    /// nothing is lost: saves stay queued (and readable) and are written once the other
    /// handle lets go. Reads never wait for writers.
    ///
    /// Default: 30 seconds.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.options.busy_timeout = timeout;
        self
    }

    /// Opens an existing stash for reading only: no writer thread, no recovery, and
    /// `save` and `remove` answer [`Error::ReadOnly`](crate::Error). A stash whose file or
    /// directory cannot be written opens this way without being asked.
    ///
    /// Default: off.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.options.read_only = read_only;
        self
    }

    /// A size cap, recorded in the stash (it stays until changed with
    /// [`Stash::set_max_size`]): the database files (the main file and its write-ahead
    /// log, what `ls -l` and `du` show) are kept at or under `bytes` by evicting the least
    /// recently used unpinned objects, and freed pages are given back to the file system.
    /// Between two checks the files can go over by about one batch of saves (a
    /// sixty-fourth of the cap, at most 16 MiB); objects used in the last few seconds
    /// (see [`StashBuilder::eviction_grace`]) and pinned ones are never evicted, so those
    /// alone can keep a stash over its cap. How it works: notes/bounded-cache.md. The first cap
    /// of a stash that has never evicted indexes its objects' uses at open, once (one pass
    /// over the stash: 0.4 s for a million objects in memory, from disk as long as reading
    /// the file).
    ///
    /// Default: the cap the stash records; none for a new stash.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.options.max_size = Some(bytes);
        self
    }

    /// How long after its last save or read an object is safe from eviction, so that a
    /// caller's `save` then `get` never races one. What a save call saves is never evicted
    /// while the call is under way, whatever the grace period. A read within the resolution
    /// of uses ([`StashBuilder::use_resolution`]) records nothing, so it protects the object
    /// only as far as its recorded use does. Across processes a read counts once its
    /// process's writer has recorded it (within half a second). Each second of grace lets a
    /// burst of saves take a capped stash over its cap by what it saves in a second.
    ///
    /// Default: 100 milliseconds.
    pub fn eviction_grace(mut self, grace: Duration) -> Self {
        self.options.grace = grace;
        self
    }

    /// How precisely the last use of each object is kept: a read of an object whose
    /// recorded last use (its save, or an earlier read) is less than this old writes
    /// nothing, so reading back what was just saved, or an object read again within the
    /// period, costs the writer no work. The order in which eviction takes the least
    /// recently used objects is exact to within this. `Duration::ZERO` records every read
    /// (the writer still writes an object's latest use once per batch, however often it
    /// was read).
    ///
    /// Default: 5 seconds.
    pub fn use_resolution(mut self, resolution: Duration) -> Self {
        self.options.use_resolution = resolution;
        self
    }

    /// A shared remote tier on an S3-compatible store (feature `remote`): reads of objects
    /// the stash lacks fetch them from the remote, and [`Stash::push`] uploads.
    #[cfg(feature = "remote")]
    pub fn remote(mut self, remote: crate::remote::RemoteConfig) -> Self {
        self.options.remote = Some(remote);
        self
    }

    /// Opens the stash at `path`, creating it (and its directory) if it does not exist
    /// and [`StashBuilder::create`] allows.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error) for a setting out of range;
    /// [`Error::InvalidPath`](crate::Error) for a directory; `NotFound` when there is no
    /// stash and creating is off; `NotADatabase`, `ForeignDatabase`, `UnsupportedFormat`,
    /// `LayoutMismatch` or `SettingMismatch` for a file that is not a stash this handle
    /// can open (the file is left untouched); `JournalUnsupported` when the file system
    /// cannot give the durability its journal; `Busy` when another handle's open or close
    /// took longer than the busy timeout;
    /// `Io` or `Database` when the file cannot be created or read.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Stash> {
        sequence::open(&self.options, path.as_ref())
    }
}
