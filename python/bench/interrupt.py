"""How long Ctrl-C takes to interrupt long calls: a child process runs one call, the parent
sends SIGINT once the call is under way, and the child reports when ``KeyboardInterrupt``
reached it (both read CLOCK_MONOTONIC, which is the same clock in every process on Linux).

    python/bench/run.sh interrupt [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import os, sys, time
from objstash import Stash
call, size = sys.argv[2], int(sys.argv[3])
stash = Stash(sys.argv[1])
objs = [os.urandom(24) + b"x" * size for _ in range(200_000)]
keys = stash.save_all(objs) if call != "save_all" else []
stash.flush()

def given(items):
    yield from items
    print("inside", flush=True)

try:
    if call == "save_all":
        stash.save_all(given(objs))
    elif call == "get_many":
        stash.get_many(given(keys))
    elif call == "verify":
        print("inside", flush=True)
        stash.verify()
    print("completed", time.monotonic(), flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
stash.close()
"""


def once(call: str, size: int) -> float | None:
    with tempfile.TemporaryDirectory() as tmp:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, os.path.join(tmp, "s.db"), call, str(size)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "inside"
        time.sleep(0.3)  # into the call, as a user's Ctrl-C would be
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        word, at = child.stdout.readline().split()
        child.wait()
        return float(at) - sent if word == "interrupted" else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'call':<10} {'object':>7} {'median ms':>10} {'max ms':>8}  (SIGINT 0.3 s into the call)")
    for call, size in [("save_all", 1000), ("save_all", 5000), ("get_many", 1000), ("verify", 1000)]:
        latencies = [once(call, size) for _ in range(args.rounds)]
        done = [ms * 1000 for ms in latencies if ms is not None]
        if len(done) < len(latencies):
            print(f"{call:<10} {size:>6}B  the call completed before the signal in "
                  f"{len(latencies) - len(done)} of {len(latencies)} rounds")
        if done:
            print(f"{call:<10} {size:>6}B {statistics.median(done):>10.1f} {max(done):>8.1f}")


if __name__ == "__main__":
    main()
