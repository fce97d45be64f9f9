#!/usr/bin/env bash
# The kernel cache key includes a hash of the compiler's sources (cmake/SourceHash.cmake): an edit to a compiler
# source — committed or not — must change it, and an unchanged tree must keep it. Runs the script on a copy.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/runtime/include/flashtile/runtime"
cp -r "$root/passes" "$root/codegen" "$root/schedules" "$root/dsl" "$root/examples" "$root/jit" "$tmp/src/"
cp "$root/runtime/include/flashtile/runtime/KernelAbi.h" "$tmp/src/runtime/include/flashtile/runtime/"
hash() { cmake -DROOT="$tmp/src" -DOUT="$tmp/$1.h" -P "$root/cmake/SourceHash.cmake" && cat "$tmp/$1.h" | grep -o '"[0-9a-f]*"'; }
first=$(hash a)
again=$(hash b)
[ "$first" = "$again" ] || { echo "the same sources hashed differently: $first vs $again"; exit 1; }
echo "// an edit" >>"$tmp/src/codegen/sm80/TileOpsSm80.cpp"
edited=$(hash c)
[ "$first" != "$edited" ] || { echo "an edit to codegen/sm80/TileOpsSm80.cpp left the source hash at $first"; exit 1; }
echo "source hash $first -> $edited after an edit"
