#!/usr/bin/env bash
# The .NET binding's tests under Mono (.NET Framework 4.x): installs Mono if it can
# (install-mono.sh), builds the C library (cargo build -p objstash-ffi), compiles the
# binding and the tests with mcs and runs them with mono. Prints "N passed, N failed".
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
dotnet/install-mono.sh
cargo build --locked -p objstash-ffi
target="${CARGO_TARGET_DIR:-$root/target}/debug"
out="$target/dotnet"
mkdir -p "$out"
mcs -nologo -warnaserror -target:library -out:"$out/Objstash.dll" dotnet/Objstash/*.cs
mcs -nologo -target:exe -out:"$out/Tests.exe" -r:"$out/Objstash.dll" -r:System.Core.dll dotnet/tests/Tests.cs
cp "$target/libobjstash_c.so" "$out/"
LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" mono "$out/Tests.exe"
