"""The objstash transport driven by real specklepy: sends and receives of generated
models compared with specklepy's own SQLiteTransport and MemoryTransport, and the
transport interface as specklepy's serializer and its server transport use it."""

from __future__ import annotations

import json
import os
import sqlite3
import warnings

import pytest

pytest.importorskip("specklepy")

from specklepy.api import operations  # noqa: E402
from specklepy.transports.memory import MemoryTransport  # noqa: E402
from specklepy.transports.sqlite import SQLiteTransport  # noqa: E402

import objstash  # noqa: E402
from objstash import Stash  # noqa: E402
from objstash.speckle import ObjstashTransport  # noqa: E402
from speckle_model import base, build_model  # noqa: E402

# specklepy 2026.9 marks its JSON pipeline deprecated (in favour of parquet bundles); it is
# the pipeline every transport serves, and the one tested here.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def closure_ids(transport, root_id: str) -> list[str]:
    root = json.loads(transport.get_object(root_id))
    return [root_id] + list(root.get("__closure", {}).keys())


@pytest.fixture(scope="module")
def model():
    return build_model(4800)


def test_a_large_model_round_trips_like_sqlite_and_memory(model, tmp_path):
    memory = MemoryTransport()
    sqlite = SQLiteTransport(base_path=str(tmp_path / "sqlite"))
    ours = ObjstashTransport(base_path=str(tmp_path / "objstash"))
    ids = {}
    for name, transport in [("memory", memory), ("sqlite", sqlite), ("objstash", ours)]:
        ids[name] = operations.send(model, [transport], use_default_cache=False)
    assert ids["objstash"] == ids["sqlite"] == ids["memory"]
    root_id = ids["memory"]
    everything = closure_ids(memory, root_id)
    assert len(everything) >= 10_000, len(everything)
    assert len(memory.objects) == len(everything)
    # Every object byte for byte as the other transports hold it.
    ours_objects = ours.get_objects(everything)
    for obj_id, text in zip(everything, ours_objects):
        assert text == memory.objects[obj_id] == sqlite.get_object(obj_id)
    assert all(ours.has_objects(everything).values())
    # Received back, the three give the same object.
    received = {
        name: operations.receive(root_id, local_transport=t)
        for name, t in [("memory", memory), ("sqlite", sqlite), ("objstash", ours)]
    }
    serialized = {name: operations.serialize(base) for name, base in received.items()}
    assert serialized["objstash"] == serialized["sqlite"] == serialized["memory"]
    # An id computed without detaching differs from the sent root's id, for any transport.
    assert received["objstash"].get_id() == model.get_id()
    assert len(received["objstash"]["@elements"]) == 4800
    stats = ours.stash.stats()
    assert stats.names == len(everything) and stats.objects <= len(everything)
    assert ours.stash.verify().ok
    sqlite.close()
    ours.close()


def test_a_closed_transport_reopens_with_everything(model, tmp_path):
    small = build_model(40, seed=3)
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        root_id = operations.send(small, [t], use_default_cache=False)
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        received = operations.receive(root_id, local_transport=t)
        assert received.get_id() == small.get_id()
        assert received["@elements"][2]["@level"].name == "Level 2"


def test_a_cache_with_its_values_in_a_file_round_trips_and_reopens(tmp_path):
    small = build_model(40, seed=4)
    with ObjstashTransport(base_path=str(tmp_path), values="file") as t:
        assert t.stash.values_in == "file"
        root_id = operations.send(small, [t], use_default_cache=False)
    assert os.path.getsize(tmp_path / "Objects.objstash-values") > 0
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        assert t.stash.values_in == "file"
        received = operations.receive(root_id, local_transport=t)
        assert received.get_id() == small.get_id()
        assert t.stash.verify().ok


def test_detached_and_chunked_members_survive(tmp_path):
    obj = base(name="detach and chunk")
    obj["@detach"] = base(name="detached")
    obj["@detached_list"] = [base(name=f"item {i}") for i in range(5)]
    obj["@(100)colours"] = list(range(250))
    obj["@()default_chunk"] = [1.5] * 10
    obj["nested"] = base(inner=base(deeper=[1, 2, 3]))
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        root_id = operations.send(obj, [t], use_default_cache=False)
        root = json.loads(t.get_object(root_id))
        assert root["@detach"]["speckle_type"] == "reference"
        assert len(root["@(100)colours"]) == 3
        received = operations.receive(root_id, local_transport=t)
    assert received.get_id() == obj.get_id()
    assert received["@(100)colours"] == list(range(250))
    assert received["@detached_list"][4].name == "item 4"
    assert received["nested"]["inner"]["deeper"] == [1, 2, 3]


def test_transport_interface(tmp_path):
    t = ObjstashTransport(base_path=str(tmp_path), name="cache")
    assert t.name == "cache"
    t.begin_write()
    t.save_object("a" * 32, '{"id": "aaa", "speckle_type": "Base"}')
    # Read its own writes before end_write, as the serializer may.
    assert t.get_object("a" * 32) == '{"id": "aaa", "speckle_type": "Base"}'
    assert t.has_objects(["a" * 32, "b" * 32]) == {"a" * 32: True, "b" * 32: False}
    t.end_write()
    assert t.saved_obj_count == 1
    assert t.get_object("a" * 32) is not None and t.get_object("b" * 32) is None
    # Text with characters beyond ASCII comes back as it went in.
    t.save_object("c" * 32, '{"name": "Wand – Geschoss 2 ✓"}')
    t.end_write()
    assert t.get_object("c" * 32) == '{"name": "Wand – Geschoss 2 ✓"}'
    source = MemoryTransport()
    source.save_object("d" * 32, '{"from": "memory"}')
    t.save_object_from_transport("d" * 32, source)
    assert t.get_object("d" * 32) == '{"from": "memory"}'
    t.close()


def test_copy_object_and_children_fills_another_transport(tmp_path):
    model = build_model(60, seed=5)
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        root_id = operations.send(model, [t], use_default_cache=False)
        target = MemoryTransport()
        # The objstash cache acts as the remote a receive copies from.
        received = operations.receive(root_id, remote_transport=t, local_transport=target)
        assert received.get_id() == model.get_id()
        assert set(target.objects) == set(closure_ids(t, root_id))
        with pytest.raises(Exception, match="has no object"):
            t.copy_object_and_children("f" * 32, MemoryTransport())


def test_a_damaged_object_is_an_error_not_json(tmp_path):
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        t.save_object("e" * 32, '{"wall": "precious"}')
        t.end_write()
        path = str(t.stash.path)
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM objects").fetchone()
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x01
    db.execute("UPDATE objects SET data = ?", (bytes(damaged),))
    db.commit()
    db.close()
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        with pytest.raises(objstash.CorruptError):
            t.get_object("e" * 32)


def test_an_existing_stash_can_back_the_transport(tmp_path):
    stash = objstash.Stash(str(tmp_path / "shared.db"), durability="safe")
    with ObjstashTransport(stash=stash) as t:
        root_id = operations.send(build_model(8, seed=9), [t], use_default_cache=False)
    assert not stash.closed, "the transport leaves a stash it was given open"
    assert stash.get_named(root_id) is not None
    stash.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ObjstashTransport(path=str(tmp_path / "shared.db")).get_object(root_id)


def test_read_ahead_serves_any_order_and_stays_bounded(tmp_path, monkeypatch):
    import objstash.speckle as speckle

    monkeypatch.setattr(speckle, "COPY_CHUNK", 7)
    monkeypatch.setattr(speckle, "READ_AHEAD_MAX", 20)
    model = build_model(150, seed=11)
    memory = MemoryTransport()
    root_id = operations.send(model, [memory], use_default_cache=False)
    children = list(json.loads(memory.objects[root_id])["__closure"])
    # Objects cached without a model (as by a transport from before models), read through
    # a handle that cannot declare one: the children are read ahead a chunk at a time.
    path = str(tmp_path / "loose.db")
    with Stash(path) as stash:
        stash.save_named(list(memory.objects.items()))
    with ObjstashTransport(stash=Stash(path, read_only=True)) as t:
        assert t.get_object(root_id) == memory.objects[root_id]
        # Against the order the read ahead guesses: every answer still right.
        for child in reversed(children):
            assert t.get_object(child) == memory.objects[child]
            assert len(t._fetched) <= 20
    # A model's root reads the whole model at once, served as often as asked until the
    # next model is read.
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        operations.send(model, [t], use_default_cache=False)
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        assert t.get_object(root_id) == memory.objects[root_id]
        assert len(t._model) == len(children)
        for _ in range(2):
            for child in reversed(children):
                assert t.get_object(child) == memory.objects[child]
        assert len(t._model) == len(children)
        # A name saved again is not served stale from the read ahead.
        t.get_object(root_id)
        t.get_object(children[0])
        t.save_object(children[1], '{"changed": true}')
        assert t.get_object(children[1]) == '{"changed": true}'
        t.end_write()
        assert t.get_object(children[1]) == '{"changed": true}'
        t.save_object(children[1], memory.objects[children[1]])
        t.end_write()
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        received = operations.receive(root_id, local_transport=t)
        assert len(received["@elements"]) == 150


def test_a_failed_background_save_is_raised_not_lost(tmp_path, monkeypatch):
    import objstash.speckle as speckle

    monkeypatch.setattr(speckle, "BATCH_OBJECTS", 3)
    stash = objstash.Stash(str(tmp_path / "small.db"), max_object_size=100)
    t = ObjstashTransport(stash=stash)
    t.save_object("a" * 32, '{"fits": true}')
    t.save_object("b" * 32, '{"too large": "' + "x" * 200 + '"}')
    t.save_object("c" * 32, '{"fits": "too"}')  # the third hands the batch over
    with pytest.raises(Exception, match="could not save objects.*larger than"):
        t.end_write()
    # The error is reported once; what was saved before and after still works.
    t.save_object("d" * 32, '{"later": 1}')
    t.end_write()
    assert t.get_object("d" * 32) == '{"later": 1}'
    t.close()
    stash.close()


def test_reads_see_batches_the_background_saver_still_holds(tmp_path, monkeypatch):
    import objstash.speckle as speckle

    monkeypatch.setattr(speckle, "BATCH_OBJECTS", 50)
    with ObjstashTransport(base_path=str(tmp_path)) as t:
        texts = {f"{i:032x}": '{"i": %d}' % i for i in range(2000)}
        for obj_id, text in texts.items():
            t.save_object(obj_id, text)
            # Whatever the saver has or has not done yet, every object saved reads back.
            if int(obj_id, 16) % 97 == 0:
                probe = list(texts)[: int(obj_id, 16) + 1][::37]
                assert t.get_objects(probe) == [texts[p] for p in probe]
                assert all(t.has_objects(probe).values())
        t.end_write()
        assert t.stash.stats().names == 2000


def test_a_new_cache_is_zstd_dict_and_an_old_one_keeps_its_codec(tmp_path):
    with ObjstashTransport(base_path=str(tmp_path / "new")) as t:
        assert t.stash.codec == "zstd-dict"
    objstash.Stash(str(tmp_path / "old.objstash"), codec="gzip").close()
    with ObjstashTransport(path=str(tmp_path / "old.objstash")) as t:
        assert t.stash.codec == "gzip"


def test_a_roots_closure_is_read_as_json_reads_it(model):
    """The transport reads a root's ``__closure`` in Rust, without the GIL: the ids that
    ``json.loads`` finds, whatever else the root holds; a root that is not JSON raises."""
    from objstash.speckle import _closure_ids

    memory = MemoryTransport()
    root_id = operations.send(model, [memory], use_default_cache=False)
    text = memory.objects[root_id]
    assert sorted(_closure_ids(text)) == sorted(json.loads(text)["__closure"])
    assert len(_closure_ids(text)) > 1000
    odd = json.dumps({"a": [1, {"__closure": {"x": 1}}], "__closure": {"é\u2603": 2, "b": 1}})
    assert sorted(_closure_ids(odd)) == ["b", "é\u2603"]
    assert _closure_ids('{"id": "leaf"}') == [] and _closure_ids('{"__closure": null}') == []
    for bad in ["not json", "[1, 2]", '{"__closure": ["a"]}']:
        with pytest.raises(ValueError):
            _closure_ids(bad)
