"""What a Python user expects at the edges: no silent wrong results for a ``str`` where a
sequence belongs, errors of the right classes with messages in Python's words, a
mapping's reads, and every bytes-like type where bytes are accepted.

Found by a review as a new user: ``save_all("abc")`` stored three one-character objects,
``get_many_named("wall-17")`` returned seven ``None``s, a read-only handle "saved" an
object already stored, ``5 in stash`` raised, a read-only open of another program's
SQLite file raised the base ``Error`` and left lock files beside it, and messages named
``StashBuilder::`` methods.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import pytest

import objstash
from objstash import Stash


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "stash.db")


def listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_str_where_a_sequence_belongs_is_a_type_error(path):
    with Stash(path) as stash:
        key = stash.save(b"x")
        for call, arg in [
            (stash.save_all, "abc"),
            (stash.save_all, b"abc"),
            (stash.save_pinned, "abc"),
            (stash.get_many, key),
            (stash.missing, key),
            (stash.remove_all, key),
            (stash.pin, key),
            (stash.get_many_named, "wall-17"),
            (stash.resolve_many, "wall-17"),
            (stash.missing_named, "wall-17"),
            (stash.remove_named, "wall-17"),
            (stash.save_named, "ab"),
        ]:
            with pytest.raises(TypeError):
                call(arg)
        assert len(stash) == 1, "nothing of a refused call is stored"
        assert stash.get_many_named(["wall-17"]) == [None]


def test_a_read_only_handle_refuses_every_save(path):
    with Stash(path) as writer:
        key = writer.save(b"stored")
    with Stash(path, read_only=True) as reader:
        assert reader.read_only
        assert reader.get(key) == b"stored"
        for save in [
            lambda: reader.save(b"stored"),
            lambda: reader.save_all([b"stored"]),
            lambda: reader.save_named([("n", b"stored")]),
            lambda: reader.save(b"new"),
        ]:
            with pytest.raises(objstash.ReadOnlyError):
                save()
    with Stash(path) as writer:
        assert not writer.read_only


def test_another_programs_sqlite_file_is_not_a_stash_and_is_left_alone(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    blank = tmp_path / "blank.db"
    conn = sqlite3.connect(blank)
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    for target in [other, blank]:
        for read_only in [False, True]:
            with pytest.raises(objstash.NotAStashError):
                Stash(str(target), read_only=read_only)
    assert other.read_bytes() == before
    assert listing(tmp_path) == ["blank.db", "other.db"], "nothing is left beside them"


def test_messages_use_python_words(path):
    with Stash(path, max_object_size=10) as stash:
        with pytest.raises(objstash.TooLargeError) as too_large:
            stash.save_all([b"ok", b"x" * 11])
        assert "max_object_size=" in str(too_large.value)
        assert len(stash) == 0, "nothing of the call is stored"
    with pytest.raises(objstash.SettingsError) as mismatch:
        Stash(path, durability="safe")
    assert "reconfigure=True" in str(mismatch.value)
    with pytest.raises(objstash.NotFoundError) as absent:
        Stash(path + ".absent", create=False)
    assert isinstance(absent.value, FileNotFoundError)
    assert "create=True" in str(absent.value)
    for error in [too_large.value, mismatch.value, absent.value]:
        text = str(error)
        assert "StashBuilder" not in text and "objstash config" not in text, text
    with Stash(path, durability="safe", reconfigure=True) as stash:
        assert stash.durability == "safe"


def test_in_is_false_for_anything_that_is_not_a_stored_key(path):
    with Stash(path) as stash:
        key = stash.save(b"x")
        assert key in stash and bytes.fromhex(key) in stash
        for other in [5, None, "hello", b"short", 1.5, object(), "0" * 64]:
            assert other not in stash
        with pytest.raises(objstash.BadKeyError):
            stash.contains("hello")  # the explicit method still says what is wrong


def test_names_from_a_mapping(path):
    with Stash(path) as stash:
        keys = stash.save_named({"n1": b"v1", "n2": "v2"})
        assert stash.get_many_named(["n1", "n2"]) == [b"v1", b"v2"]
        assert stash.resolve("n2") == keys[1]
        assert stash.save_named([("n3", b"v3")]) == [stash.resolve("n3")]


def test_negative_sizes_and_counts_are_value_errors(path, tmp_path):
    for kwargs in [
        {"max_object_size": -1},
        {"threads": -2},
        {"max_size": -5},
        {"eviction_grace": -1},
        {"busy_timeout": -1},
    ]:
        with pytest.raises(ValueError):
            Stash(str(tmp_path / "n.db"), **kwargs)
    with Stash(path) as stash:
        for call in [lambda: stash.trim_to(-1), lambda: stash.set_max_size(-5)]:
            with pytest.raises(ValueError):
                call()


def test_mapping_reads(path):
    with Stash(path) as stash:
        keys = stash.save_all([b"a", b"b", b"c"])
        absent = "0" * 64
        assert stash.get(keys[0]) == b"a"
        assert stash.get(absent) is None
        assert stash.get(absent, b"default") == b"default"
        assert stash[keys[1]] == b"b"
        with pytest.raises(KeyError):
            stash[absent]
        assert sorted(stash) == sorted(keys)
        assert sorted(stash.keys()) == sorted(keys)
        assert len(list(iter(stash))) == 3


def test_every_bytes_like_type_is_accepted(path, tmp_path):
    with Stash(path) as stash:
        key = stash.save(bytearray(b"from a bytearray"))
        assert stash.save(memoryview(b"from a bytearray")) == key
        assert stash.get(bytearray(bytes.fromhex(key))) == b"from a bytearray"
        assert stash.get(memoryview(bytes.fromhex(key))) == b"from a bytearray"
        keys = stash.save_all([b"b", bytearray(b"ba"), memoryview(b"mv"), "s"])
        assert stash.get_many(keys) == [b"b", b"ba", b"mv", b"s"]
        stash.save_named([(bytearray(b"name"), memoryview(b"value"))])
        assert stash.get_named(b"name") == b"value"
    raw = os.fsencode(str(tmp_path / "bytes-path.db"))
    with Stash(raw) as stash:
        stash.save(b"x")
    assert os.path.exists(os.fsdecode(raw))


# As root, permissions do not apply: the checks run in a child demoted to nobody, which
# imports everything first (the interpreter's own files may be out of nobody's reach).
UNWRITABLE = """
import os, sys
import objstash
from objstash import Stash
if os.getuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
locked = sys.argv[1]
try:
    Stash(os.path.join(locked, "new.db"))
    print("opened")
except objstash.PermissionDeniedError as e:
    assert isinstance(e, PermissionError) and isinstance(e, objstash.Error)
    print("permission")
with Stash(os.path.join(locked, "existing.db")) as stash:
    print("read_only", stash.read_only, stash.get(sys.argv[2]))
"""


def test_an_unwritable_directory():
    # In /tmp, which every user can reach (a test's own directory may not be).
    top = tempfile.mkdtemp(prefix="objstash-unwritable-")
    try:
        locked = os.path.join(top, "locked")
        os.mkdir(locked)
        with Stash(os.path.join(locked, "existing.db")) as stash:
            key = stash.save(b"kept")
        os.chmod(top, 0o755)
        for name in os.listdir(locked):
            os.chmod(os.path.join(locked, name), 0o444)
        os.chmod(locked, 0o555)
        done = subprocess.run(
            [sys.executable, "-c", UNWRITABLE, locked, key],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.split("\n")[:2]
        assert lines == ["permission", "read_only True b'kept'"], done.stdout
    finally:
        os.chmod(locked, 0o755)
        shutil.rmtree(top)


def test_a_stash_reads_as_a_mapping_reads_and_crosses_to_a_spawned_worker(path):
    """Found by a new user: ``stash.values()`` raised "'str' object is not callable",
    ``get("wall-17", None)`` raised ``BadKeyError`` while ``"wall-17" in stash`` was
    False, ``save_file`` of a missing path raised a plain ``OSError``,
    ``max_object_size`` was 18446744073709551615 for "no limit", ``print(stats())``
    showed a dataclass repr, and a ``Stash`` could not be pickled for spawn workers."""
    import concurrent.futures
    import multiprocessing
    import operator
    import pickle

    with Stash(path) as stash:
        keys = stash.save_all([b"one", b"two", b"three"])
        assert sorted(stash.values()) == [b"one", b"three", b"two"]
        assert dict(stash.items()) == {k: v for k, v in zip(keys, [b"one", b"two", b"three"])}
        assert stash.values_in == "rows"
        assert "wall-17" not in stash
        assert stash.get("wall-17", None) is None
        assert stash.get("wall-17", b"default") == b"default"
        with pytest.raises(objstash.BadKeyError):
            stash["wall-17"]
        with pytest.raises(FileNotFoundError):
            stash.save_file(os.path.join(os.path.dirname(path), "no-such-file"))
        assert stash.max_object_size is None and stash.max_size is None
        assert str(stash.stats()).startswith("objects"), str(stash.stats())
        stash.flush()
        again = pickle.loads(pickle.dumps(stash))
        assert again.get(keys[0]) == b"one"
        again.close()
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
            got = pool.submit(operator.methodcaller("get", keys[1]), stash).result()
        assert got == b"two"
    with Stash(path, max_object_size=1 << 20) as stash:
        assert stash.max_object_size == 1 << 20
