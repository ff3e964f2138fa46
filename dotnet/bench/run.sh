#!/usr/bin/env bash
# The .NET side-by-side benchmarks: objstash through the binding against Speckle's SQLite
# cache design, under Mono, on generated Speckle objects.
#   dotnet/bench/run.sh [--count 100000] [--rounds 3] [--reads 20000]   each call (Bench.cs)
#   dotnet/bench/run.sh sdk [--count 100000] [--rounds 3]               the SDK's receives and
#                                                                        sends (SdkReplay.cs)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
count=100000
program=Bench
if [ "${1:-}" = sdk ]; then
  program=SdkReplay
  shift
fi
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
dotnet/install-mono.sh
cargo build --locked --release -p objstash-ffi
cargo build --locked --release -p objstash-bench --bin speckle_jsonl
target="${CARGO_TARGET_DIR:-$root/target}/release"
out="$target/dotnet-bench"
mkdir -p "$out"
objects="$out/objects-$count.tsv"
[ -s "$objects" ] || "$target/speckle_jsonl" --count "$count" > "$objects"
mcs -nologo -optimize -target:library -out:"$out/Objstash.dll" dotnet/Objstash/*.cs
mcs -nologo -optimize -target:exe -out:"$out/$program.exe" -r:"$out/Objstash.dll" -r:System.Core.dll \
  -r:System.Data.dll -r:Mono.Data.Sqlite.dll "dotnet/bench/$program.cs" dotnet/bench/SpeckleDesign.cs
cp "$target/libobjstash_c.so" "$out/"
LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" mono --server "$out/$program.exe" --objects "$objects" "${args[@]}"
