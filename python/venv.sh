# Sourced by python/tests/run.sh and python/bench/run.sh, from the repository's root: makes
# a virtual environment (target/python-venv, kept between runs), installs maturin, pytest
# and specklepy from PyPI (python/tests/requirements.txt), and builds and installs ./python
# the way a user's `pip install ./python` does. Leaves $venv set and its bin/ on PATH.
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "objstash: the Python package needs Python 3.10 or newer as $python (set PYTHON=...)" >&2
  exit 1
fi
venv="${OBJSTASH_VENV:-$PWD/target/python-venv}"
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
