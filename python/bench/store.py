"""The Speckle transport's share of a send: ``begin_write``, ``save_object`` of every object
of one generated model (as specklepy's serializer calls it), ``end_write`` (which, since
models, also declares the model), into a new cache. Prints objects per second, one line per
round. For before/after comparisons, run it in two environments alternately (the objects
are generated once into ``--items``, so both store the same ones):

    python/bench/run.sh store [--elements 44500] [--rounds 3] [--items /tmp/items.pickle]
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
warnings.simplefilter("ignore", DeprecationWarning)


def items_of(path: str, elements: int) -> list:
    """The serialized objects of a generated model, root last (as a send writes them)."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    from specklepy.api import operations
    from specklepy.transports.memory import MemoryTransport

    from speckle_model import build_model

    memory = MemoryTransport()
    operations.send(build_model(elements), [memory], use_default_cache=False)
    items = list(memory.objects.items())
    with open(path, "wb") as f:
        pickle.dump(items, f)
    return items


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--elements", type=int, default=44_500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", default=os.path.join(tempfile.gettempdir(), "objstash-items.pickle"))
    args = parser.parse_args()
    items = items_of(args.items, args.elements)
    from objstash.speckle import ObjstashTransport

    for _ in range(args.rounds):
        d = tempfile.mkdtemp(prefix="bench-store-")
        t = ObjstashTransport(base_path=d)
        start = time.perf_counter()
        t.begin_write()
        for obj_id, text in items:
            t.save_object(obj_id, text)
        t.end_write()
        rate = len(items) / (time.perf_counter() - start)
        t.close()
        shutil.rmtree(d)
        print(f"{len(items)} objects: {rate:,.0f} objects/s", flush=True)


if __name__ == "__main__":
    main()
