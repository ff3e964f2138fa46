"""objstash beside its peers on the same objects, in one run, rounds alternating.

    bench/peers/run.sh [--elements 44500] [--rounds 3]

The objects: a generated model (python/tests/speckle_model.py, about 100,000 objects at
the default size) serialized by specklepy, as a Speckle send would store them. Each system
starts empty in a directory of its own and is timed on:
- save: every object, as the system's users write them (specklepy's SQLiteTransport:
  begin_write, save_object for each, end_write; diskcache: set of each in one
  transaction; objstash: save_all in calls of 10,000 then flush; cacache-rs: write_sync
  of each);
- get: every object by its key or id on one thread, in a shuffled order, after one
  warm-up pass (the OS page cache warm);
- get_many: objstash's get_many in calls of 1,000 (specklepy and diskcache have no batch
  read: their figure is their get loop's);
- bytes on disk: every file the system left, after it closed.
objstash runs through its Rust library (the Rust half, bench/src/bin/peers.rs) and through
the Python package; one of its rows reads without the memory map of the default (diskcache
maps 64 MiB too). Medians of the rounds; ratios against SQLiteTransport, each the median
over rounds of the ratio within a round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "tests"))

from specklepy.api import operations  # noqa: E402
from specklepy.transports.memory import MemoryTransport  # noqa: E402
from specklepy.transports.sqlite import SQLiteTransport  # noqa: E402

import diskcache  # noqa: E402
import objstash  # noqa: E402
from speckle_model import build_model  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def shuffled(n: int) -> list[int]:
    order = list(range(n))
    random.Random(7).shuffle(order)
    return order


def timed_gets(get, ids: list, order: list[int]) -> float:
    """Objects/s of the second of two passes of `get` over `ids` in `order`."""
    rate = 0.0
    for _ in range(2):
        start = time.perf_counter()
        for i in order:
            if get(ids[i]) is None:
                raise RuntimeError(f"{ids[i]} missing")
        rate = len(order) / (time.perf_counter() - start)
    return rate


def specklepy_sqlite(items, d):
    t = SQLiteTransport(base_path=d, scope="bench")
    start = time.perf_counter()
    t.begin_write()
    for i, s in items:
        t.save_object(i, s)
    t.end_write()
    save = len(items) / (time.perf_counter() - start)
    ids = [i for i, _ in items]
    get = timed_gets(t.get_object, ids, shuffled(len(ids)))
    t.close()
    return {"save": save, "get": get, "get_many": get, "bytes": dir_bytes(d)}


def python_diskcache(items, d):
    cache = diskcache.Cache(d)
    start = time.perf_counter()
    with cache.transact():
        for i, s in items:
            cache.set(i, s)
    save = len(items) / (time.perf_counter() - start)
    ids = [i for i, _ in items]
    get = timed_gets(cache.get, ids, shuffled(len(ids)))
    cache.close()
    return {"save": save, "get": get, "get_many": get, "bytes": dir_bytes(d)}


def objstash_python(codec):
    def run(items, d):
        stash = objstash.Stash(os.path.join(d, "bench.objstash"), codec=codec)
        data = [s.encode() for _, s in items]
        start = time.perf_counter()
        keys = []
        for at in range(0, len(data), 10_000):
            keys.extend(stash.save_all(data[at : at + 10_000]))
        stash.flush()
        save = len(data) / (time.perf_counter() - start)
        order = shuffled(len(keys))
        get = timed_gets(stash.get, keys, order)
        ordered = [keys[i] for i in order]
        start = time.perf_counter()
        for at in range(0, len(ordered), 1_000):
            stash.get_many(ordered[at : at + 1_000])
        get_many = len(ordered) / (time.perf_counter() - start)
        stash.close()
        return {"save": save, "get": get, "get_many": get_many, "bytes": dir_bytes(d)}

    return run


def rust(binary, system, objects_file):
    def run(items, d):
        out = subprocess.run(
            [binary, system, objects_file, d], check=True, capture_output=True, text=True
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=44_500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rust", required=True, help="the Rust half's binary")
    args = parser.parse_args()

    model = build_model(args.elements)
    memory = MemoryTransport()
    operations.send(model, [memory], use_default_cache=False)
    items = list(memory.objects.items())
    raw = sum(len(s.encode()) for _, s in items)
    print(f"objects: {len(items)} serialized by specklepy, {raw / len(items):.0f} B/object")

    work = tempfile.mkdtemp(prefix="objstash-peers-")
    objects_file = os.path.join(work, "objects.bin")
    with open(objects_file, "wb") as f:
        for _, s in items:
            b = s.encode()
            f.write(struct.pack("<I", len(b)))
            f.write(b)

    # The headline comparisons sit next to each other, so that a round measures them close
    # in time (rounds run this order forwards, then backwards).
    systems = {
        "objstash, gzip, single, fast": rust(args.rust, "objstash:single:fast:gzip", objects_file),
        "specklepy SQLiteTransport": specklepy_sqlite,
        "python-diskcache (one transaction)": python_diskcache,
        "objstash from Python, gzip": objstash_python("gzip"),
        "objstash, zstd-dict, single, fast": rust(
            args.rust, "objstash:single:fast:zstd-dict", objects_file
        ),
        "objstash, gzip, bucketed, fast": rust(
            args.rust, "objstash:bucketed:fast:gzip", objects_file
        ),
        "objstash, gzip, single, safe": rust(args.rust, "objstash:single:safe:gzip", objects_file),
        "objstash, gzip, single, fast, no read map": rust(
            args.rust, "objstash:single:fast:gzip:0", objects_file
        ),
        "cacache-rs (one file per object)": rust(args.rust, "cacache", objects_file),
    }
    results: dict[str, dict[str, list[float]]] = {name: {} for name in systems}
    for round_ in range(args.rounds):
        order = list(systems) if round_ % 2 == 0 else list(reversed(systems))
        for name in order:
            d = tempfile.mkdtemp(dir=work)
            figures = systems[name](items, d)
            shutil.rmtree(d)
            for what, value in figures.items():
                results[name].setdefault(what, []).append(value)
            print(f"round {round_ + 1}: {name}: {figures}", file=sys.stderr)
    shutil.rmtree(work)

    med = {n: {w: statistics.median(v) for w, v in r.items()} for n, r in results.items()}
    base_name = "specklepy SQLiteTransport"
    base = med[base_name]

    def ratio(name: str, what: str, against: str = "get") -> float:
        """The median over rounds of this round's figure over specklepy's in the same round:
        steadier than a ratio of medians when the machine's speed drifts between rounds."""
        mine = results[name].get(what, results[name]["get"])
        theirs = results[base_name][against]
        return statistics.median(a / b for a, b in zip(mine, theirs))

    print(
        f"\nmedians of {args.rounds} rounds; in brackets the median over rounds of the ratio "
        "to specklepy's SQLiteTransport in the same round"
    )
    print("| system | save objects/s | bytes on disk | get objects/s, one thread | get_many objects/s |")
    print("|---|---|---|---|---|")
    for name, m in med.items():
        print(
            f"| {name} | {m['save']:,.0f} ({ratio(name, 'save', 'save'):.2f}x) "
            f"| {m['bytes'] / 1e6:.0f} MB ({m['bytes'] / base['bytes']:.2f}x) "
            f"| {m['get']:,.0f} ({ratio(name, 'get'):.2f}x) "
            f"| {m.get('get_many', m['get']):,.0f} ({ratio(name, 'get_many'):.2f}x) |"
        )
    dc = "python-diskcache (one transaction)"
    mine = ("objstash, gzip, single, fast", "objstash, gzip, single, fast, no read map")
    for name in (*mine, "objstash from Python, gzip"):
        rounds = zip(results[name]["get"], results[dc]["get"])
        against = statistics.median(a / b for a, b in rounds)
        print(f"{name}: get {against:.2f}x python-diskcache's (median over rounds)")
    rounds = zip(results[mine[0]]["get"], results[mine[1]]["get"])
    mapped = statistics.median(a / b for a, b in rounds)
    print(f"get with the default read map: {mapped:.2f}x without (median over rounds)")

if __name__ == "__main__":
    main()
