#!/usr/bin/env python3
"""Every file path the docs and comments name in backticks names a file that exists.

Scans the library's, the front ends' and the tests' sources, notes/, the READMEs and
CONTRIBUTING.md for `...` spans that end in a source or doc extension. A path starting with
./ or ../ is resolved from the repository's root or the naming file's folder; any other is
found if a tracked file is that path or ends with it (`stash/save.rs`, `save.rs`). A file of
another repository is named by its type or file name and its repository, never by a path
that reads as one of ours. Exits 1 and lists each stale reference with its file and line.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = (
    "src/", "notes/", "cli/src/", "cli/tests/", "python/src/", "python/objstash/",
    "python/tests/", "ffi/src/", "ffi/tests/", "dotnet/", "bench/src/", "tests/",
    "examples/", "gen/",
)
DOCS = ("README.md", "CONTRIBUTING.md", "python/README.md", "Cargo.toml")
EXTENSIONS = ("rs", "md", "py", "pyi", "cs", "h", "c", "sh", "toml")
PATH = re.compile(r"`([A-Za-z0-9_./-]+\.(?:%s))`" % "|".join(EXTENSIONS))


def main() -> int:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    exact = set(tracked)
    stale = []
    for name in tracked:
        if not (name.startswith(SCANNED) or name in DOCS):
            continue
        if not name.endswith(tuple("." + e for e in EXTENSIONS)):
            continue
        with open(os.path.join(ROOT, name), errors="replace") as f:
            for number, line in enumerate(f, 1):
                for match in PATH.finditer(line):
                    path = match.group(1)
                    if not exists(path, name, exact, tracked):
                        stale.append(f"{name}:{number}: `{path}` names no file")
    for line in stale:
        print(line)
    if stale:
        print(f"{len(stale)} stale file references (.ci/doc_paths.py)")
        return 1
    return 0


def exists(path: str, naming: str, exact: set, tracked: list) -> bool:
    if path.startswith(("./", "../")):
        base = ROOT if path.startswith("./") else os.path.join(ROOT, os.path.dirname(naming))
        full = os.path.normpath(os.path.join(base, path))
        inside = full.startswith(ROOT + os.sep)
        return inside and os.path.relpath(full, ROOT) in exact
    return path in exact or any(t.endswith("/" + path) for t in tracked)


if __name__ == "__main__":
    sys.exit(main())
