"""Receives from a capped cache while other processes send into it, trim it and remove its
models: how many receives end with the model sent, how many fail clearly, and how many
return part of a model (the count that must be 0).

    python/bench/run.sh evict [--seconds 90] [--cap-kib 200] [--models 12] [--elements 40]

Processes, each with its own handle on one cache file, for ``--seconds``:
- a sender: sends a random model into the cache (``ObjstashTransport`` with the cap);
- an evictor: trims the cache to half its cap, or removes a random model, in turn;
- two receivers with the Speckle server (on loopback) to fall back on, and two without:
  each receives a random model through the cache. With a server a receive must give the
  model sent, or fail clearly (a copy another process took objects from as it ran: "receive
  it again"); without one, the model sent or SpeckleException ("Could not find"). Any
  other outcome (a SpeckleWarning for a child specklepy could not find, or a model that
  serializes differently) is *partial*.

Prints a line per receiver and the totals; exits 1 if any receive was partial.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import random
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def _models(count: int, elements: int):
    from speckle_model import build_model

    return [build_model(elements, seed=1000 + s) for s in range(count)]


def sender(path: str, cap: int, models: int, elements: int, until: float) -> None:
    from specklepy.api import operations

    from objstash.speckle import ObjstashTransport

    built = _models(models, elements)
    rng = random.Random(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ObjstashTransport(path=path, max_size=cap) as cache:
            while time.time() < until:
                operations.send(rng.choice(built), [cache], use_default_cache=False)


def evictor(path: str, cap: int, ids: list, until: float) -> None:
    import objstash

    rng = random.Random(2)
    with objstash.Stash(path) as stash:
        turn = 0
        while time.time() < until:
            turn += 1
            if turn % 2:
                stash.trim_to(cap // 2)
            else:
                key = stash.resolve(rng.choice(ids))
                if key is not None:
                    stash.remove_model(key)
            time.sleep(0.01)


def receiver(path: str, url, models: int, elements: int, ids: list, until: float, out) -> None:
    from specklepy.api import operations
    from specklepy.logging.exceptions import SpeckleException, SpeckleWarning
    from specklepy.transports.server import ServerTransport

    from objstash.speckle import ObjstashTransport

    built = _models(models, elements)
    expected = [operations.serialize(m) for m in built]
    rng = random.Random(os.getpid())
    counts = {"whole": 0, "failed clearly": 0, "partial": 0}
    why: dict = {}
    with ObjstashTransport(path=path) as cache:
        while time.time() < until:
            n = rng.randrange(len(ids))
            remote = None
            if url is not None:
                remote = ServerTransport(stream_id="stream", token="token", url=url)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    received = operations.receive(
                        ids[n], remote_transport=remote, local_transport=cache
                    )
                except SpeckleException as ex:
                    # Without a server: not cached whole. With one: a copy that another
                    # process took objects from while it ran.
                    ok = ("Could not find" in str(ex) and url is None) or "receive it again" in str(ex)
                    counts["failed clearly" if ok else "partial"] += 1
                    if not ok:
                        reason = f"{type(ex).__name__}: {str(ex)[:60]}"
                        why[reason] = why.get(reason, 0) + 1
                    continue
            warned = [w for w in caught if issubclass(w.category, SpeckleWarning)]
            if warned or operations.serialize(received) != expected[n]:
                counts["partial"] += 1
                reason = str(warned[0].message)[:60] if warned else "a different model"
                why[reason] = why.get(reason, 0) + 1
            else:
                counts["whole"] += 1
    out.put(("with a server" if url else "without a server", counts, why))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--cap-kib", type=int, default=200)
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--elements", type=int, default=40)
    args = parser.parse_args()

    from specklepy.api import operations
    from specklepy.transports.server import ServerTransport

    from speckle_server import SpeckleServer

    server = SpeckleServer()
    remote = ServerTransport(stream_id="stream", token="token", url=server.url)
    ids = [
        operations.send(m, [remote], use_default_cache=False)
        for m in _models(args.models, args.elements)
    ]
    cap = args.cap_kib * 1024
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cache.db")
        # The cache made, and a first model in it, before anyone reads.
        sender(path, cap, args.models, args.elements, 0)
        until = time.time() + args.seconds
        procs = [
            ctx.Process(target=sender, args=(path, cap, args.models, args.elements, until)),
            ctx.Process(target=evictor, args=(path, cap, ids, until)),
        ]
        for url in [server.url, server.url, None, None]:
            procs.append(
                ctx.Process(
                    target=receiver,
                    args=(path, url, args.models, args.elements, ids, until, out),
                )
            )
        for p in procs:
            p.start()
        results = []
        while len(results) < 4:
            try:
                results.append(out.get(timeout=1))
            except queue.Empty:
                # A receiver that died reports nothing: stop waiting once all are gone.
                if not any(p.is_alive() for p in procs[2:]):
                    break
        for p in procs:
            p.join()
    server.stop()
    totals = {"whole": 0, "failed clearly": 0, "partial": 0}
    print(f"{args.seconds:.0f} s, a {args.cap_kib} KiB cap, {args.models} models of "
          f"{args.elements} elements; a sender, an evictor (trim to half, remove a model)")
    for kind, counts, why in results:
        print(f"  receiver {kind}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        for reason, times in sorted(why.items(), key=lambda kv: -kv[1])[:3]:
            print(f"    partial {times}x: {reason}")
        for k, v in counts.items():
            totals[k] += v
    print("  total: " + ", ".join(f"{v} {k}" for k, v in totals.items()))
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        print(f"  {len(bad)} processes failed: exit codes {bad}")
    return 1 if totals["partial"] or bad else 0


if __name__ == "__main__":
    sys.exit(main())
