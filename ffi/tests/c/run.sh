#!/usr/bin/env bash
# Builds the C library (cargo build -p objstash-ffi), compiles the C tests against its
# header with gcc (warnings are errors) and runs them. Run from anywhere; ./test.sh runs it.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
cargo build --locked -p objstash-ffi
target="${CARGO_TARGET_DIR:-$root/target}/debug"
out="$target/objstash-c-test"
gcc -std=c11 -Wall -Wextra -Werror -pthread -I ffi/include ffi/tests/c/objstash_test.c \
  -L "$target" -lobjstash_c -Wl,-rpath,"$target" -o "$out"
"$out"
