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

Models. Speckle's clients trust a cached root to mean a cached model: ``receive`` reads
the root from the local cache and, if it is there, never asks the server. The transport
keeps that promise under a size cap. Each write (``begin_write`` to ``end_write``: a send,
or a copy from a server) is an objstash assembly: what it saves, and what ``has_objects``
finds already cached, is kept until the write ends; then its last object, the root, is
declared a model of the objects its ``__closure`` lists. From then on the cache keeps and
evicts the model whole, and reads the root as absent whenever an object of its closure is
not cached (removed, evicted, lost to damage), so a receive falls back to the server
rather than deserializing part of a model. A root cached without a model (by a transport
from before models, or without its closure) is trusted only once its whole closure is
found, and is then declared.

Reads follow a receive: ``get_object`` of a model's root reads the whole model in one
sweep of the file (``Stash.read_model``: the order the objects were saved in, which a
cold page cache reads sequentially), so the deserializer's one-by-one requests are served
from memory, as often as it asks, until the next model is read or the transport closes: a
receive that has read a root finishes with that model, whatever another process evicts
or removes meanwhile. For an object that lists children without being a model's root, the children
are read ahead ``COPY_CHUNK`` at a time in one batch call each, at most
``READ_AHEAD_MAX`` held ahead.

With a remote, the cache is a team's: objects sent on one machine are pushed in the
background, and a receive on another machine reads them through by id.

Needs specklepy (``pip install 'objstash[speckle]'``).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import warnings
from typing import Any, Dict, List, Optional, Tuple

from specklepy.logging.exceptions import SpeckleException, SpeckleWarning
from specklepy.transports.abstract_transport import AbstractTransport

import objstash
from objstash import Assembly, Stash
from objstash._objstash import _closure_ids as _library_closure_ids
from objstash.speckle_paths import default_base_path


def _closure_ids(text: str) -> List[str]:
    """The ids a root's own ``__closure`` lists (Speckle's blob ids left out), by the
    library's one parser, without the GIL: ``json.loads`` of a root of 100,000 ids held it
    for 54 ms (in the background saver, that stalled the sender's thread)."""
    return _library_closure_ids(text)


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
    the README). ``max_size`` (bytes) caps the cache: the least recently used models (and
    objects saved outside any model) are evicted whole to stay within it; a model larger
    than the cap stays until the next one needs the room.

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
        # The write under way: its assembly (begun by begin_write, a first batch or
        # has_objects) and its last object (the root of what a send or a copy writes).
        self._assembly: Optional[Assembly] = None
        self._last: Optional[Tuple[str, str]] = None
        # Ids of the objects of the model read or written last: read as objects, not as
        # roots; the first one asked for reads that model whole, unless it was already.
        self._members: set = set()
        self._members_root: Optional[str] = None
        self._members_read = False
        # Whether the write under way is a copy (it asked has_objects first).
        self._copied = False
        self._buffer: Dict[str, str] = {}
        # Batches handed to the background saver and not saved yet, by id; at most two
        # batches wait for it (bounded memory when objstash is the slower side).
        self._inflight: Dict[str, str] = {}
        self._lock = threading.Lock()
        # Work for the background saver: (assembly, batch) to save, ("declare", assembly,
        # last object, keys) to declare a send's model, None to stop.
        self._batches: "queue.Queue[Any]" = queue.Queue(maxsize=2)
        self._saver: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        # Read ahead: children listed by an object read, in order, not fetched yet
        # (``_ahead`` and the set of the same ids), and fetched ones not yet asked for.
        self._ahead: List[str] = []
        self._ahead_ids: set = set()
        self._fetched: Dict[str, str] = {}
        # The objects of the model read last, by id: served as often as the deserializer
        # asks (a detached level or material is asked for once per reference) until the
        # next model is read or the transport closes, so that a receive that read a model
        # finishes with it whatever another process evicts or removes meanwhile.
        self._model: Dict[str, str] = {}
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
        self._assembling()

    def _assembling(self) -> Optional[Assembly]:
        """The assembly of the write under way, begun if none is (None for a read-only
        cache, which assembles nothing)."""
        if self._assembly is None and not self.stash.read_only:
            self._assembly = self.stash.assemble()
        return self._assembly

    def save_object(self, id: str, serialized_object: str) -> None:
        """Buffers an object under its id; the buffer goes to objstash in batches."""
        self._raise_saver_error()
        self._fetched.pop(id, None)
        self._model.pop(id, None)
        # Kept as str: objstash stores a str as its UTF-8 bytes, read without a copy. The
        # buffer keeps the order of the calls (an id saved again moves to the end): its
        # last item is the write's last object, taken when the buffer is handed over.
        previous = self._buffer.pop(id, None)
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
        """Hands over what is buffered and waits until everything is committed. The write's
        root (its last object, if it lists a ``__closure``) is declared a model of it: at
        once after a copy from a server (the receive that follows reads the model), by the
        background saver after a send (off the sender's path; until then the objects are
        held, and the root reads as cached only with them)."""
        self._send_buffer()
        self._batches.join()
        assembly, last = self._take_write()
        copied, self._copied = self._copied, False
        try:
            self._raise_saver_error()
            if assembly is not None and copied:
                self._declare_model(assembly, last, read=True)
            self.stash.flush()
            if assembly is not None and not copied:
                self._start_saver()
                self._batches.put(("declare", assembly, last))
                assembly = None  # the saver's now
        finally:
            if assembly is not None:
                assembly.give_up()  # nothing if it was finished
        if self.stash.remote_url is not None:
            self._push_in_background()

    def _take_write(self) -> Tuple[Optional[Assembly], Optional[Tuple[str, str]]]:
        """Ends the write under way: its assembly and last object."""
        assembly, last = self._assembly, self._last
        self._assembly, self._last = None, None
        return assembly, last

    def _declare_model(
        self, assembly: Assembly, last: Optional[Tuple[str, str]], read: bool = False
    ) -> None:
        """Finishes a write's assembly as the model of its root and the root's closure
        (the ids are looked up then: the objects the write saved or held, and any others an
        earlier write cached, held now). A root whose closure is not all cached (a member no
        write saved and the cache does not hold) is not left readable: its id is removed,
        so a receive asks the server. With `read` (a copy, whose receive reads the model
        next), the model's objects are read in the transaction that declares it, and
        served from memory: another process evicting or removing it once it is declared
        cannot take part of it from the receive."""
        if last is None or '"__closure"' not in last[1]:
            return
        root_id, text = last
        closure = _closure_ids(text)
        objects = None
        if read:
            model, absent, objects = assembly.finish_closure_read(root_id, closure, root_id)
        else:
            model, absent = assembly.finish_closure(root_id, closure, root_id)
        if absent:
            self.stash.remove_named([root_id])
            if read:
                # A copy whose receive reads the model next: another process took objects
                # of it while it ran (between a save that found one stored and its hold).
                # The receive fails clearly rather than deserializing part of a model.
                raise SpeckleException(
                    f"{self.name}: another process evicted or removed {len(absent)} objects "
                    f"of {root_id} while it was copied (e.g. {absent[0]}); receive it again"
                )
            warnings.warn(
                f"{self.name}: object {root_id} lists {len(absent)} objects this cache "
                f"does not hold (e.g. {absent[0]}); it is not cached, so a receive of it "
                "asks the server",
                SpeckleWarning,
                stacklevel=3,
            )
            return
        if model is not None and model.complete:
            # A receive reads what its copy wrote: its objects, not roots, read whole.
            self._members, self._members_root, self._members_read = set(closure), model.root, False
            if objects is not None:
                self._fetched.clear()
                self._model = {id: data.decode("utf-8") for id, data in objects}
                self._members_read = True

    def _end_assembly(self) -> None:
        """Ends the write under way unfinished: its assembly is given up."""
        assembly, _ = self._take_write()
        if assembly is not None:
            assembly.give_up()

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
        self._last = next(reversed(batch.items()))
        self._start_saver()
        # The write's assembly begins with its first batch (or has_objects), once per batch
        # rather than per object.
        self._batches.put((self._assembling(), batch))

    def _start_saver(self) -> None:
        if self._saver is None:
            self._saver = threading.Thread(target=self._save_batches, daemon=True)
            self._saver.start()

    def _save_batches(self) -> None:
        """The background saver: one ``save_named`` per batch, in order, into the
        assembly of the write that saved it; and the declarations of sends' models."""
        while True:
            work = self._batches.get()
            if work is None:
                self._batches.task_done()
                return
            if work[0] == "declare":
                _, assembly, last = work
                try:
                    self._declare_model(assembly, last)
                except BaseException as ex:  # raised in the caller's thread, see below
                    self._error = ex
                finally:
                    assembly.give_up()  # nothing if it was finished
                    self._batches.task_done()
                continue
            assembly, batch = work
            try:
                items: List[Tuple[str, str]] = list(batch.items())
                # Once save_named returns, every read sees the objects (before commit).
                target = assembly if assembly is not None and assembly.active else self.stash
                target.save_named(items)
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
        swept = self._model.get(id)
        if swept is not None:
            return swept
        fetched = self._fetched.pop(id, None)
        if fetched is not None:
            return fetched
        if id in self._ahead_ids:
            self._read_ahead(id)
            fetched = self._fetched.pop(id, None)
            if fetched is not None:
                return fetched
        if id in self._members:
            # An object of the model read or written last: an object, not a root.
            if not self._members_read and self._members_root is not None:
                self._members_read = True
                self._read_model(self._members_root)
                swept = self._model.get(id)
                if swept is not None:
                    return swept
            data = self.stash.get_named(id)
            return None if data is None else data.decode("utf-8")
        key = self.stash.resolve(id)
        if key is None:
            if self.stash.remote_url is None:
                return None
            data = self.stash.get_named(id)  # read through the remote, and kept
            key = None if data is None else objstash.key_of(data)
        else:
            whole = self._read_model(key)
            if whole is not None:
                return whole
            data = self.stash.get(key)
        if data is None or key is None:
            return None
        text = data.decode("utf-8")
        if '"__closure"' in text:
            return self._trust_root(id, key, text)
        return text

    def _read_model(self, key: str) -> Optional[str]:
        """The root's JSON if `key` is the root of a complete model, whose objects are then
        read (in one sweep of the file) to serve the requests that follow; else None."""
        # The closure's ids are looked up before the sweep: once it has read the model,
        # another process may evict or remove it, names and all, and an id is the name of
        # the same bytes whenever it is found.
        first = self.stash.get(key)
        if first is None:
            return None
        children = _closure_ids(first.decode("utf-8"))
        child_keys = self.stash.resolve_many(children)
        try:
            objects = self.stash.read_model(key)
        except objstash.CorruptError as ex:
            if ex.key is None or self.stash.read_only:
                raise
            # A damaged object of the model: removed, which makes the root absent until
            # the model is whole again, so a receive asks the server.
            self.stash.remove(ex.key)
            warnings.warn(
                f"{self.name}: object {ex.key} of the model of {key} was damaged ({ex}); "
                "it was removed, and the model is read from the server",
                SpeckleWarning,
                stacklevel=3,
            )
            return None
        if objects is None:
            return None
        by_key = dict(objects)
        root = by_key.pop(key).decode("utf-8")
        self._fetched.clear()
        self._ahead.clear()
        self._ahead_ids.clear()
        self._members, self._members_root, self._members_read = set(children), key, True
        self._model = {}
        for child, child_key in zip(children, child_keys):
            data = by_key.get(child_key) if child_key is not None else None
            if data is not None:
                self._model[child] = data.decode("utf-8")
        return root

    def _trust_root(self, id: str, key: str, text: str) -> Optional[str]:
        """A root cached without a model (or just read through the remote, with its closure
        then): None unless its whole closure is cached; then it is declared a model (where
        the cache can be written) and read whole."""
        children = _closure_ids(text)
        keys = self.stash.resolve_many(children)
        if self.stash.remote_url is not None and None in keys:
            # A root read through the remote: its model comes through too, or it is absent.
            lacking = [c for c, k in zip(children, keys) if k is None]
            for start in range(0, len(lacking), COPY_CHUNK):
                self.stash.get_many_named(lacking[start : start + COPY_CHUNK])
            keys = self.stash.resolve_many(children)
        found = [k for k in keys if k is not None]
        if len(found) < len(keys) or self.stash.missing(found):
            return None  # part of a model: the server has the rest
        if not self.stash.read_only:
            # The declaration settles it: a member gone since the check above (another
            # process evicted or removed it) leaves the model incomplete, and its root
            # absent; a model read whole is what the receive gets.
            model = self.stash.declare_model(key, found, id)
            return self._read_model(key) if model.complete else None
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
        unsaved = [
            self._unsaved(id) or self._model.get(id) or self._fetched.pop(id, None) for id in ids
        ]
        wanted = [id for id, text in zip(ids, unsaved) if text is None]
        found = iter(self.stash.get_many_named(wanted) if wanted else [])
        texts = []
        for text in unsaved:
            if text is None:
                data = next(found)
                text = None if data is None else data.decode("utf-8")
            texts.append(text)
        return texts

    def has_objects(self, id_list: List[str]) -> Dict[str, bool]:
        """Which objects are cached, in one call. Those found are held for the write that
        follows (a copy from a server asks before it saves what is missing): kept until
        it ends, so the model it completes is whole."""
        unsaved = {id for id in id_list if self._unsaved(id) is not None}  # first, as above
        assembly = self._assembling()
        if assembly is None:
            missing = set(self.stash.missing_named(id_list))
            return {id: id in unsaved or id not in missing for id in id_list}
        self._copied = True
        held = assembly.hold_named(id_list)
        return {id: id in unsaved or key is not None for id, key in zip(id_list, held)}

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
            self._end_assembly()
            self._raise_saver_error()
            self.flush_remote()
            if self.push_error is not None:
                error, self.push_error = self.push_error, None
                raise SpeckleException(
                    f"{self.name} could not push to {self.stash.remote_url}: {error}"
                ) from error
        finally:
            self._model = {}
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
