#!/usr/bin/env bash
# The Speckle transport benchmark (python/bench/transports.py) in the tests' virtual
# environment: `python/bench/run.sh [--elements N] [--rounds R]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source python/venv.sh
exec "$venv/bin/python" python/bench/transports.py "$@"
