"""Large objects from Python: `Stash.save_file` of one file of --size-mib, and reading it
back with `shutil.copyfileobj(stash.open(key), file)`, each in a process of its own, with
its peak resident memory against a process that only opens a stash and saves 1 KiB.

    python bench/large.py --size-mib 4096   # with the objstash wheel installed
                                            # (python/venv.sh, or target/python-venv)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

STEP = r"""
import resource, shutil, sys, time
from objstash import Stash
step, db, path = sys.argv[1:4]
began = time.monotonic()
stash = Stash(db)
if step == "baseline":
    stash.get(stash.save(b"x" * 1024))
elif step == "save":
    print("key", stash.save_file(path))
else:
    with open(path, "wb") as out:
        shutil.copyfileobj(stash.open(sys.argv[4]), out, 1 << 20)
stash.close()
print("secs", time.monotonic() - began)
print("peak_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def run(*args: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", STEP, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"step {args[0]} failed: {out.stderr}")
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def write_source(path: str, size: int) -> None:
    """4 MiB stretches alternating between text-like lines and random bytes."""
    stretch = 4 << 20
    with open(path, "wb") as f:
        written = 0
        while written < size:
            n = min(stretch, size - written)
            if (written // stretch) % 2 == 0:
                line = b'{"id":"%d","type":"Mesh","v":[1.5,2.5]}\n' % written
                f.write((line * (n // len(line) + 1))[:n])
            else:
                f.write(os.urandom(n))
            written += n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024)
    args = parser.parse_args()
    size = args.size_mib << 20
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "object.bin")
        write_source(source, size)
        base = run("baseline", os.path.join(tmp, "base.db"), source)
        print(f"baseline (open, save and read 1 KiB): peak {int(base['peak_kib']) / 1024:.1f} MiB")
        db = os.path.join(tmp, "stash.db")
        saved = run("save", db, source)
        back = os.path.join(tmp, "back.bin")
        read = run("read", db, back, saved["key"])
        assert os.path.getsize(back) == size
        for what, figures in (("save_file", saved), ("open + copyfileobj", read)):
            secs, peak = float(figures["secs"]), int(figures["peak_kib"]) / 1024
            print(
                f"{what:<20} {size / 1e6 / secs:7.1f} MB/s  peak {peak:6.1f} MiB "
                f"(+{peak - int(base['peak_kib']) / 1024:.1f} MiB)"
            )


if __name__ == "__main__":
    main()
