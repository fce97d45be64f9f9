#!/usr/bin/env bash
# dynsched-prepare.sh — on the build machine: fill .device/ (git-ignored) with the kernel libraries that
# bench/device/dynsched-check.sh compares on the GPU machine, fa3's dynamic tile scheduler against fa3's defaults:
#   .device/aot-fa3dyn/  --persistent 1 --scheduler dynamic (persistent blocks taking Q tiles from a per-launch
#                        counter, heaviest first): none, causal, sliding_window_causal; bf16; head dims 64, 128; both
#                        shape classes
#   .device/aot-fa3def/  the same kernels with fa3's default knobs (static persistent blocks where they measured
#                        faster, a block a tile for causal and banded programs of the default class)
#   .device/lib/         libflashtile.so (runtime only)
# Extra arguments go to both `flashtile aot` calls. Then copy .device/ to the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}"
rm -rf .device/aot-fa3dyn .device/aot-fa3def
mkdir -p .device/lib
VARIANTS=${FLASHTILE_VARIANTS:-none,causal,sliding_window_causal}
HEAD_DIMS=${FLASHTILE_HEAD_DIMS:-64,128}
build/tools/flashtile aot --schedule fa3 --persistent 1 --scheduler dynamic --out .device/aot-fa3dyn \
  --shape-classes default,short --dtypes bf16 --head-dims "$HEAD_DIMS" --variants "$VARIANTS" "$@"
build/tools/flashtile aot --schedule fa3 --out .device/aot-fa3def \
  --shape-classes default,short --dtypes bf16 --head-dims "$HEAD_DIMS" --variants "$VARIANTS" "$@"
grep -l "bind=tileCounter@0" .device/aot-fa3dyn/*.manifest | wc -l | xargs echo "dynamic-scheduler manifests:"
cp build-rt/runtime/libflashtile.so .device/lib/
du -sh .device/aot-fa3dyn .device/aot-fa3def .device/lib
