#!/usr/bin/env bash
# The installed CLI runs: `cmake --install BUILD --prefix P` into a scratch prefix, then P/bin/flashtile --version
# and a compile to a cubin (NVRTC) from a directory that is neither the build tree nor the prefix. Every installed
# ELF file's search path is absolute (check_runpath.py).
#   installed-cli.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" --component devel >/dev/null
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
"$tmp/prefix/bin/flashtile" --version
"$tmp/prefix/bin/flashtile" compile --variant causal --head-dim 64 --arch sm_80 -o kernel.cubin
[ -s kernel.cubin ] || { echo "installed-cli: the installed flashtile wrote no cubin"; exit 1; }
echo "installed-cli: $(stat -c %s kernel.cubin)-byte cubin from the installed flashtile"
python3 "$here/check_runpath.py" "$tmp/prefix"
