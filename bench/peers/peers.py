"""objstash beside its peers on the same objects, in one run, rounds alternating.

    bench/peers/run.sh [--elements 44500] [--rounds 3]
    bench/peers/run.sh --copies 100 --reads 500000 --rounds 1 --systems ...  (10 million)
    bench/peers/run.sh --copies 100 --reads 500000 --rounds 1 --read-rounds 3 --systems ...

The objects: a generated model (python/tests/speckle_model.py, about 100,000 objects at
the default size) serialized by specklepy, as a Speckle send would store them; with
`--copies K`, K copies of it, each object of a copy made distinct by a new id of the same
length (ten million objects from 100 copies, of the same sizes and kinds). They are written
once to a file that every system reads as it saves, so that no system holds them all in
memory. Each system starts empty in a directory of its own and is timed on:
- save: every object, reading the file included, as the system's users write them
  (specklepy's SQLiteTransport:
  begin_write, save_object for each, end_write; diskcache: set of each in one
  transaction; objstash: save_all in calls of 10,000 then flush; cacache-rs: write_sync
  of each);
- get: every object (or `--reads N` drawn at random) by its key or id on one thread, in
  a shuffled order, after one warm-up pass over the same ones (the OS page cache warm);
- get_many: objstash's get_many in calls of 1,000 (specklepy and diskcache have no batch
  read: their figure is their get loop's);
- bytes on disk: every file the system left, after it closed.
With `--read-rounds N`, each system's store of the last round is kept, and N more rounds
reopen every store in turn and time only the reads (the order alternating as above): at
ten million objects a save takes minutes to half an hour, so rounds of saves and reads put
the systems' reads far apart in time on a machine whose speed drifts between hours. The
reads' figures are then those of the read rounds.
objstash runs through its Rust library (the Rust half, bench/src/bin/peers.rs) and through
the Python package; one of its rows reads without the memory map of the default (diskcache
maps 64 MiB too). Medians of the rounds; ratios against SQLiteTransport, each the median
over rounds of the ratio within a round.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
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


def shuffled(n: int, reads: int = 0) -> list[int]:
    """The order of the timed reads: every index shuffled, or `reads` of them."""
    order = list(range(n))
    random.Random(7).shuffle(order)
    return order[:reads] if reads else order


def batches(objects_file: str, size: int = 10_000):
    """The file's objects as lists of up to `size` bytes objects."""
    batch = []
    with open(objects_file, "rb", buffering=1 << 20) as f:
        while header := f.read(4):
            batch.append(f.read(struct.unpack("<I", header)[0]))
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


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


def specklepy_sqlite(ids, objects_file, reads, d, reads_only=False):
    t = SQLiteTransport(base_path=d, scope="bench")
    if reads_only:
        get = timed_gets(t.get_object, ids, shuffled(len(ids), reads))
        t.close()
        return {"get": get, "get_many": get}
    start = time.perf_counter()
    t.begin_write()
    at = 0
    for batch in batches(objects_file):
        for s in batch:
            t.save_object(ids[at], s.decode())
            at += 1
    t.end_write()
    save = len(ids) / (time.perf_counter() - start)
    get = timed_gets(t.get_object, ids, shuffled(len(ids), reads))
    t.close()
    return {"save": save, "get": get, "get_many": get, "bytes": dir_bytes(d)}


def python_diskcache(ids, objects_file, reads, d, reads_only=False):
    # diskcache culls beyond 1 GB by default: as large as the others, nothing culled.
    cache = diskcache.Cache(d, size_limit=1 << 50)
    if reads_only:
        get = timed_gets(cache.get, ids, shuffled(len(ids), reads))
        cache.close()
        return {"get": get, "get_many": get}
    start = time.perf_counter()
    at = 0
    with cache.transact():
        for batch in batches(objects_file):
            for s in batch:
                cache.set(ids[at], s.decode())
                at += 1
    save = len(ids) / (time.perf_counter() - start)
    get = timed_gets(cache.get, ids, shuffled(len(ids), reads))
    cache.close()
    return {"save": save, "get": get, "get_many": get, "bytes": dir_bytes(d)}


def objstash_python(codec):
    def run(ids, objects_file, reads, d, reads_only=False):
        stash = objstash.Stash(os.path.join(d, "bench.objstash"), codec=codec)
        start = time.perf_counter()
        keys = []
        for batch in batches(objects_file):
            # Saving what is stored returns its keys and writes nothing.
            keys.extend(stash.save_all(batch))
        stash.flush()
        save = len(keys) / (time.perf_counter() - start)
        order = shuffled(len(keys), reads)
        get = timed_gets(stash.get, keys, order)
        ordered = [keys[i] for i in order]
        start = time.perf_counter()
        for at in range(0, len(ordered), 1_000):
            stash.get_many(ordered[at : at + 1_000])
        get_many = len(ordered) / (time.perf_counter() - start)
        stash.close()
        if reads_only:
            return {"get": get, "get_many": get_many}
        return {"save": save, "get": get, "get_many": get_many, "bytes": dir_bytes(d)}

    return run


def rust(binary, system):
    def run(ids, objects_file, reads, d, reads_only=False):
        out = subprocess.run(
            [binary, system, objects_file, d, str(reads), *(["--reads-only"] if reads_only else [])],
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=44_500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=1, help="copies of the model's objects")
    parser.add_argument("--reads", type=int, default=0, help="objects read (default: all)")
    parser.add_argument(
        "--systems", default="", help="a regular expression: only the systems it finds in"
    )
    parser.add_argument(
        "--read-rounds",
        type=int,
        default=0,
        help="rounds of reads only, of the stores the last round saved",
    )
    parser.add_argument("--rust", required=True, help="the Rust half's binary")
    parser.add_argument(
        "--keep-objects",
        metavar="FILE",
        help="keep a copy of the objects file (for bench/src/bin/get_loop.rs --objects FILE)",
    )
    args = parser.parse_args()

    model = build_model(args.elements)
    memory = MemoryTransport()
    operations.send(model, [memory], use_default_cache=False)
    items = list(memory.objects.items())
    del model, memory
    raw = sum(len(s.encode()) for _, s in items)
    print(
        f"objects: {len(items)} serialized by specklepy, {raw / len(items):.0f} B/object, "
        f"{args.copies} copies"
    )

    work = tempfile.mkdtemp(prefix="objstash-peers-")
    objects_file = os.path.join(work, "objects.bin")
    ids = []
    with open(objects_file, "wb") as f:
        for copy in range(args.copies):
            for i, s in items:
                if copy:
                    # A new id of the same length where the object names its own.
                    new = hashlib.md5(f"{copy}/{i}".encode()).hexdigest()[: len(i)]
                    s, n = s.replace(f'"id":"{i}"', f'"id":"{new}"', 1), new
                    if n not in s:
                        raise RuntimeError(f"object {i} does not name its id")
                    i = new
                b = s.encode()
                f.write(struct.pack("<I", len(b)))
                f.write(b)
                ids.append(i)
    del items
    if args.keep_objects:
        shutil.copyfile(objects_file, args.keep_objects)

    # The headline comparisons sit next to each other, so that a round measures them close
    # in time (rounds run this order forwards, then backwards).
    systems = {
        "objstash, gzip, single, fast": rust(args.rust, "objstash:single:fast:gzip"),
        "objstash, gzip, single, fast, values in a file": rust(
            args.rust, "objstash:single:fast:gzip:file"
        ),
        "specklepy SQLiteTransport": specklepy_sqlite,
        "python-diskcache (one transaction)": python_diskcache,
        "objstash from Python, gzip": objstash_python("gzip"),
        "objstash, zstd-dict, single, fast": rust(args.rust, "objstash:single:fast:zstd-dict"),
        "objstash, gzip, bucketed, fast": rust(args.rust, "objstash:bucketed:fast:gzip"),
        "objstash, gzip, bucketed, fast, values in a file": rust(
            args.rust, "objstash:bucketed:fast:gzip:file"
        ),
        "objstash, gzip, single, safe": rust(args.rust, "objstash:single:safe:gzip"),
        "objstash, gzip, single, fast, no read map": rust(
            args.rust, "objstash:single:fast:gzip:0"
        ),
        "cacache-rs (one file per object)": rust(args.rust, "cacache"),
    }
    if args.systems:
        systems = {n: run for n, run in systems.items() if re.search(args.systems, n)}
    results: dict[str, dict[str, list[float]]] = {name: {} for name in systems}
    kept: dict[str, str] = {}
    for round_ in range(args.rounds):
        order = list(systems) if round_ % 2 == 0 else list(reversed(systems))
        for name in order:
            d = tempfile.mkdtemp(dir=work)
            figures = systems[name](ids, objects_file, args.reads, d)
            if args.read_rounds and round_ == args.rounds - 1:
                kept[name] = d
            else:
                shutil.rmtree(d)
            for what, value in figures.items():
                results[name].setdefault(what, []).append(value)
            print(f"round {round_ + 1}: {name}: {figures}", file=sys.stderr)
    if args.read_rounds:
        # The reads' figures are the read rounds' alone.
        for name in systems:
            for what in ("get", "get_many"):
                results[name].pop(what, None)
    for round_ in range(args.read_rounds):
        order = list(systems) if round_ % 2 == 0 else list(reversed(systems))
        for name in order:
            figures = systems[name](ids, objects_file, args.reads, kept[name], reads_only=True)
            for what, value in figures.items():
                results[name].setdefault(what, []).append(value)
            print(f"read round {round_ + 1}: {name}: {figures}", file=sys.stderr)
    shutil.rmtree(work)

    med = {n: {w: statistics.median(v) for w, v in r.items()} for n, r in results.items()}
    # Ratios are to specklepy's, or when it was not run to the first system's.
    base_name = "specklepy SQLiteTransport"
    if base_name not in med:
        base_name = next(iter(med))
    base = med[base_name]

    def ratio(name: str, what: str, against: str = "get") -> float:
        """The median over rounds of this round's figure over specklepy's in the same round:
        steadier than a ratio of medians when the machine's speed drifts between rounds."""
        mine = results[name].get(what, results[name]["get"])
        theirs = results[base_name][against]
        return statistics.median(a / b for a, b in zip(mine, theirs))

    reads_from = f"{args.read_rounds} read rounds" if args.read_rounds else "the same rounds"
    print(
        f"\nmedians of {args.rounds} rounds (reads: of {reads_from}); in brackets the median "
        f"over rounds of the ratio to {base_name}'s in the same round"
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
    def against(name: str, other: str) -> float | None:
        """The median over rounds of name's get over other's in the same round."""
        if name not in results or other not in results:
            return None
        return statistics.median(a / b for a, b in zip(results[name]["get"], results[other]["get"]))

    dc = "python-diskcache (one transaction)"
    cc = "cacache-rs (one file per object)"
    mine = ("objstash, gzip, single, fast", "objstash, gzip, single, fast, no read map")
    in_file = "objstash, gzip, single, fast, values in a file"
    bucketed_in_file = "objstash, gzip, bucketed, fast, values in a file"
    for name in (*mine, in_file, "objstash from Python, gzip", "objstash, gzip, bucketed, fast", bucketed_in_file):
        for other in (dc, cc):
            if (r := against(name, other)) is not None:
                print(f"{name}: get {r:.2f}x {other}'s (median over rounds)")
    if (r := against(*mine)) is not None:
        print(f"get with the default read map: {r:.2f}x without (median over rounds)")
    if (r := against("objstash, gzip, bucketed, fast", mine[0])) is not None:
        print(f"get in the bucketed layout: {r:.2f}x the single layout's (median over rounds)")
    if (r := against(in_file, mine[0])) is not None:
        print(f"get with values in a file: {r:.2f}x in rows (median over rounds)")
    if (r := against(bucketed_in_file, in_file)) is not None:
        print(f"get in the bucketed layout, values in a file: {r:.2f}x the single layout's")


if __name__ == "__main__":
    main()
