#!/usr/bin/env bash
# The .NET binding in the layout NuGet expects, under target/nuget/:
#   lib/net48/Objstash.dll                 the binding (Mono's mcs here; `dotnet pack` of
#   lib/netstandard2.0/Objstash.dll        Objstash/Objstash.csproj builds both TFMs)
#   runtimes/<rid>/native/<library>        the C library per platform
#   Objstash.nuspec, and Objstash.<version>.nupkg zipping it all.
# This machine builds linux-x64. The build matrix a release runs it on, one native
# library each: linux-x64 and linux-arm64 (libobjstash_c.so), win-x64 and win-arm64
# (objstash_c.dll), osx-x64 and osx-arm64 (libobjstash_c.dylib); each runner sets RID
# and the last one (with the .NET SDK) runs `dotnet pack` over the collected runtimes/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rid="${RID:-linux-x64}"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
out="$root/target/nuget"
rm -rf "$out" && mkdir -p "$out/runtimes/$rid/native"
cargo build --locked --release -p objstash-ffi
case "$rid" in
  win-*) native=objstash_c.dll ;;
  osx-*) native=libobjstash_c.dylib ;;
  *) native=libobjstash_c.so ;;
esac
cp "${CARGO_TARGET_DIR:-$root/target}/release/$native" "$out/runtimes/$rid/native/"
cp ffi/include/objstash.h "$out/"
if command -v dotnet >/dev/null; then
  dotnet pack dotnet/Objstash/Objstash.csproj -c Release -o "$out"
else
  dotnet/install-mono.sh
  mkdir -p "$out/lib/net48"
  mcs -nologo -warnaserror -optimize -target:library -out:"$out/lib/net48/Objstash.dll" dotnet/Objstash/*.cs
  cat > "$out/Objstash.nuspec" <<NUSPEC
<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://schemas.microsoft.com/packaging/2013/05/nuspec.xsd">
  <metadata>
    <id>Objstash</id>
    <version>$version</version>
    <authors>objstash</authors>
    <license type="expression">MIT OR Apache-2.0</license>
    <description>A content-addressed object cache in one SQLite file, with a drop-in for Speckle.Sdk's SQLite JSON cache.</description>
    <dependencies><group targetFramework=".NETFramework4.8" /></dependencies>
  </metadata>
</package>
NUSPEC
  (cd "$out" && rm -f ./*.nupkg && python3 -m zipfile -c "Objstash.$version.nupkg" Objstash.nuspec lib runtimes >/dev/null)
fi
echo "$out"
find "$out" -type f | sort | sed "s|$out/|  |"
