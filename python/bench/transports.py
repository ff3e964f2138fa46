"""specklepy's SQLiteTransport against objstash's transport, on one generated model, in one
run, rounds alternating so that both see the same machine. Prints a markdown table.

    python/bench/run.sh [--elements 44500] [--rounds 5] [--e2e-rounds 3]

The default model has about 100,000 objects. What is timed:
- send: ``operations.send`` of the model to the transport alone (specklepy serializes,
  the transport stores); and the transport's share, replaying the serialized objects
  through the transport interface (begin_write, save_object for each, end_write) as
  specklepy's serializer calls it.
- receive: ``operations.receive`` from the transport alone (specklepy reads every object
  and deserializes); and the transport's share, ``get_object`` of every object in the
  order a receive asks for them (the root, then the children its ``__closure`` lists).
- bytes on disk: every file the transport left in its directory, after it closed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
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


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


KINDS = {
    # No storage at all: what specklepy itself costs, the ceiling of any transport's send
    # and receive.
    "MemoryTransport (no storage)": lambda d: MemoryTransport(),
    "SQLiteTransport": lambda d: SQLiteTransport(base_path=d),
    "objstash (default: zstd-dict)": lambda d: ObjstashTransport(base_path=d),
    "objstash (gzip)": lambda d: ObjstashTransport(base_path=d, codec="gzip"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=44_500)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the transport's share")
    parser.add_argument("--e2e-rounds", type=int, default=3, help="rounds through specklepy")
    args = parser.parse_args()

    model = build_model(args.elements)
    memory = MemoryTransport()
    root_id = operations.send(model, [memory], use_default_cache=False)
    items = list(memory.objects.items())
    ids = [i for i, _ in items]
    raw = sum(len(s.encode()) for _, s in items)
    read_order = [root_id] + list(json.loads(memory.objects[root_id])["__closure"])
    assert len(read_order) == len(items)
    print(f"model: {len(items)} objects, {raw / 1e6:.1f} MB of JSON ({raw / len(items):.0f} B/object)")

    results: dict[str, dict[str, list[float]]] = {k: {} for k in KINDS}

    def note(kind: str, what: str, value: float) -> None:
        results[kind].setdefault(what, []).append(value)

    for round_ in range(max(args.rounds, args.e2e_rounds)):
        order = list(KINDS) if round_ % 2 == 0 else list(reversed(KINDS))
        for kind in order:
            if round_ >= args.rounds:
                break
            # The transport's share of a send, then of a receive, on one directory.
            d = tempfile.mkdtemp(prefix="bench-")
            t = KINDS[kind](d)
            gc.collect()
            start = time.perf_counter()
            t.begin_write()
            for obj_id, text in items:
                t.save_object(obj_id, text)
            t.end_write()
            note(kind, "store", len(items) / (time.perf_counter() - start))
            # As a receive reads: the root, then every child it lists, one at a time.
            start = time.perf_counter()
            for obj_id in read_order:
                if t.get_object(obj_id) is None:
                    raise SystemExit(f"{kind} lost {obj_id}")
            note(kind, "get_object", len(ids) / (time.perf_counter() - start))
            if hasattr(t, "close"):
                t.close()
            note(kind, "bytes", dir_bytes(d))
            shutil.rmtree(d)
            print(
                f"round {round_}: {kind}: store {results[kind]['store'][-1]:,.0f}/s, "
                f"get_object {results[kind]['get_object'][-1]:,.0f}/s",
                file=sys.stderr,
            )
        for kind in order:
            if round_ >= args.e2e_rounds:
                break
            # End to end through specklepy.
            d = tempfile.mkdtemp(prefix="bench-")
            t = KINDS[kind](d)
            gc.collect()
            start = time.perf_counter()
            sent = operations.send(model, [t], use_default_cache=False)
            note(kind, "send", len(items) / (time.perf_counter() - start))
            assert sent == root_id
            start = time.perf_counter()
            received = operations.receive(root_id, local_transport=t)
            note(kind, "receive", len(items) / (time.perf_counter() - start))
            assert len(received["@elements"]) == args.elements
            if hasattr(t, "close"):
                t.close()
            shutil.rmtree(d)
            print(
                f"round {round_}: {kind}: send {results[kind]['send'][-1]:,.0f}/s, "
                f"receive {results[kind]['receive'][-1]:,.0f}/s",
                file=sys.stderr,
            )

    base = "SQLiteTransport"
    med = {k: {w: statistics.median(v) for w, v in r.items()} for k, r in results.items()}

    def cell(kind: str, what: str, unit: str = "") -> str:
        if what not in med[kind]:
            return "-"  # not measured (--e2e-rounds 0)
        value = med[kind][what]
        ratio = value / med[base][what]
        if what == "bytes":
            if value == 0:
                return "-"
            text = f"{value / 1e6:.1f} MB"
        else:
            text = f"{value:,.0f}"
        return text if kind == base else f"{text} ({ratio:.2f}x)"

    print(
        f"\nmedians of {args.rounds} rounds ({args.e2e_rounds} for send and receive), "
        f"{len(items)} objects; ratios against {base}"
    )
    print("| transport | store objects/s | get_object objects/s | bytes on disk | send objects/s | receive objects/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in KINDS:
        print(
            f"| {kind} | {cell(kind, 'store')} | {cell(kind, 'get_object')} | {cell(kind, 'bytes')} "
            f"| {cell(kind, 'send')} | {cell(kind, 'receive')} |"
        )


if __name__ == "__main__":
    main()
