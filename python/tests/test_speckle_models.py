"""A capped ObjstashTransport returns exactly the model sent, or falls back to the server,
whatever the cap and the order of sends and receives, with models sharing objects and
models larger than the cap; with no server it raises, never returning part of a model.

Real specklepy against a Speckle server's object endpoints on loopback
(``speckle_server.py``): the cases of issue #66's "What a new user found". Before models,
a cap evicted single objects, and a receive found the root and deserialized a partial
model (``root cached: True, children cached: 170 / 2828``)."""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("specklepy")

from specklepy.api import operations  # noqa: E402
from specklepy.logging.exceptions import SpeckleException  # noqa: E402
from specklepy.transports.server import ServerTransport  # noqa: E402

import objstash  # noqa: E402
from objstash.speckle import ObjstashTransport  # noqa: E402
from speckle_model import build_model  # noqa: E402
from speckle_server import SpeckleServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MB = 1000 * 1000


@pytest.fixture(scope="module")
def server():
    server = SpeckleServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def models():
    """Four models of about 2,800 objects each, sharing their levels."""
    return [build_model(1250, seed=seed) for seed in range(4)]


_serialized: dict = {}


def serialized(model) -> str:
    """``operations.serialize`` of a model sent, computed once."""
    if id(model) not in _serialized:
        _serialized[id(model)] = operations.serialize(model)
    return _serialized[id(model)]


def transport(server: SpeckleServer) -> ServerTransport:
    return ServerTransport(stream_id="stream", token="token", url=server.url)


def receive_exactly(root_id, model, server, cache) -> None:
    """A receive through the cache (with the server to fall back on) gives the model
    sent, and warns of nothing (specklepy warns of placeholders it could not resolve)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        received = operations.receive(
            root_id, remote_transport=transport(server), local_transport=cache
        )
    assert operations.serialize(received) == serialized(model)


def closure(cache: ObjstashTransport, root_id: str) -> list:
    return list(json.loads(cache.get_object(root_id))["__closure"])


def cached_root_means_cached_model(cache: ObjstashTransport, root_id: str) -> None:
    """The invariant, as a Speckle client relies on it: a root the cache returns comes with
    its whole closure."""
    root = cache.stash.get_named(root_id)
    if root is not None:
        children = list(json.loads(root)["__closure"])
        assert cache.stash.missing_named(children) == [], "a cached root without its model"


@pytest.mark.parametrize("cap_mb", [1.5, 3, 5])
@pytest.mark.parametrize("order", ["as sent", "reversed"])
def test_a_capped_cache_always_receives_the_model_sent(tmp_path, server, models, cap_mb, order):
    with ObjstashTransport(path=str(tmp_path / "cache.db"), max_size=int(cap_mb * MB)) as cache:
        ids = [operations.send(m, [cache, transport(server)]) for m in models]
        assert len(closure(cache, ids[-1])) > 2_500
        sequence = list(range(len(models)))
        if order == "reversed":
            sequence.reverse()
        for i in sequence + sequence:
            receive_exactly(ids[i], models[i], server, cache)
            for root_id in ids:
                cached_root_means_cached_model(cache, root_id)
        assert cache.stash.verify().ok
        stats = cache.stash.stats()
        assert stats.evicted_objects > 0, "the cap evicted"


def test_a_model_larger_than_the_cap_is_received_every_time(tmp_path, server, models):
    with ObjstashTransport(path=str(tmp_path / "cache.db"), max_size=300_000) as cache:
        root_id = operations.send(models[0], [cache, transport(server)])
        for _ in range(3):
            receive_exactly(root_id, models[0], server, cache)
        model = cache.stash.model(cache.stash.resolve(root_id))
        assert model is not None and model.complete and model.stored_bytes > 300_000
        # The next model needs the room: the first goes whole, and comes back whole.
        other = operations.send(models[1], [cache, transport(server)])
        receive_exactly(other, models[1], server, cache)
        cached_root_means_cached_model(cache, root_id)
        receive_exactly(root_id, models[0], server, cache)
        cached_root_means_cached_model(cache, other)


def test_a_copy_keeps_the_children_it_found_while_it_saves_the_others(tmp_path, server, models):
    # A root gone and some of its children kept: the copy from the server fetches only what
    # has_objects calls missing; the others, the oldest in the cache, stay while it saves.
    with ObjstashTransport(path=str(tmp_path / "cache.db"), max_size=2 * MB) as cache:
        root_id = operations.send(models[2], [cache, transport(server)])
        children = closure(cache, root_id)
        keep = set(children[::3])
        gone = cache.stash.resolve_many([c for c in children if c not in keep])
        cache.stash.remove_all(gone)
        assert cache.get_object(root_id) is None, "the root of a model missing objects"
        for other in (models[0], models[1]):
            operations.send(other, [cache, transport(server)])
        before = server.requests["POST api/getobjects"]
        receive_exactly(root_id, models[2], server, cache)
        assert server.requests["POST api/getobjects"] == before + 1
        cached_root_means_cached_model(cache, root_id)
        assert cache.stash.model(cache.stash.resolve(root_id)).complete


def test_with_no_server_a_model_not_cached_whole_is_an_error_not_part_of_a_model(
    tmp_path, server, models
):
    with ObjstashTransport(path=str(tmp_path / "cache.db"), max_size=int(1.5 * MB)) as cache:
        ids = [operations.send(m, [cache, transport(server)]) for m in models]
        # The oldest went whole to make room: no local answer, and no server to ask.
        assert cache.stash.resolve(ids[0]) is None, "evicted with its name"
        with pytest.raises(SpeckleException, match="Could not find the specified object"):
            operations.receive(ids[0], local_transport=cache)
        # A member removed from the newest: its root reads as absent until it comes back.
        children = closure(cache, ids[-1])
        assert cache.stash.remove(cache.stash.resolve(children[5]))
        with pytest.raises(SpeckleException, match="Could not find the specified object"):
            operations.receive(ids[-1], local_transport=cache)
        receive_exactly(ids[-1], models[-1], server, cache)
        received = operations.receive(ids[-1], local_transport=cache)
        assert operations.serialize(received) == serialized(models[-1])


def test_a_cache_from_before_models_trusts_a_root_only_with_its_closure(tmp_path, server, models):
    # Objects saved by name with no model, some of a closure missing: the root is not
    # returned (the receive asks the server); once whole, the root is declared a model.
    path = str(tmp_path / "old.db")
    root_id = operations.send(models[3], [transport(server)], use_default_cache=False)
    with objstash.Stash(path) as stash:
        stash.save_named([(i, t) for i, t in server.objects.items()])
        children = list(json.loads(server.objects[root_id])["__closure"])
        stash.remove_named(children[:3])
    with ObjstashTransport(path=path) as cache:
        assert cache.get_object(root_id) is None
        receive_exactly(root_id, models[3], server, cache)
    with ObjstashTransport(path=path) as cache:
        model = cache.stash.model(cache.stash.resolve(root_id))
        assert model is not None and model.complete
        assert cache.get_object(root_id) == server.objects[root_id]


def test_a_damaged_object_of_a_model_sends_the_receive_to_the_server(tmp_path, server, models):
    import sqlite3

    path = str(tmp_path / "cache.db")
    with ObjstashTransport(path=path, codec="gzip") as cache:
        root_id = operations.send(models[1], [cache, transport(server)])
        child = closure(cache, root_id)[7]
        key = cache.stash.resolve(child)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE objects SET data = randomblob(length(data)) WHERE key = ?", (bytes.fromhex(key),)
        )
    with ObjstashTransport(path=path) as cache:
        # No server: an error, never part of a model.
        with pytest.warns(Warning, match="damaged"):
            with pytest.raises(SpeckleException, match="Could not find the specified object"):
                operations.receive(root_id, local_transport=cache)
        # With one: the model sent, and whole in the cache again.
        receive_exactly(root_id, models[1], server, cache)
        assert cache.stash.verify().ok
        assert cache.stash.model(cache.stash.resolve(root_id)).complete


class _RemovedMidReceive(ObjstashTransport):
    """A transport whose model another process removes once the receive has read its root
    and one child: the moment an evicting or removing process beside a receive picks."""

    def __init__(self, path: str, root_id: str) -> None:
        super().__init__(path=path)
        self._root_id = root_id
        self._reads = 0

    def get_object(self, id: str):
        self._reads += 1
        if self._reads == 3:
            import subprocess
            import sys

            remove = (
                "import objstash, sys\n"
                "with objstash.Stash(sys.argv[1]) as stash:\n"
                "    assert stash.remove_model(stash.resolve(sys.argv[2]))\n"
            )
            subprocess.run([sys.executable, "-c", remove, self.stash.path, self._root_id], check=True)
            assert self.stash.get_named(self._root_id) is None, "the other process removed it"
        return super().get_object(id)


def test_a_receive_that_read_a_model_finishes_with_it_while_another_process_removes_it(
    tmp_path, models
):
    # The model's levels are detached and shared by many walls: the deserializer asks for
    # each of them again and again. Once its root was read, the receive is served the whole
    # model it swept, whatever another process does to the cache meanwhile.
    path = str(tmp_path / "cache.db")
    with ObjstashTransport(path=path) as cache:
        root_id = operations.send(models[2], [cache])
    with _RemovedMidReceive(path, root_id) as cache:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            received = operations.receive(root_id, local_transport=cache)
        assert cache._reads > 3
        assert operations.serialize(received) == serialized(models[2])


class _RemovingBeforeDeclare:
    """A stash whose `declare_model` first has another process remove one of the members:
    the moment between the transport's closure check and its declaration."""

    def __init__(self, stash, member: str) -> None:
        self._stash, self._member = stash, member

    def __getattr__(self, name):
        return getattr(self._stash, name)

    def declare_model(self, *args, **kwargs):
        import subprocess
        import sys

        remove = (
            "import objstash, sys\n"
            "with objstash.Stash(sys.argv[1]) as stash:\n"
            "    assert stash.remove(stash.resolve(sys.argv[2]))\n"
        )
        subprocess.run([sys.executable, "-c", remove, self._stash.path, self._member], check=True)
        return self._stash.declare_model(*args, **kwargs)


def test_an_older_caches_root_is_not_returned_when_a_member_goes_before_it_is_declared(
    tmp_path, server, models
):
    path = str(tmp_path / "old.db")
    root_id = operations.send(models[0], [transport(server)], use_default_cache=False)
    with objstash.Stash(path) as stash:
        stash.save_named([(i, t) for i, t in server.objects.items()])
    children = list(json.loads(server.objects[root_id])["__closure"])
    with ObjstashTransport(path=path) as cache:
        cache.stash = _RemovingBeforeDeclare(cache.stash, children[4])
        assert cache.get_object(root_id) is None, "its model lost a member: no root"
        cache.stash = cache.stash._stash
        receive_exactly(root_id, models[0], server, cache)


class _RemovedAfterCopy(ObjstashTransport):
    """A transport whose model another process removes as soon as a copy from the server
    has declared it, before the receive reads any of it."""

    def end_write(self) -> None:
        super().end_write()
        import subprocess
        import sys

        remove = (
            "import objstash, sys\n"
            "with objstash.Stash(sys.argv[1]) as stash:\n"
            "    assert stash.remove_model(stash.resolve(sys.argv[2]))\n"
        )
        root_id = self._members_root_id
        subprocess.run([sys.executable, "-c", remove, self.stash.path, root_id], check=True)


def test_a_receive_copied_from_the_server_finishes_with_it_while_another_process_removes_it(
    tmp_path, server, models
):
    root_id = operations.send(models[3], [transport(server)], use_default_cache=False)
    with _RemovedAfterCopy(path=str(tmp_path / "cache.db")) as cache:
        cache._members_root_id = root_id
        receive_exactly(root_id, models[3], server, cache)
        assert cache.stash.resolve(root_id) is None, "the other process removed the model"
