#!/usr/bin/env bash
# prepare-stage-o.sh — on the build machine, after bench/device/prepare-fa3.sh (.device/aot-fa3: fa3's defaults, O
# staged through shared memory where a block runs one tile): the baseline with O stored from the registers, and the
# GPU test binary, for bench/device/stage-o-bench.sh:
#   .device/aot-fa3direct/   --stage-o 0: none, causal, softcap, bf16, head dims 64, 128, 256, both shape classes
#   .device/bin/flashtile_gpu_tests, .device/bin/flashtile (runtime-only; the CLI for bench/device/profile-fa3.sh)
# Then copy .device/ to the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
rm -rf .device/aot-fa3direct
mkdir -p .device/bin
build/tools/flashtile aot --schedule fa3 --stage-o 0 --out .device/aot-fa3direct --shape-classes default,short \
  --dtypes bf16 --head-dims "${FLASHTILE_HEAD_DIMS:-64,128,256}" --variants none,causal,softcap "$@"
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile_gpu_tests
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile
cp build-rt/tests/gpu/flashtile_gpu_tests build-rt/tools/flashtile .device/bin/
du -sh .device/aot-fa3 .device/aot-fa3direct .device/lib .device/bin/flashtile_gpu_tests
