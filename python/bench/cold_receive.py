"""A model received from a cold cache: specklepy's SQLiteTransport against objstash's
transport, each holding the same ``--models`` generated models (about 100,000 objects each
at the default ``--elements``: ten make a cache of a million objects), the page cache
dropped before each read (``echo 3 > /proc/sys/vm/drop_caches``, which needs root: without
it the reads are warm, and the table says so). Kinds alternate round by round.

    python/bench/run.sh cold [--models 10] [--elements 44500] [--rounds 3]

What is timed, on the model in the middle, each on a transport opened after the drop:
- the transport's share of a receive: ``get_object`` of the root, then of every object its
  ``__closure`` lists, in that order (as specklepy's deserializer asks for them);
- ``operations.receive`` of the model from the transport alone (specklepy deserializes
  too), and what share of it the transport's reads take.

The serialized models are made once into ``--items`` (a directory of pickles) and reused.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from specklepy.api import operations  # noqa: E402
from specklepy.transports.memory import MemoryTransport  # noqa: E402
from specklepy.transports.sqlite import SQLiteTransport  # noqa: E402

from objstash.speckle import ObjstashTransport  # noqa: E402
from speckle_model import build_model  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)

KINDS = {
    "SQLiteTransport": lambda d: SQLiteTransport(base_path=d),
    "objstash (default: zstd-dict)": lambda d: ObjstashTransport(base_path=d),
}


def items_of(directory: str, seed: int, elements: int) -> list:
    """The serialized objects of generated model `seed`, root last (as a send writes them)."""
    path = os.path.join(directory, f"model-{elements}-{seed}.pickle")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    memory = MemoryTransport()
    operations.send(build_model(elements, seed=seed), [memory], use_default_cache=False)
    items = list(memory.objects.items())
    os.makedirs(directory, exist_ok=True)
    with open(path + ".part", "wb") as f:
        pickle.dump(items, f)
    os.replace(path + ".part", path)
    return items


def drop_page_cache() -> bool:
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def close(transport) -> None:
    if hasattr(transport, "close"):
        transport.close()
    elif hasattr(transport, "__del__"):
        transport.__del__()  # SQLiteTransport closes its connection there


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--elements", type=int, default=44_500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", default=os.path.join(tempfile.gettempdir(), "objstash-cold-items"))
    parser.add_argument("--dir", default=os.path.join("target", "bench-cold-receive"))
    args = parser.parse_args()

    # Each kind's cache, holding every model, saved as a send saves (the transport's share).
    middle = args.models // 2
    root_id, read_order, total = None, [], 0
    dirs = {}
    shutil.rmtree(args.dir, ignore_errors=True)
    for kind, make in KINDS.items():
        d = os.path.join(args.dir, kind.split()[0])
        os.makedirs(d)
        dirs[kind] = d
    for seed in range(args.models):
        items = items_of(args.items, seed, args.elements)
        total += len(items)
        if seed == middle:
            root_id = items[-1][0]
            read_order = [root_id] + list(json.loads(items[-1][1])["__closure"])
            assert len(read_order) == len(items)
        for kind, make in KINDS.items():
            t = make(dirs[kind])
            t.begin_write()
            for obj_id, text in items:
                t.save_object(obj_id, text)
            t.end_write()
            close(t)
        print(f"model {seed}: {len(items)} objects saved to each cache", file=sys.stderr)
        del items
    cold = drop_page_cache()
    print(
        f"{args.models} models, {total} objects in each cache; the model in the middle, "
        f"{len(read_order)} objects, read {'cold' if cold else 'WARM (not root: the page cache cannot be dropped)'}"
    )

    results: dict = {k: {"share": [], "receive": []} for k in KINDS}
    for round_ in range(args.rounds):
        order = list(KINDS) if round_ % 2 == 0 else list(reversed(KINDS))
        for kind in order:
            drop_page_cache()
            t = KINDS[kind](dirs[kind])
            gc.collect()
            start = time.perf_counter()
            for obj_id in read_order:
                if t.get_object(obj_id) is None:
                    raise SystemExit(f"{kind} lost {obj_id}")
            results[kind]["share"].append(time.perf_counter() - start)
            close(t)
            del t
            drop_page_cache()
            t = KINDS[kind](dirs[kind])
            gc.collect()
            start = time.perf_counter()
            received = operations.receive(root_id, local_transport=t)
            results[kind]["receive"].append(time.perf_counter() - start)
            assert len(received["@elements"]) == args.elements
            close(t)
            del t, received
            print(
                f"round {round_}: {kind}: get_object {results[kind]['share'][-1]:.2f} s, "
                f"receive {results[kind]['receive'][-1]:.2f} s",
                file=sys.stderr,
            )

    base = "SQLiteTransport"
    n = len(read_order)
    med = {k: {w: statistics.median(v) for w, v in r.items()} for k, r in results.items()}
    print(f"\nmedians of {args.rounds} rounds, objects/s; ratios against {base}")
    print("| transport | `get_object` of the model, cold | `operations.receive`, cold | the transport's share of the receive |")
    print("|---|---:|---:|---:|")
    for kind in KINDS:
        share, receive = med[kind]["share"], med[kind]["receive"]
        ratio = "" if kind == base else f" ({med[base]['share'] / share:.2f}x)"
        ratio_e2e = "" if kind == base else f" ({med[base]['receive'] / receive:.2f}x)"
        print(
            f"| {kind} | {n / share:,.0f}{ratio} | {n / receive:,.0f}{ratio_e2e} "
            f"| {100 * share / receive:.0f}% |"
        )


if __name__ == "__main__":
    main()
