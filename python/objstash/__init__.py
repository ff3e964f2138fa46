"""objstash: a content-addressed object cache in one SQLite file.

Each object is stored under the blake3 hash of its bytes (its *key*, 64 hex digits),
compressed, and checked against that hash on every read: a damaged object raises
``CorruptError``, it is never returned. Objects can also be saved under names of your
own (Speckle ids, paths) and read back by them.

    from objstash import Stash

    with Stash("cache/objects.db") as stash:
        key = stash.save(b'{"x": 1}')
        keys = stash.save_all([b"a", b"b"])          # parallel, keys in order
        stash.save_named([("wall-17", b'{"wall": 17}')])
        assert stash.get(key) == b'{"x": 1}'
        assert stash.get_named("wall-17") == b'{"wall": 17}'
        todo = stash.missing(keys)                   # which still need fetching

Models. A model is a root object and the objects it lists (a Speckle commit and its
``__closure``): ``save_model``, ``declare_model`` or ``assemble`` (a copy whose root comes
last) make one, and from then on the stash keeps and evicts it whole, by its last use,
and reads its root as absent whenever one of its objects is not stored. ``models()``,
``model(root)``, ``pin_model``, ``remove_model`` and ``read_model`` (every object, in the
order the file holds them) see to them.

Calls that do work release the GIL; one ``Stash`` may be shared by threads, and several
processes may open the same file. ``objstash.speckle`` holds a transport for specklepy.

Processes. A handle crosses ``os.fork`` (multiprocessing's default on Linux, gunicorn and
Celery workers): before each fork every open handle commits what it saved and lets go of
the file, and its next call, in the parent or the child, opens it again with the same
settings. A fork waits for calls under way on other threads.

When a save is durable. ``save`` returns once the object is queued: every read in this
process sees it at once, and the writer commits it within about 20 ms of the last save
(at most 0.5 s while saves keep coming). ``flush()`` returns once everything saved before
is committed, and ``close()`` flushes. Saves are also committed when the process ends
short of a kill: at interpreter exit, at the end of a multiprocessing child, and on
SIGTERM (a pool's ``terminate``, which ``with Pool(...)`` calls) unless the program has
its own SIGTERM handler, in which case that handler decides (ending with ``sys.exit``
commits). ``os._exit`` and SIGKILL lose what was not yet committed: call ``flush()``
first. With ``durability="fast"`` committed means the objects survive the process; with
``"safe"`` they also survive a power loss. ``"owned"`` is for one process that owns the
stash (no other handle opens it meanwhile, ``LockedError``; a fork's child cannot use it
while the parent does): no write-ahead log, and a kill can tear a commit, which the next
open rebuilds, reporting what was lost.

Ctrl-C: long calls check for signals between chunks of work (about every 50 ms) and raise
``KeyboardInterrupt``; what earlier chunks saved is kept, and the stash stays sound.

A team's cache. ``Stash(path, remote="s3://bucket/prefix")`` (or ``remote=Remote(...)``
with an endpoint, credentials, write-behind) shares objects through an S3-compatible
bucket: ``push()`` uploads in packs what the remote lacks, ``pull()`` fetches what the
stash lacks, and ``get``/``get_many`` of a key the stash lacks read it through from the
remote, checked and kept locally. Credentials and the endpoint not given come from the
environment as for the AWS tools (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...).

    stash = Stash("cache.db", remote=Remote("s3://team-cache/models",
                                            endpoint="http://minio:9000", write_behind=1.0))
    stash.save_all(objects)      # uploaded in the background
    stash.flush_remote()         # returns once they are on the remote
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util
import os
import signal
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator

from objstash._objstash import MAX_NAME_LEN as MAX_NAME_LEN
from objstash._objstash import __version__ as __version__
from objstash._objstash import Assembly as Assembly
from objstash._objstash import ObjectReader as ObjectReader
from objstash._objstash import key_of as key_of
from objstash._objstash import _repair
from objstash._objstash import Stash as _Stash
from objstash._objstash import _after_fork_in_child, _after_fork_in_parent
from objstash._objstash import _before_fork, _close_all, _stop_tracing, _take_sigterm
from objstash._objstash import trace_to_logging
from objstash import errors as errors
from objstash.models import Model as Model
from objstash.errors import BadKeyError as BadKeyError
from objstash.errors import BadNameError as BadNameError
from objstash.errors import BusyError as BusyError
from objstash.errors import ClosedError as ClosedError
from objstash.errors import CorruptError as CorruptError
from objstash.errors import Error as Error
from objstash.errors import FileSystemError as FileSystemError
from objstash.errors import LockedError as LockedError
from objstash.errors import NotAStashError as NotAStashError
from objstash.errors import NotFoundError as NotFoundError
from objstash.errors import PermissionDeniedError as PermissionDeniedError
from objstash.errors import ReadOnlyError as ReadOnlyError
from objstash.errors import SettingsError as SettingsError
from objstash.errors import TooLargeError as TooLargeError
from objstash.errors import WriterStoppedError as WriterStoppedError
from objstash.errors import RemoteError as RemoteError
from objstash.errors import RemoteCorruptError as RemoteCorruptError


@dataclass(frozen=True)
class Counters:
    """What a stash served since counting began (``Stash.counters()``: every process's
    calls), or one handle since it opened (``Stash.handle_counters()``): is the cache
    helping? ``str(counters)`` is the table ``objstash stats`` prints."""

    since: float | None = None
    """Seconds since the epoch when counting began (the first count, or the last
    ``reset_counters()``); ``None`` for a stash that never counted."""
    hits: int = 0
    """Keys read (``get``, ``get_many``, ``get_named``, ``read_model``'s objects, readers)
    and served, from the stash or through its remote."""
    misses: int = 0
    """Keys read and found nowhere."""
    read_throughs: int = 0
    """Of the hits, keys read through the remote (then stored)."""
    read_through_bytes: int = 0
    found: int = 0
    """Keys asked by ``in``/``contains`` and ``missing`` that were stored."""
    absent: int = 0
    """Keys asked by ``in``/``contains`` and ``missing`` that were not."""
    saved: int = 0
    """Objects saved that were new."""
    saved_again: int = 0
    """Saves of objects already stored: deduplicated, nothing written."""
    evicted: int = 0
    """Objects evicted since counting began (the stash's; a handle counts none)."""
    evicted_bytes: int = 0

    text: str = field(default="", repr=False, compare=False)

    @property
    def hit_rate(self) -> float | None:
        """Hits over keys read; ``None`` before any read."""
        read = self.hits + self.misses
        return self.hits / read if read else None

    def __str__(self) -> str:
        return self.text or repr(self)


@dataclass(frozen=True)
class Stats:
    """Sizes of a stash: what the cache costs on disk."""

    objects: int
    raw_bytes: int
    stored_bytes: int
    file_bytes: int
    names: int
    layout: str
    durability: str
    codec: str
    dictionaries: int
    max_size: int | None = None
    over_cap: bool = False
    pinned_objects: int = 0
    pinned_bytes: int = 0
    evicted_objects: int = 0
    evicted_bytes: int = 0
    chunks: int = 0
    """Chunks of large objects (part of ``stored_bytes``: ``chunk_bytes``)."""
    chunk_bytes: int = 0
    oldest_use: float | None = None
    """Seconds since the epoch of the earliest last use of an unpinned object; ``None``
    until the stash has had a cap or evicted or removed anything (uses are indexed from
    then on)."""

    counters: Counters = field(default_factory=Counters)
    """What the stash served since counting began, as recorded: this handle's latest calls
    arrive with its next commit, within about a second (``Stash.counters()`` records them
    first)."""

    text: str = field(default="", repr=False, compare=False)
    """The size report as the command line's ``stats`` prints it (``str(stats)``)."""

    @property
    def compression_ratio(self) -> float:
        """Raw bytes over stored bytes; 1.0 for an empty stash."""
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 1.0

    def __str__(self) -> str:
        return self.text or repr(self)


@dataclass(frozen=True)
class VerifyReport:
    """What ``Stash.verify`` found; ``ok`` is True when nothing is wrong."""

    ok: bool
    checked: int
    names: int
    corrupt: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    unnamed: int = 0
    problems: list[str] = field(default_factory=list)
    text: str = ""

    def __str__(self) -> str:
        return self.text


class DataLossWarning(UserWarning):
    """Opening a stash rebuilt it and objects or names were lost (see
    ``Stash.recovery_report``): a cache refetches them; an application that kept anything
    only there learns of it here."""


@dataclass(frozen=True)
class RecoveryReport:
    """What a rebuild found and kept: after a crash or damage found at open
    (``Stash.recovery_report``), or by ``objstash.repair``."""

    trigger: str
    """"unclean-shutdown", "damage-found" or "repair"."""
    problem: str | None
    recovered: int
    """Objects kept."""
    dropped: int
    """Rows that did not verify."""
    claimed: int | None
    """Objects the stash recorded before, where it could still be read."""
    lost: int | None
    lost_anything: bool
    names_recovered: int
    lost_names: int | None
    damaged_copy: str | None
    """Where the damaged file was kept, when anything was lost."""
    text: str = ""

    def __str__(self) -> str:
        return self.text


def repair(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> RecoveryReport:
    """Checks the stash at ``path`` and, if anything is wrong, rebuilds it from every object
    that verifies; the damaged file is kept aside when anything was lost. Every handle
    must be closed (``LockedError`` otherwise). A stash whose header is damaged is repaired
    from its pages."""
    return RecoveryReport(**_repair(path))


_log = logging.getLogger("objstash")


@dataclass(frozen=True)
class Remote:
    """Where a stash's remote is, and how to use it (``Stash(..., remote=Remote(...))``).

    ``url`` is ``s3://bucket`` or ``s3://bucket/prefix``. Settings left as None take the
    defaults, or the environment as for the AWS tools (``AWS_ENDPOINT_URL``,
    ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``): ``endpoint`` the
    store's address (``http://127.0.0.1:9000``), ``pack_size`` target bytes of a pack
    (8 MiB), ``uploads`` in flight (4), ``refresh_interval`` seconds a key missing from
    the local copy of the remote's indexes is taken as missing (10), ``timeout`` of one
    request (30 s), ``retries`` (3), ``write_behind`` seconds between background uploads
    of what is saved (off), ``clock_skew`` seconds the machines' clocks may disagree
    (600). Durations are in seconds.
    """

    url: str
    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    pack_size: int | None = None
    uploads: int | None = None
    refresh_interval: float | None = None
    timeout: float | None = None
    retries: int | None = None
    write_behind: float | None = None
    clock_skew: float | None = None


@dataclass(frozen=True)
class PushReport:
    """What ``Stash.push`` did."""

    objects: int
    bytes: int
    packs: int
    already_remote: int
    corrupt: int
    """Local objects that failed their check and were not uploaded (run verify)."""
    requests: int
    text: str = ""
    names: int = 0
    """Names (ids) uploaded with the objects they name."""
    models: int = 0
    """Models uploaded (complete ones whose objects the remote holds): a trim there keeps
    or takes out each whole."""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class PullReport:
    """What ``Stash.pull`` did; ``complete`` is False if some objects could not be had."""

    objects: int
    bytes: int
    already_local: int
    damaged: list[tuple[str, int, str]]
    """(pack, objects, reason) of each pack whose objects failed their check."""
    unreachable: int
    """Packs that could not be read: pull again."""
    requests: int
    text: str = ""
    names: int = 0
    """Names of the remote saved here with their objects."""

    @property
    def complete(self) -> bool:
        return not self.damaged and self.unreachable == 0

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class RemoteStatus:
    """What the remote holds, as this machine's copy of its indexes knows after a refresh."""

    url: str
    packs: int
    objects: int
    bytes: int
    """Bytes of the packs' bodies: the remote's size."""
    local_index_bytes: int
    """Bytes of this machine's copy of the remote's indexes."""
    new_packs: int
    index_shards: int
    """Shards of the remote's compacted index this machine reads in parts (0: none)."""
    gone_packs: int
    """Packs this refresh found taken out of the listing (trimmed, collected, damaged)."""
    damaged_indexes: list[str]
    unreadable_indexes: int
    full_listing: bool
    """Whether the refresh listed the whole pack log (a new machine's first)."""
    listed: int
    requests: int
    text: str = ""
    last_collection: str | None = None
    """The record of the remote's last garbage collection, if one ran."""
    last_trim: str | None = None
    """The record of the remote's last trim, if one ran."""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class CollectReport:
    """What ``Stash.remote_gc`` did."""

    duplicates: int
    """Packs taken out of the listing because earlier packs hold all their objects."""
    deleted: int
    """Bodies of packs out of the listing deleted once their grace period was over."""
    waiting: int
    """Bodies of packs out of the listing kept until their grace period is over."""
    orphans: int
    """Bodies of killed pushes deleted."""
    bytes_freed: int
    events_removed: int
    left_unread: int
    """Indexes the remote did not serve: their packs were left as they were (collect again)."""
    requests: int
    text: str = ""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class CompactReport:
    """What ``Stash.remote_compact`` did."""

    generation: str
    packs: int
    entries: int
    shards: int
    bytes: int
    """Bytes of the shard files written."""
    requests: int
    ms: int
    text: str = ""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class TrimReport:
    """What ``Stash.remote_trim`` did."""

    size_before: int
    size_after: int
    """Bytes of the packs listed after the trim."""
    unused: int
    """Packs taken out: none of their objects was used within the age."""
    repacked: int
    """Packs taken out after their objects still in use went into new packs."""
    objects_moved: int
    new_packs: int
    over_size: int
    """Packs taken out, least recently used first, to fit the size."""
    brought_back: int
    reports: int
    left_unread: int
    """Packs left as they were: the remote did not serve them (trim again)."""
    bytes_freed: int
    """Bytes of bodies deleted (of packs out of the listing for the grace period)."""
    requests: int
    text: str = ""

    def __str__(self) -> str:
        return self.text


#: The process whose exit hooks are in place (they are per process: a fork inherits the
#: handlers but multiprocessing's finalizers run only in the process that made them).
_hooked_pid: int | None = None


def _reopen(path: str, read_only: bool) -> Stash:
    """A pickled ``Stash``, opened again in another process (``Stash.__reduce__``)."""
    return Stash(path, read_only=read_only, create=False)


def _hook_exits() -> None:
    """Makes the ends of this process commit what its stashes saved: SIGTERM (when nobody
    else handles it) and the end of a multiprocessing child, which skips ``atexit``."""
    global _hooked_pid
    if _hooked_pid == os.getpid():
        return
    _hooked_pid = os.getpid()
    if threading.current_thread() is threading.main_thread():
        try:
            # Python's view first: a handler the program set from Python decides.
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                _take_sigterm()
        except ValueError:  # not the main interpreter
            pass
    _close_at_multiprocessing_exit()


def _close_at_multiprocessing_exit(_: object = None) -> None:
    """A multiprocessing child ends with ``os._exit``, after its finalizers."""
    if _hooked_pid is not None:
        multiprocessing.util.Finalize(None, _close_all, exitpriority=0)


def _after_fork_in_child_hooks() -> None:
    _after_fork_in_child()
    if _hooked_pid is not None:
        _hook_exits()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child_hooks,
)
# Last (atexit runs in reverse): the spans of the closes below still reach logging.
atexit.register(_stop_tracing)
atexit.register(_close_all)
if os.environ.get("OBJSTASH_LOG", "").strip():
    # Spans and log records to the logger "objstash.trace" (see ``trace_to_logging``).
    trace_to_logging(os.environ["OBJSTASH_LOG"])
# A multiprocessing child clears the finalizers it inherited once it starts, then runs
# these: the finalizer is made again there.
multiprocessing.util.register_after_fork(
    _close_at_multiprocessing_exit, _close_at_multiprocessing_exit
)


class Stash(_Stash):
    """A content-addressed object cache in one SQLite file.

    ``Stash(path, layout=None, durability=None, codec=None, values=None, create=True,
    read_only=False, reconfigure=False, max_object_size=None, threads=None, max_size=None,
    eviction_grace=None, use_resolution=None, busy_timeout=None, remote=None)``: settings
    left as None use what the stash records, or the defaults for a new one (layout
    "single", durability "fast", codec "gzip", values "rows", no size cap).
    ``values="file"`` makes a new stash keep its objects' bytes in a file beside the
    database (faster reads; an existing stash keeps where it was made to keep them).
    ``busy_timeout`` (seconds, default 30) bounds a wait for another process's lock.
    ``max_size`` (bytes) is recorded in the stash: least recently used objects are evicted
    to keep its files within it; what a save call under way has saved, objects saved or
    read in the last ``eviction_grace`` seconds (default 0.1) and pinned ones
    (``save_pinned``, ``pin``) never are. A read of an object whose last use is less than
    ``use_resolution`` seconds old (default 5) records no new use: eviction's order is
    exact to within it. Use it as a context manager, or call ``close()``. ``remote`` (a
    URL or a ``Remote``) shares the stash's objects through an S3-compatible bucket (see
    the package's documentation).
    """

    if not TYPE_CHECKING:  # the extension's signature is the one to check calls against

        def __init__(self, *args, **kwargs):
            _hook_exits()
            report = self.recovery_report
            if report is not None:
                if report.lost_anything:
                    _log.warning("%s: %s", self.path, report)
                    warnings.warn(
                        f"objstash: {self.path} was rebuilt and lost data: {report}",
                        DataLossWarning,
                        stacklevel=2,
                    )
                else:
                    _log.info("%s: %s", self.path, report)

    @property
    def recovery_report(self) -> RecoveryReport | None:
        """What opening found if the last session did not close cleanly, or the file was
        damaged; None otherwise. A rebuild that lost objects or names also warns
        (``DataLossWarning``) and logs (logger "objstash")."""
        found = self._recovery()
        return None if found is None else RecoveryReport(**found)

    def values(self) -> Iterator[bytes]:
        """Every stored object, in the order of ``keys()`` (a mapping's ``values()``), read
        in batches. Where the stash keeps stored bytes is ``values_in``."""
        for _, value in self.items():
            yield value

    def items(self) -> Iterator[tuple[str, bytes]]:
        """``(key, object)`` for every stored object, in the order of ``keys()``, read in
        batches (an object removed meanwhile is left out)."""
        batch: list[str] = []
        for key in self.keys():
            batch.append(key)
            if len(batch) == 1024:
                yield from self._present(batch)
                batch = []
        yield from self._present(batch)

    def _present(self, keys: list[str]) -> Iterator[tuple[str, bytes]]:
        for key, value in zip(keys, self.get_many(keys)):
            if value is not None:
                yield key, value

    def __reduce__(self):
        """A stash pickles as its path: a spawned worker (multiprocessing's spawn, a
        ProcessPoolExecutor) opens it again, with the settings the stash records."""
        return (_reopen, (str(self.path), self.read_only))

    def save_model(
        self,
        root: bytes | bytearray | memoryview | str,
        members: Iterable[bytes | bytearray | memoryview | str],
        name: str | bytes | None = None,
    ) -> Model:
        """Saves a model: its members (in parallel, as ``save_all``), then its root, and
        declares it, under ``name`` if given. The model as it stands (complete)."""
        with self.assemble() as assembly:
            keys = assembly.save_all(members)
            key = assembly.save(root)
            return assembly.finish(key, keys, name)

    def stats(self) -> Stats:
        """The size report (waits for pending writes to commit; costs no scan)."""
        fields = self._stats()
        return Stats(**{**fields, "counters": Counters(**fields["counters"])})

    def counters(self) -> Counters:
        """What the stash served since counting began: hits and misses of reads, lookups,
        saves of new and of stored objects, evictions; every process's calls (another
        handle's are recorded with its next commit, within about a second when idle, and
        when it closes; a read-only handle's are not). This handle's are recorded first."""
        return Counters(**self._counters(False))

    def handle_counters(self) -> Counters:
        """What this handle's calls served since it opened."""
        return Counters(**self._counters(True))

    def verify(self) -> VerifyReport:
        """Reads and checks every object and name."""
        return VerifyReport(**self._verify())

    def push(self) -> PushReport:
        """Uploads, in packs, every stored object the remote lacks."""
        return PushReport(**self._push())

    def pull(self) -> PullReport:
        """Fetches every object of the remote the stash lacks; each is checked."""
        return PullReport(**self._pull())

    def remote_status(self) -> RemoteStatus:
        """Refreshes the copy of the remote's indexes and says what the remote holds, with
        the records of its last collection and trim."""
        collection, trim = self._remote_records()
        return RemoteStatus(
            **self._remote_status(), last_collection=collection, last_trim=trim
        )

    def remote_compact(self) -> CompactReport:
        """Compacts the remote's pack indexes into key-sharded files, so that a new machine
        reads the parts it needs instead of every index."""
        return CompactReport(**self._remote_compact())

    def remote_gc(
        self, grace: float = 3600.0, orphan_grace: float = 86400.0
    ) -> CollectReport:
        """Collects the remote's garbage: duplicate packs of concurrent pushes, packs out of
        the listing for longer than ``grace`` seconds, bodies of killed pushes older than
        ``orphan_grace``. One machine at a time; safe beside other machines."""
        return CollectReport(**self._remote_gc(grace, orphan_grace))

    def remote_trim(
        self,
        max_size: int | None = None,
        unused_for: float | None = None,
        grace: float = 3600.0,
        unused_since: float | None = None,
    ) -> TrimReport:
        """Keeps the remote within ``max_size`` bytes and drops objects no machine pushed,
        pulled or read through for ``unused_for`` seconds, or since the time
        ``unused_since`` (seconds since 1970, as ``time.time()``); mostly unused packs are
        repacked first. Packs taken out stay readable for ``grace`` seconds."""
        if max_size is None and unused_for is None and unused_since is None:
            raise ValueError("remote_trim needs max_size, unused_for or both")
        return TrimReport(
            **self._remote_trim(max_size, unused_for, grace, unused_since)
        )


__all__ = [
    "MAX_NAME_LEN",
    "Stash",
    "Model",
    "Assembly",
    "key_of",
    "trace_to_logging",
    "repair",
    "RecoveryReport",
    "DataLossWarning",
    "Counters",
    "Stats",
    "VerifyReport",
    "Remote",
    "PushReport",
    "PullReport",
    "RemoteStatus",
    "CollectReport",
    "CompactReport",
    "TrimReport",
    "__version__",
    "errors",
    "Error",
    "CorruptError",
    "NotFoundError",
    "NotAStashError",
    "LockedError",
    "BusyError",
    "ReadOnlyError",
    "SettingsError",
    "WriterStoppedError",
    "ClosedError",
    "FileSystemError",
    "PermissionDeniedError",
    "TooLargeError",
    "BadNameError",
    "BadKeyError",
    "RemoteError",
    "RemoteCorruptError",
]
