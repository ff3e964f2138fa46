#!/usr/bin/env bash
# The whole test suite, from a fresh clone: the Rust tests (library, command line), then
# the Python package's (python/tests/run.sh: builds it in a virtual environment and runs
# pytest against real specklepy). Needs Rust and Python 3.10+ with pip; everything else
# comes from crates.io and PyPI.
set -euo pipefail
cd "$(dirname "$0")"
echo "== cargo test"
cargo test --locked
echo "== Python package"
python/tests/run.sh
