#!/usr/bin/env bash
# Mono for the .NET binding's tests: `mcs` compiles C# for .NET Framework 4.x, `mono` runs
# it (P/Invoke of the Rust library included), Mono.Data.Sqlite runs Speckle's cache design
# in the side-by-side benchmark. Installed from Debian's packages (as root, or with
# passwordless sudo) unless it is there already; prints why not otherwise and exits 1.
set -euo pipefail
need() { command -v mcs >/dev/null && command -v mono >/dev/null \
  && [ -e /usr/lib/mono/4.5/Mono.Data.Sqlite.dll ]; }
if need; then
  exit 0
fi
packages=(mono-mcs mono-runtime libmono-sqlite4.0-cil libmono-system-data4.0-cil)
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "objstash: Mono is not installed and this user cannot install it (apt-get install ${packages[*]})" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "objstash: Mono is not installed and there is no apt-get here (install: ${packages[*]})" >&2
  exit 1
fi
echo "== installing Mono (apt-get install ${packages[*]})"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >/dev/null \
  || { "${sudo[@]}" apt-get update -q >/dev/null && \
       "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >/dev/null; }
need
