#!/usr/bin/env bash
# Builds the Python package and runs its tests, from nothing but Python 3.10+ with pip and
# venv, and Rust: python/venv.sh makes the virtual environment and installs the package,
# then pytest runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

source python/venv.sh
echo "== pytest"
cd python/tests
"$venv/bin/python" -m pytest -q "$@"
