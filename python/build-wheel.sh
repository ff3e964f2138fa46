#!/usr/bin/env bash
# Builds the Python package as one abi3 wheel for CPython 3.10 and newer, manylinux2014
# (glibc 2.17 and newer), the way pydantic-core, blake3-py and obstore ship theirs, but
# without a container: maturin compiles with zig for the old glibc. The wheel installs
# where no Rust toolchain is: `pip install target/wheels/objstash-*.whl`.
#
# Needs Rust and Python 3.10+ with pip; maturin and zig come from PyPI into
# target/wheel-venv (python/build-requirements.txt). Everything goes under cargo's target
# directory (CARGO_TARGET_DIR when set). Prints the wheel's absolute path.
#
# `--dev`: a wheel for this machine only, in cargo's dev profile and without zig, so that
# it reuses the dependencies the Rust tests built (in target/debug, optimized as the
# workspace's dev profile says) instead of building them all again for release: what
# ./test.sh tests against. The same code; ship the release wheel.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
target="$(mkdir -p "${CARGO_TARGET_DIR:-$root/target}" && cd "${CARGO_TARGET_DIR:-$root/target}" && pwd)"
build="$target/wheel-venv"
if [ ! -x "$build/bin/python" ]; then
  "$python" -m venv "$build" >&2
fi
"$build/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r python/build-requirements.txt >&2
rm -f "$target"/wheels/objstash-*.whl
if [ "${1:-}" = --dev ]; then
  build_args=(--profile dev --compatibility linux)
else
  # maturin finds zig through the build environment's python (`python -m ziglang`).
  build_args=(--release --zig --compatibility manylinux2014)
fi
PATH="$build/bin:$PATH" "$build/bin/maturin" build "${build_args[@]}" \
  --manifest-path python/Cargo.toml --interpreter "$build/bin/python" \
  --out "$target/wheels" >&2
ls "$target"/wheels/objstash-*.whl
