#!/usr/bin/env bash
# Builds the Python package and runs its tests, from nothing but Python 3.10+ with pip and
# venv, and Rust: makes a virtual environment (target/python-venv, kept between runs),
# installs maturin, pytest and specklepy from PyPI, builds and installs ./python the way a
# user's `pip install ./python` does, and runs pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "python/tests/run.sh: needs Python 3.10 or newer as $python (set PYTHON=...)" >&2
  exit 1
fi
venv="${OBJSTASH_VENV:-$root/target/python-venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "== making a virtual environment in $venv"
  "$python" -m venv "$venv"
fi
export PATH="$venv/bin:$PATH"  # the build backend runs the venv's maturin
echo "== installing the test requirements (python/tests/requirements.txt)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r python/tests/requirements.txt
echo "== building and installing ./python"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  --force-reinstall --no-deps ./python
echo "== pytest"
cd python/tests
"$venv/bin/python" -m pytest -q "$@"
