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

Calls that do work release the GIL; one ``Stash`` may be shared by threads, and several
processes may open the same file. ``objstash.speckle`` holds a transport for specklepy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from objstash._objstash import MAX_NAME_LEN, __version__
from objstash._objstash import Stash as _Stash
from objstash import errors
from objstash.errors import (
    BadKeyError,
    BadNameError,
    BusyError,
    ClosedError,
    CorruptError,
    Error,
    LockedError,
    NotAStashError,
    NotFoundError,
    ReadOnlyError,
    SettingsError,
    TooLargeError,
    WriterStoppedError,
)


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
    oldest_use: float | None = None
    """Seconds since the epoch of the earliest last use of an unpinned object."""

    @property
    def compression_ratio(self) -> float:
        """Raw bytes over stored bytes; 1.0 for an empty stash."""
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 1.0


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


class Stash(_Stash):
    """A content-addressed object cache in one SQLite file.

    ``Stash(path, layout=None, durability=None, codec=None, create=True, read_only=False,
    reconfigure=False, max_object_size=None, threads=None, max_size=None,
    eviction_grace=None, use_resolution=None)``: settings left as None use what the stash
    records, or the defaults for a new one (layout "single", durability "fast", codec
    "gzip", no size cap). ``max_size`` (bytes) is recorded in the stash: least recently
    used objects are evicted to keep its files within it; objects saved or read in the
    last ``eviction_grace`` seconds (default 5) and pinned ones (``save_pinned``, ``pin``)
    never are. A read of an object whose last use is less than ``use_resolution`` seconds
    old (default 5) records no new use: eviction's order is exact to within it. Use it as
    a context manager, or call ``close()``.
    """

    def stats(self) -> Stats:
        """The size report (waits for pending writes to commit; costs no scan)."""
        return Stats(**self._stats())

    def verify(self) -> VerifyReport:
        """Reads and checks every object and name."""
        return VerifyReport(**self._verify())


__all__ = [
    "MAX_NAME_LEN",
    "Stash",
    "Stats",
    "VerifyReport",
    "__version__",
    *errors.__all__,
]
