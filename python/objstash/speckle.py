"""A specklepy transport that keeps objects in an objstash stash: the local cache of a
Speckle client, in one line.

    from objstash.speckle import ObjstashTransport

    cache = ObjstashTransport()                  # where SQLiteTransport() was
    obj_id = operations.send(base, [cache, server], use_default_cache=False)
    base = operations.receive(obj_id, remote_transport=server, local_transport=cache)

Each object is saved under its Speckle id as an objstash name and stored once under the
blake3 hash of its bytes, compressed; every read checks that hash, so a damaged object
raises ``objstash.CorruptError`` instead of reaching the deserializer. Writes are
buffered and handed to objstash in batches by a background thread (hashed and compressed
in parallel, with the GIL released), so specklepy's serializer goes on while objstash
stores; ``end_write`` waits for them and commits. Objects saved and not yet handed over
are read back from the buffers, so a transport always reads its own writes; an error of
the background save is raised by the next ``save_object`` or ``end_write``.

Reads follow a receive: when ``get_object`` reads an object that lists its children (a
``__closure``), the transport reads those children ahead, ``COPY_CHUNK`` at a time in one
batch call each (read and checked in parallel), so the deserializer's one-by-one requests
are served from memory. At most ``READ_AHEAD_MAX`` objects are held ahead.

With a remote, the cache is a team's: objects sent on one machine are pushed in the
background, and a receive on another machine reads them through by id.

Needs specklepy (``pip install 'objstash[speckle]'``).
"""

from __future__ import annotations

import json
import os
import queue
import threading
from typing import Any, Dict, List, Optional, Tuple

from specklepy.logging.exceptions import SpeckleException
from specklepy.transports.abstract_transport import AbstractTransport

from objstash import Stash
from objstash.speckle_paths import default_base_path

#: Objects buffered before they are handed to objstash in one batch.
BATCH_OBJECTS = 10_000
#: Characters (about bytes, for JSON) buffered before the same.
BATCH_BYTES = 16 * 1000 * 1000
#: Children read per call when copying an object and its children, and when reading ahead.
COPY_CHUNK = 10_000
#: The most objects read ahead and not yet asked for that a transport keeps.
READ_AHEAD_MAX = 100_000


def receive_bundle(*args: Any, **kwargs: Any) -> Any:
    """``specklepy.bundle.receive`` through a cache of the version's files in a stash: a
    second receive of a version downloads nothing (see ``objstash.bundle_cache``). Needs
    specklepy's bundle support (``pip install 'specklepy[bundle]'``, pyarrow)."""
    from objstash.bundle_cache import receive_bundle as receive

    return receive(*args, **kwargs)


class ObjstashTransport(AbstractTransport):
    """A specklepy transport backed by objstash.

    Arguments mirror ``SQLiteTransport``: the stash is ``{base_path}/{scope}.objstash``
    (default: specklepy's application data directory, scope "Objects"). Pass ``path`` to
    choose the file, or ``stash`` to use an open ``objstash.Stash`` (which the transport
    then does not close). ``durability`` ("fast" or "safe") and ``codec`` ("gzip" or
    "zstd-dict") apply when the stash is created; a new stash is zstd-dict unless
    ``codec`` says otherwise: Speckle objects are small JSON, which a dictionary trained
    on the cache's own objects compresses to 0.35x the bytes of SQLiteTransport's cache
    (gzip: 0.48x) and stores faster (python/bench/transports.py). ``values="file"`` makes
    a new cache keep the objects' bytes in a file beside its database (faster reads; see
    the README). ``max_size`` (bytes) caps the cache: the least recently used objects are
    evicted to stay within it.

    ``remote`` (a URL ``s3://bucket/prefix`` or an ``objstash.Remote``) shares the cache
    with a team: after each ``end_write`` the objects and their ids are pushed in the
    background (``flush_remote`` waits; ``close`` waits and raises a failed push), and an
    object this cache lacks is read through the remote by its id, checked, and kept.
    """

    def __init__(
        self,
        base_path: Optional[str] = None,
        app_name: Optional[str] = None,
        scope: Optional[str] = None,
        name: str = "Objstash",
        *,
        path: Optional[str] = None,
        stash: Optional[Stash] = None,
        durability: Optional[str] = None,
        codec: Optional[str] = None,
        values: Optional[str] = None,
        max_size: Optional[int] = None,
        remote: Optional[Any] = None,
    ) -> None:
        super().__init__()
        self._name = name
        self.app_name = app_name or "Speckle"
        self.scope = scope or "Objects"
        self._owns_stash = stash is None
        if stash is None:
            if path is None:
                base = base_path or default_base_path(self.app_name)
                os.makedirs(base, exist_ok=True)
                path = os.path.join(base, f"{self.scope}.objstash")
            if codec is None and not os.path.exists(path):
                codec = "zstd-dict"
            try:
                stash = Stash(
                    path,
                    durability=durability,
                    codec=codec,
                    values=values,
                    max_size=max_size,
                    remote=remote,
                )
            except Exception as ex:
                raise SpeckleException(
                    f"ObjstashTransport could not open {path}: {ex}"
                ) from ex
        self.stash = stash
        self._buffer: Dict[str, str] = {}
        # Batches handed to the background saver and not saved yet, by id; at most two
        # batches wait for it (bounded memory when objstash is the slower side).
        self._inflight: Dict[str, str] = {}
        self._lock = threading.Lock()
        self._batches: "queue.Queue[Optional[Dict[str, str]]]" = queue.Queue(maxsize=2)
        self._saver: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        # Read ahead: children listed by an object read, in order, not fetched yet
        # (``_ahead`` and the set of the same ids), and fetched ones not yet asked for.
        self._ahead: List[str] = []
        self._ahead_ids: set = set()
        self._fetched: Dict[str, str] = {}
        self._buffer_bytes = 0
        self.saved_obj_count = 0
        # The background push (with a remote): one thread at a time; a commit while it
        # runs makes it push once more.
        self._pusher: Optional[threading.Thread] = None
        self._push_again = False
        self.push_error: Optional[BaseException] = None
        """Why the last background push failed (None once one succeeds); ``close``
        raises it."""

    def __repr__(self) -> str:
        return f"ObjstashTransport({str(self.stash.path)!r})"

    @property
    def name(self) -> str:
        return self._name

    # Writing -------------------------------------------------------------------------

    def begin_write(self) -> None:
        self.saved_obj_count = 0

    def save_object(self, id: str, serialized_object: str) -> None:
        """Buffers an object under its id; the buffer goes to objstash in batches."""
        self._raise_saver_error()
        self._fetched.pop(id, None)
        # Kept as str: objstash stores a str as its UTF-8 bytes, read without a copy.
        previous = self._buffer.get(id)
        if previous is not None:
            self._buffer_bytes -= len(previous)
        self._buffer[id] = serialized_object
        self._buffer_bytes += len(serialized_object)
        self.saved_obj_count += 1
        if len(self._buffer) >= BATCH_OBJECTS or self._buffer_bytes >= BATCH_BYTES:
            self._send_buffer()

    def save_object_from_transport(
        self, id: str, source_transport: AbstractTransport
    ) -> None:
        serialized_object = source_transport.get_object(id)
        if serialized_object is None:
            raise SpeckleException(
                f"{source_transport.name} has no object {id} to copy"
            )
        self.save_object(id, serialized_object)

    def end_write(self) -> None:
        """Hands over what is buffered and waits until everything is committed."""
        self._send_buffer()
        self._batches.join()
        self._raise_saver_error()
        self.stash.flush()
        if self.stash.remote_url is not None:
            self._push_in_background()

    # The remote ----------------------------------------------------------------------

    def _push_in_background(self) -> None:
        """Starts a push of what the remote lacks (objects, then their ids), or asks the
        one running to push once more."""
        with self._lock:
            if self._pusher is not None and self._pusher.is_alive():
                self._push_again = True
                return
            self._pusher = threading.Thread(target=self._push, daemon=True)
            self._pusher.start()

    def _push(self) -> None:
        while True:
            try:
                self.stash.push()
                self.push_error = None
            except BaseException as ex:  # kept for close(); the local cache is unaffected
                self.push_error = ex
            with self._lock:
                if not self._push_again:
                    return
                self._push_again = False

    def flush_remote(self) -> None:
        """Waits for the background push: once it returns, every object written before
        is on the remote with its id, or ``push_error`` says why not."""
        pusher = self._pusher
        if pusher is not None:
            pusher.join()

    def _send_buffer(self) -> None:
        """Hands the buffer to the background saver."""
        if not self._buffer:
            return
        # In flight before it leaves the buffer: a read finds it in one or the other.
        with self._lock:
            self._inflight.update(self._buffer)
        batch, self._buffer, self._buffer_bytes = self._buffer, {}, 0
        if self._saver is None:
            self._saver = threading.Thread(target=self._save_batches, daemon=True)
            self._saver.start()
        self._batches.put(batch)

    def _save_batches(self) -> None:
        """The background saver: one ``save_named`` per batch, in order."""
        while True:
            batch = self._batches.get()
            if batch is None:
                self._batches.task_done()
                return
            try:
                items: List[Tuple[str, str]] = list(batch.items())
                # Once save_named returns, every read sees the objects (before commit).
                self.stash.save_named(items)
            except BaseException as ex:  # raised in the caller's thread, see below
                self._error = ex
            finally:
                with self._lock:
                    for id, text in batch.items():
                        if self._inflight.get(id) is text:
                            del self._inflight[id]
                self._batches.task_done()

    def _raise_saver_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise SpeckleException(f"{self.name} could not save objects: {error}") from error

    # Reading -------------------------------------------------------------------------

    def get_object(self, id: str) -> Optional[str]:
        # Unsaved objects before the stash: see get_objects.
        buffered = self._unsaved(id)
        if buffered is not None:
            return buffered
        fetched = self._fetched.pop(id, None)
        if fetched is not None:
            return fetched
        if id in self._ahead_ids:
            self._read_ahead(id)
            fetched = self._fetched.pop(id, None)
            if fetched is not None:
                return fetched
        data = self.stash.get_named(id)
        if data is None:
            return None
        text = data.decode("utf-8")
        if '"__closure"' in text:
            self._plan_read_ahead(text)
        return text

    def _unsaved(self, id: str) -> Optional[str]:
        """An object saved here and not yet handed to objstash, if it is one."""
        text = self._buffer.get(id)
        return self._inflight.get(id) if text is None else text

    def _plan_read_ahead(self, text: str) -> None:
        """Notes the children an object lists, to be read ahead."""
        children = json.loads(text).get("__closure") or {}
        new = [c for c in children if c not in self._ahead_ids and c not in self._fetched]
        self._ahead.extend(new)
        self._ahead_ids.update(new)

    def _read_ahead(self, wanted: str) -> None:
        """Reads `wanted` and the next children in line, in one batch."""
        self._ahead_ids.discard(wanted)
        chunk = [wanted]
        while self._ahead and len(chunk) < COPY_CHUNK:
            take = self._ahead[: COPY_CHUNK - len(chunk)]
            del self._ahead[: len(take)]
            for child in take:
                if child in self._ahead_ids:  # not read since
                    self._ahead_ids.discard(child)
                    chunk.append(child)
        if len(self._fetched) + len(chunk) > READ_AHEAD_MAX:
            self._fetched.clear()  # read in an order we did not guess: start over
        for child, data in zip(chunk, self.stash.get_many_named(chunk)):
            if data is not None:
                self._fetched[child] = data.decode("utf-8")

    def get_objects(self, ids: List[str]) -> List[Optional[str]]:
        """Many objects in one call (read and checked in parallel), None where absent."""
        # Unsaved objects first: one that leaves the buffers meanwhile is in the stash by
        # then (the saver forgets a batch only once save_named has returned).
        unsaved = [self._unsaved(id) for id in ids]
        found = self.stash.get_many_named(ids)
        return [
            text if text is not None else None if data is None else data.decode("utf-8")
            for text, data in zip(unsaved, found)
        ]

    def has_objects(self, id_list: List[str]) -> Dict[str, bool]:
        unsaved = {id for id in id_list if self._unsaved(id) is not None}  # first, as above
        missing = set(self.stash.missing_named(id_list))
        return {id: id in unsaved or id not in missing for id in id_list}

    def copy_object_and_children(
        self, id: str, target_transport: AbstractTransport
    ) -> str:
        """Copies an object and every child its ``__closure`` lists into the target;
        returns the object's JSON."""
        root = self.get_object(id)
        if root is None:
            raise SpeckleException(f"{self.name} has no object {id}")
        children = list(json.loads(root).get("__closure", {}).keys())
        present = target_transport.has_objects(children) if children else {}
        wanted = [child for child in children if not present.get(child, False)]
        target_transport.begin_write()
        for start in range(0, len(wanted), COPY_CHUNK):
            chunk = wanted[start : start + COPY_CHUNK]
            for child, serialized in zip(chunk, self.get_objects(chunk)):
                if serialized is None:
                    raise SpeckleException(
                        f"{self.name} has object {id} but not its child {child}"
                    )
                target_transport.save_object(child, serialized)
        target_transport.save_object(id, root)
        target_transport.end_write()
        return root

    # Life cycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Commits what is buffered and closes the stash (if the transport opened it)."""
        if self.stash.closed:
            return
        try:
            self._send_buffer()
            if self._saver is not None:
                self._batches.put(None)
                self._saver.join()
                self._saver = None
            self._raise_saver_error()
            self.flush_remote()
            if self.push_error is not None:
                error, self.push_error = self.push_error, None
                raise SpeckleException(
                    f"{self.name} could not push to {self.stash.remote_url}: {error}"
                ) from error
        finally:
            if self._owns_stash:
                self.stash.close()
            else:
                self.stash.flush()

    def __enter__(self) -> "ObjstashTransport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


__all__ = ["ObjstashTransport", "BATCH_OBJECTS", "BATCH_BYTES"]
