"""The exceptions objstash raises. Every one is an ``objstash.Error``; those about a bad
argument are also ``ValueError``, those of the file system also ``OSError``.

- ``CorruptError``: a stored object failed its hash check (its bytes are never returned).
- ``NotFoundError``: there is no stash at the path (opened with ``create=False``); also a
  ``FileNotFoundError``.
- ``NotAStashError``: the path is not a stash (not SQLite, or another application's).
- ``LockedError``: the operation needs every other handle closed.
- ``BusyError``: another process held the write lock too long; nothing was lost, retry.
- ``ReadOnlyError``: the stash is open read-only.
- ``SettingsError``: a setting the stash does not allow (or a newer format).
- ``WriterStoppedError``: the writer failed; writes since the last flush may be lost.
- ``ClosedError``: the handle was closed.
- ``FileSystemError``: a file of the stash could not be read or written (an ``OSError``);
  ``PermissionDeniedError`` when the process may not (also a ``PermissionError``).
- ``TooLargeError``, ``BadNameError``, ``BadKeyError``: bad arguments (also ValueError).
- ``RemoteError``: the remote could not be reached or refused a request; the local stash
  is unaffected, retry later. ``RemoteCorruptError`` (also a ``CorruptError``): an object
  read from the remote failed its check; it was neither returned nor stored.
"""


class Error(Exception):
    """Every objstash error."""


class CorruptError(Error):
    """A stored object failed its hash check; its bytes are never returned. ``key`` is the
    damaged object's key where one object is to blame (else None)."""

    key: str | None = None


class NotFoundError(Error, FileNotFoundError):
    """There is no stash at the path."""


class NotAStashError(Error):
    """The path holds something that is not a stash."""


class LockedError(Error):
    """The operation needs every other handle on the stash closed."""


class BusyError(Error):
    """Another process held the stash's write lock for too long; retry."""


class ReadOnlyError(Error):
    """The stash is open read-only."""


class SettingsError(Error):
    """A setting the stash does not allow."""


class WriterStoppedError(Error):
    """The stash's writer stopped; writes since the last flush may be lost."""


class ClosedError(Error):
    """The stash handle is closed."""


class FileSystemError(Error, OSError):
    """A file of the stash could not be read or written."""


class PermissionDeniedError(FileSystemError, PermissionError):
    """The process may not read or write a file the stash needs."""


class TooLargeError(Error, ValueError):
    """An object is larger than the stash accepts."""


class BadNameError(Error, ValueError):
    """A name is empty, too long, or not str/bytes."""


class BadKeyError(Error, ValueError):
    """Not a key: a str of 64 hex digits or 32 bytes."""


class RemoteError(Error):
    """The remote failed; nothing local is affected: retry once it is reachable."""


class RemoteCorruptError(RemoteError, CorruptError):
    """An object read from the remote failed its check: neither returned nor stored."""


__all__ = [
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
