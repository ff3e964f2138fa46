"""Large objects from Python: saved from a path or a binary file object, read back as a
file object (``shutil.copyfileobj``, ranges), damage raised at its chunk, Ctrl-C during a
save (a real SIGINT), and a reader carried across a real fork."""

from __future__ import annotations

import io
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

from objstash import CorruptError, Stash
from test_processes import HANG, wait_child

#: Over the one-row limit (8 MiB): stored in chunks.
LARGE = 20 << 20


def noise(seed: int, n: int) -> bytes:
    """Deterministic incompressible bytes (stored as they are)."""
    return random.Random(seed).randbytes(n)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "stash.db")


def test_a_large_file_round_trips_from_a_path_and_a_file_object(path, tmp_path):
    data = noise(1, LARGE + 123)
    source = tmp_path / "model.parquet"
    source.write_bytes(data)
    with Stash(path) as stash:
        key = stash.save_file(source)
        assert stash.save_file(str(source)) == key
        with open(source, "rb") as f:
            assert stash.save_file(f, name="model") == key
        assert stash.resolve("model") == key
        stats = stash.stats()
        assert stats.objects == 1 and stats.chunks > 1, stats
        reader = stash.open(key)
        assert reader is not None and len(reader) == len(data) and reader.key == key
        copy = io.BytesIO()
        shutil.copyfileobj(reader, copy)
        assert copy.getvalue() == data
        assert stash.get(key) == data
        # Ranges: seek and read only what is asked.
        with stash.open(key) as reader:
            reader.seek(LARGE // 2)
            assert reader.read(1000) == data[LARGE // 2 : LARGE // 2 + 1000]
            assert reader.tell() == LARGE // 2 + 1000
            reader.seek(-10, 2)
            buf = bytearray(64)
            assert reader.readinto(buf) == 10
            assert bytes(buf[:10]) == data[-10:]
            assert reader.read() == b""
        assert reader.closed
        with pytest.raises(ValueError):
            reader.read(1)
        assert stash.open("00" * 32) is None
        # A small object through the same call is one row.
        small = stash.save_file(io.BytesIO(b"small"))
        assert stash.get(small) == b"small"
        assert stash.verify().ok


def test_a_file_object_that_gives_text_is_refused(path):
    with Stash(path) as stash:
        with pytest.raises(ValueError, match="binary"):
            stash.save_file(io.StringIO("text"))
        assert len(stash) == 0


def test_a_damaged_chunk_raises_corrupt_error_at_that_chunk(path):
    data = noise(2, LARGE)
    with Stash(path) as stash:
        key = stash.save(data)
    at = LARGE // 2
    conn = sqlite3.connect(path)
    rowid, stored = conn.execute(
        "SELECT rowid, data FROM objstash_chunks WHERE instr(data, ?) > 0", (data[at : at + 64],)
    ).fetchone()
    offset = stored.find(data[at : at + 64])
    damaged = bytearray(stored)
    damaged[offset] ^= 1
    conn.execute("UPDATE objstash_chunks SET data = ? WHERE rowid = ?", (bytes(damaged), rowid))
    conn.commit()
    conn.close()
    with Stash(path) as stash:
        reader = stash.open(key)
        assert reader is not None
        before = reader.read(at - (1 << 20))
        assert before == data[: len(before)]
        with pytest.raises(CorruptError, match=key):
            while reader.read(1 << 20):
                pass
        with pytest.raises(CorruptError):
            stash.get(key)


ENDLESS = """
import sys
# A shell's background job starts with SIGINT ignored, and Python then leaves it so.
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
from objstash import Stash

class Endless:
    def __init__(self):
        self.reads = 0
        self.state = 1
    def read(self, n):
        self.reads += 1
        if self.reads == 40:
            print("inside", flush=True)
        out = bytearray()
        while len(out) < n:
            self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2**64
            out += self.state.to_bytes(8, "little") * 512
        return bytes(out[:n])

stash = Stash(sys.argv[1])
try:
    stash.save_file(Endless())
    print("completed", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
stash.flush()
stats = stash.stats()
print("objects", stats.objects, "chunks", stats.chunks, flush=True)
stash.close()
"""


def test_ctrl_c_stops_a_save_from_a_file_object_and_keeps_nothing_of_it(path):
    child = subprocess.Popen(
        [sys.executable, "-c", ENDLESS, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "inside"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=HANG)
    lines = out.split("\n")
    assert lines[0] == "interrupted", (out, err)
    assert lines[1] == "objects 0 chunks 0", (out, err)
    with Stash(path) as stash:
        report = stash.verify()
        assert report.ok and len(stash) == 0, report


def test_a_reader_goes_on_in_both_processes_across_a_fork(path):
    data = noise(3, LARGE)
    stash = Stash(path)
    key = stash.save(data)
    reader = stash.open(key)
    assert reader is not None
    first = reader.read(LARGE // 3)
    pid = os.fork()
    if pid == 0:
        try:
            rest = reader.read()
            ok = first + rest == data and stash.get(key) == data
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    rest = reader.read()
    assert first + rest == data
    assert wait_child(pid) == 0
    stash.close()
