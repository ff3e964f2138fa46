#!/usr/bin/env bash
# Deduplication between two versions of a real large file: an uncompressed tar of a source
# tree (every crate this workspace builds with, from cargo's registry: ~330 source trees),
# then the same tar after a one-line edit of one file in the middle of the tree. Saves both
# with the command line and prints the bytes the second added against its size.
#
#   cargo build --release -p objstash-cli && bench/dedup.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
objstash=target/release/objstash
work=${1:-$(mktemp -d)}
mkdir -p "$work"
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ | head -1)
rm -rf "$work/tree" && cp -r "$src" "$work/tree"
tar --sort=name --mtime=@0 --owner=0 --group=0 -cf "$work/v1.tar" -C "$work" tree
# The edit: one line added to the middle file of the sorted tree.
file=$(cd "$work" && find tree -type f -name '*.rs' | sort | awk '{a[NR]=$0} END {print a[int(NR/2)]}')
echo "// an edit" >> "$work/$file"
tar --sort=name --mtime=@0 --owner=0 --group=0 -cf "$work/v2.tar" -C "$work" tree
db="$work/dedup.db"
rm -f "$db"*
"$objstash" --db "$db" put "$work/v1.tar" >/dev/null
before=$("$objstash" --db "$db" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
"$objstash" --db "$db" put "$work/v2.tar" >/dev/null
after=$("$objstash" --db "$db" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
size=$(stat -c %s "$work/v2.tar")
echo "edited $file"
echo "v1.tar: $(stat -c %s "$work/v1.tar") bytes, stored in $before bytes"
python3 -c "print(f'v2.tar: {$size} bytes; it added {$after - $before} bytes ({($after - $before) * 100 / $size:.3f}% of its size)')"
