#!/usr/bin/env bash
# The Python benchmarks in the tests' virtual environment (the installed wheel):
# `python/bench/run.sh [--elements N] [--rounds R]` runs the Speckle transport benchmark
# (python/bench/transports.py); `python/bench/run.sh interrupt [--rounds R]` how long
# Ctrl-C takes to interrupt long calls (python/bench/interrupt.py); `python/bench/run.sh
# store [--rounds R]` the transport's share of a send (python/bench/store.py);
# `python/bench/run.sh cold [--models M] [--rounds R]` a model received from a cold cache,
# against SQLiteTransport (python/bench/cold_receive.py); `python/bench/run.sh evict
# [--seconds S]` receives beside processes that send, trim and remove models
# (python/bench/receive_under_eviction.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
source python/venv.sh
if [ "${1:-}" = store ]; then
  shift
  PATH="$venv_path" exec "$venv/bin/python" python/bench/store.py "$@"
fi
if [ "${1:-}" = cold ]; then
  shift
  PATH="$venv_path" exec "$venv/bin/python" python/bench/cold_receive.py "$@"
fi
if [ "${1:-}" = evict ]; then
  shift
  PATH="$venv_path" exec "$venv/bin/python" python/bench/receive_under_eviction.py "$@"
fi
if [ "${1:-}" = interrupt ]; then
  shift
  PATH="$venv_path" exec "$venv/bin/python" python/bench/interrupt.py "$@"
fi
PATH="$venv_path" exec "$venv/bin/python" python/bench/transports.py "$@"
