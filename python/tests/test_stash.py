"""The Python API over the library: round trips, names, errors, threads, processes."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

import objstash
from objstash import Stash


def objects(n: int, seed: int = 0) -> list[bytes]:
    """JSON of 200 to 250 bytes, repetitive enough that gzip shrinks it."""
    return [
        b'{"n": %d, "seed": %d, "pad": "%s"}' % (i, seed, b"xy" * (90 + i % 25)) for i in range(n)
    ]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "stash.db")


def test_values_in_a_file_are_chosen_when_a_stash_is_made(path):
    objs = objects(500)
    with Stash(path, values="file", max_size=64 << 20) as stash:
        assert stash.values_in == "file"
        keys = stash.save_all(objs)
        assert stash.get_many(keys) == objs
    assert os.path.getsize(path + "-values") > 0
    # A reopen keeps them where the stash was made to keep them, whatever it asks.
    with Stash(path, values="rows") as stash:
        assert stash.values_in == "file"
        assert stash.get(keys[9]) == objs[9]
        assert stash.verify().ok
    with Stash(str(path) + ".rows") as stash:
        assert stash.values_in == "rows"
    with pytest.raises(objstash.SettingsError, match="rows or file"):
        Stash(str(path) + ".bad", values="disk")


@pytest.mark.parametrize("layout", ["single", "bucketed"])
@pytest.mark.parametrize("durability", ["fast", "safe"])
def test_round_trip(path, layout, durability):
    objs = objects(2000)
    with Stash(path, layout=layout, durability=durability) as stash:
        keys = stash.save_all(objs)
        assert len(keys) == 2000 and all(len(k) == 64 for k in keys)
        assert stash.save(objs[0]) == keys[0]
        assert stash.get(keys[5]) == objs[5]
        assert stash.get(bytes.fromhex(keys[5])) == objs[5]  # 32 raw bytes work too
        assert stash.get_many(keys[:10] + ["0" * 64]) == objs[:10] + [None]
        assert keys[3] in stash and stash.contains(keys[3])
        assert stash.missing([keys[0], "f" * 64]) == ["f" * 64]
        assert stash.remove(keys[0]) is True
        assert stash.remove_all([keys[0], keys[1]]) == [False, True]
        assert len(stash) == 1998
        stats = stash.stats()
        assert (stats.objects, stats.layout, stats.durability) == (1998, layout, durability)
        assert stats.compression_ratio > 1.0
    with Stash(path, create=False) as stash:
        assert stash.get(keys[2]) == objs[2]
        report = stash.verify()
        assert report.ok and report.checked == 1998, str(report)


def test_text_is_stored_as_utf8(path):
    with Stash(path) as stash:
        key = stash.save("Wand – Geschoss 2 ✓")
        assert stash.get(key) == "Wand – Geschoss 2 ✓".encode()
        assert key == stash.save("Wand – Geschoss 2 ✓".encode())


def test_names(path):
    with Stash(path) as stash:
        keys = stash.save_named([("wall", b"W"), (b"\x00bin", b"B"), ("also wall", b"W")])
        assert keys[0] == keys[2]
        assert stash.get_named("wall") == b"W"
        assert stash.get_named(b"\x00bin") == b"B"
        assert stash.get_named("nope") is None
        assert stash.get_many_named(["wall", "nope", "also wall"]) == [b"W", None, b"W"]
        assert stash.resolve("wall") == keys[0]
        assert stash.resolve_many(["wall", "nope"]) == [keys[0], None]
        assert stash.missing_named(["wall", "nope", b"zz"]) == ["nope", b"zz"]
        assert stash.remove_named(["wall", "wall"]) == [True, False]
        assert stash.get(keys[0]) == b"W", "the object stays"
        assert stash.stats().names == 2
        stash.remove(keys[0])
        assert stash.get_named("also wall") is None, "removing an object drops its names"
        assert stash.verify().names == 1


def test_errors_are_a_hierarchy(path, tmp_path):
    with pytest.raises(objstash.NotFoundError):
        Stash(str(tmp_path / "absent.db"), create=False)
    text = tmp_path / "text.db"
    text.write_text("not a database, just text that is long enough " * 10)
    with pytest.raises(objstash.NotAStashError):
        Stash(str(text))
    with pytest.raises(objstash.SettingsError):
        Stash(path, layout="sideways")
    stash = Stash(path)
    for bad in ["zz", "0" * 63, b"short", 42]:
        with pytest.raises(objstash.BadKeyError):
            stash[bad]
        with pytest.raises(objstash.BadKeyError):
            stash.contains(bad)
        # As a mapping's get and `in`: what is not a key is not stored.
        assert stash.get(bad) is None and bad not in stash
    with pytest.raises(ValueError):  # BadKeyError is a ValueError too
        stash["zz"]
    with pytest.raises(objstash.BadNameError):
        stash.save_named([("", b"x")])
    with pytest.raises(objstash.BadNameError):
        stash.get_named("n" * (objstash.MAX_NAME_LEN + 1))
    with pytest.raises(TypeError):
        stash.save(12345)
    with pytest.raises(TypeError):
        stash.save_all([b"fine", None])
    assert len(stash) == 0, "nothing of a refused call is stored"
    stash.close()
    stash.close()  # twice is fine
    assert stash.closed
    with pytest.raises(objstash.ClosedError):
        stash.get("0" * 64)
    small = Stash(str(tmp_path / "small.db"), max_object_size=10)
    with pytest.raises(objstash.TooLargeError):
        small.save(b"x" * 11)
    small.close()
    with pytest.raises(objstash.SettingsError):
        Stash(path, durability="safe")  # the stash records fast
    assert issubclass(objstash.CorruptError, objstash.Error)


def test_a_corrupt_object_is_an_error_never_bytes(path):
    with Stash(path) as stash:
        key = stash.save(b'{"precious": true}')
        stash.save_named([("precious", b'{"precious": true}')])
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM objects").fetchone()
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x40
    db.execute("UPDATE objects SET data = ?", (bytes(flipped),))
    db.commit()
    db.close()
    with Stash(path) as stash:
        with pytest.raises(objstash.CorruptError):
            stash.get(key)
        with pytest.raises(objstash.CorruptError):
            stash.get_named("precious")
        report = stash.verify()
        assert not report.ok and report.corrupt == [key]


def test_threads_share_a_handle(path):
    stash = Stash(path)
    errors = []

    def work(seed):
        try:
            objs = objects(3000, seed)
            keys = stash.save_all(objs)
            named = [(f"{seed}/{i}", o) for i, o in enumerate(objs[:500])]
            stash.save_named(named)
            assert stash.get_many(keys) == objs
            assert stash.get_many_named([n for n, _ in named]) == objs[:500]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = stash.stats()
    assert stats.objects == 6 * 3000 and stats.names == 6 * 500
    assert stash.verify().ok
    stash.close()


HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE objstash_meta SET value = value WHERE name = 'codec'")
print("holding", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


def test_the_gil_is_released_while_a_batch_call_waits(path):
    """A thread inside ``save_all`` that waits (another process holds the write lock, so
    the writer waits and the queue to it fills) lets other Python threads run: here the
    one that lets the other process go. Were the GIL held through the call, that thread
    could not run until the call gave up (``BusyError`` after the busy timeout)."""
    stash = Stash(path)
    stash.save(b"first")
    stash.flush()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "holding"
    inside = threading.Event()
    answers: list = []

    def given():
        # One chunk of the call, more objects than the queue to the writer holds.
        yield from objects(6000, 7)
        inside.set()  # the call has every object: its work is under way

    def saver():
        try:
            answers.append(stash.save_all(given()))
        except BaseException as e:  # reported below
            answers.append(e)

    thread = threading.Thread(target=saver)
    thread.start()
    assert inside.wait(60)
    holder.stdin.write("go\n")
    holder.stdin.flush()
    thread.join(120)
    assert holder.wait(60) == 0
    assert isinstance(answers[0], list) and len(answers[0]) == 6000, answers
    assert stash.missing(answers[0]) == []
    stash.close()


CHILD = """
import sys
from objstash import Stash
path, seed = sys.argv[1], int(sys.argv[2])
with Stash(path) as stash:
    objs = [b'{"proc": %d, "i": %d}' % (seed, i) for i in range(3000)]
    stash.save_named([("p%d/%d" % (seed, i), o) for i, o in enumerate(objs)])
    stash.flush()
    print(len(stash.missing_named(["p%d/%d" % (s, 0) for s in range(4)])))
"""


def test_processes_share_a_stash(path):
    Stash(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, path, str(seed)], stdout=subprocess.PIPE)
        for seed in range(4)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
    with Stash(path) as stash:
        names = [f"p{s}/{i}" for s in range(4) for i in range(3000)]
        got = stash.get_many_named(names)
        for name, value in zip(names, got):
            s, i = name[1:].split("/")
            assert value == b'{"proc": %d, "i": %d}' % (int(s), int(i))
        assert stash.stats().names == 12000
        assert stash.verify().ok


def test_keys_are_blake3_hex(path):
    with Stash(path) as stash:
        key = stash.save(b"abc")
    # blake3("abc") from the reference test vectors
    assert key == "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
    assert hashlib.sha256(b"abc").hexdigest() != key


def test_a_capped_stash_evicts_least_recently_used_and_keeps_pins(tmp_path):
    path = tmp_path / "capped.objstash"
    objs = [os.urandom(16 * 1024) for _ in range(60)]
    with Stash(path, max_size=64 << 20, eviction_grace=0) as s:
        assert s.max_size == 64 << 20
        pinned = s.save_pinned(objs[:10])
        # Expiry by last use: the older group goes, the newer and the pinned stay. The age
        # given puts the cut between the groups' save times, as the clock measured them;
        # a run where the call itself took longer than half the gap between the groups
        # cannot tell them apart, and is done again.
        for _ in range(20):
            old = s.save_all(objs[10:35])
            s.flush()
            saved_old = time.time()
            while time.time() < saved_old + 0.05:
                time.sleep(0.01)
            saving_new = time.time()
            new = s.save_all(objs[35:])
            s.flush()
            before = time.time()
            objects, stored = s.evict_unused_since(before - (saved_old + saving_new) / 2)
            if time.time() - before < (saving_new - saved_old) / 2:
                break
            s.remove_all(old + new)  # the cut may have fallen anywhere: start again
        assert objects == 25 and stored >= 25 * 16 * 1024
        assert s.missing(old) == old
        assert s.missing(new) == [] and s.missing(pinned) == []
        assert s.pin([pinned[0], "00" * 32]) == [True, False]
        # A trim to nothing takes every unpinned object, once the clock has passed their
        # last use (a use in the trim's own millisecond is recent, with no grace period).
        used = int(time.time() * 1000)
        while int(time.time() * 1000) <= used:
            time.sleep(0.001)
        assert s.trim_to(0)[0] == 25
        stats = s.stats()
        assert (stats.objects, stats.pinned_objects) == (10, 10)
        assert stats.pinned_bytes == stats.stored_bytes
        assert stats.oldest_use is None  # every object left is pinned
        s.set_max_size(1024)
        assert s.stats().over_cap
        assert s.unpin(pinned[:5]) == [True] * 5
        s.set_max_size(None)
        assert s.max_size is None
        assert s.verify().ok
    with pytest.raises(ValueError):
        Stash(path, eviction_grace=-1)
    with pytest.raises(ValueError):
        Stash(path, use_resolution=-1)
    with pytest.raises(objstash.SettingsError):
        Stash(path, max_size=0)
