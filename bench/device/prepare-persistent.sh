#!/usr/bin/env bash
# prepare-persistent.sh — on the build machine, after bench/device/prepare-fa3.sh (which writes .device/aot-fa3 with
# fa3's default knobs: persistent blocks where they measured faster): the baseline that
# bench/device/persistent-bench.sh compares it with on the GPU machine, and the GPU test binary:
#   .device/aot-fa3np/   --persistent 0 (a block a tile): none, causal and softcap, bf16, head dims 64, 128, 256, both
#                        shape classes
#   .device/bin/flashtile_gpu_tests (runtime-only)
# Then copy .device/ to the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
rm -rf .device/aot-fa3np
mkdir -p .device/bin
build/tools/flashtile aot --schedule fa3 --persistent 0 --out .device/aot-fa3np --shape-classes default,short \
  --dtypes bf16 --head-dims "${FLASHTILE_HEAD_DIMS:-64,128,256}" --variants none,causal,softcap "$@"
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile_gpu_tests
cp build-rt/tests/gpu/flashtile_gpu_tests .device/bin/
du -sh .device/aot-fa3 .device/aot-fa3np .device/lib .device/bin/flashtile_gpu_tests
