#!/usr/bin/env bash
# Builds the Python package as one abi3 wheel for CPython 3.10 and newer, manylinux2014
# (glibc 2.17 and newer), the way pydantic-core, blake3-py and obstore ship theirs, but
# without a container: maturin compiles with zig for the old glibc. The wheel installs
# where no Rust toolchain is: `pip install target/wheels/objstash-*.whl`.
#
# Needs Rust and Python 3.10+ with pip; maturin and zig come from PyPI into
# target/wheel-venv (python/build-requirements.txt). Prints the wheel's path.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
build="$root/target/wheel-venv"
if [ ! -x "$build/bin/python" ]; then
  "$python" -m venv "$build" >&2
fi
"$build/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r python/build-requirements.txt >&2
rm -f target/wheels/objstash-*.whl
# maturin finds zig through the build environment's python (`python -m ziglang`).
PATH="$build/bin:$PATH" "$build/bin/maturin" build --release --zig \
  --compatibility manylinux2014 --manifest-path python/Cargo.toml \
  --interpreter "$build/bin/python" --out target/wheels >&2
ls target/wheels/objstash-*.whl
