#!/usr/bin/env bash
# Builds the Python package's wheel and runs its tests against the installed wheel, from
# nothing but Python 3.10+ with pip and venv, and Rust: python/venv.sh builds the wheel,
# makes the virtual environment and installs it there with no Rust toolchain on PATH;
# then pytest runs, also with no Rust toolchain on PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

# The S3 server the remote tests start (tests/s3/install.sh: kept between runs).
echo "== the S3 server for the remote tests (tests/s3/install.sh)"
tests/s3/install.sh
source python/venv.sh
echo "== pytest (against the installed wheel, PATH=$venv_path)"
cd python/tests
PATH="$venv_path" "$venv/bin/python" -m pytest -q "$@"
