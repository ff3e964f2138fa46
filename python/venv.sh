# Sourced by python/tests/run.sh and python/bench/run.sh, from the repository's root:
# builds the package's wheel (python/build-wheel.sh), makes a virtual environment
# (target/python-venv, kept between runs) and installs into it, with no Rust toolchain on
# PATH, the test requirements from PyPI (python/tests/requirements.txt) and the wheel, as
# a user without Rust would. Leaves $venv set and $venv_path, the PATH to run it with.
# OBJSTASH_WHEEL=dev builds the wheel with `python/build-wheel.sh --dev` (./test.sh).
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "objstash: the Python package needs Python 3.10 or newer as $python (set PYTHON=...)" >&2
  exit 1
fi
wheel_args=()
if [ "${OBJSTASH_WHEEL:-release}" = dev ]; then
  wheel_args=(--dev)
fi
echo "== building the wheel (python/build-wheel.sh ${wheel_args[*]})"
wheel="$(python/build-wheel.sh "${wheel_args[@]}" | tail -n 1)"
venv="${OBJSTASH_VENV:-${CARGO_TARGET_DIR:-$PWD/target}/python-venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "== making a virtual environment in $venv"
  "$python" -m venv "$venv"
fi
# The venv and the system's directories: no cargo, no rustc.
venv_path="$venv/bin:/usr/bin:/bin"
if PATH="$venv_path" command -v cargo >/dev/null 2>&1; then
  echo "objstash: cargo is on $venv_path; the wheel must install without it" >&2
  exit 1
fi
echo "== installing the test requirements (python/tests/requirements.txt) and $wheel"
PATH="$venv_path" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r python/tests/requirements.txt
PATH="$venv_path" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --force-reinstall --no-deps "$wheel"
