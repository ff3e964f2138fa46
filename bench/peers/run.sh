#!/usr/bin/env bash
# The peers benchmark: objstash beside specklepy's SQLiteTransport, python-diskcache and
# cacache-rs on the same objects (Speckle objects serialized by specklepy), in one run.
#   bench/peers/run.sh [--elements 44500] [--rounds 3]
# Installs what it needs: the Python tests' virtual environment (python/venv.sh: specklepy
# and the objstash package), diskcache (bench/peers/requirements.txt), and builds the Rust
# half (bench/src/bin/peers.rs: objstash's library and cacache-rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
source python/venv.sh
echo "== installing the Python peers (bench/peers/requirements.txt)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r bench/peers/requirements.txt
echo "== building the Rust half"
cargo build --release --locked -p objstash-bench --bin peers
exec "$venv/bin/python" bench/peers/peers.py --rust target/release/peers "$@"
