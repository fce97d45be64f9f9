#!/usr/bin/env bash
# prepare-persistent.sh — on the build machine: the fa3 kernel libraries that bench/device/persistent-bench.sh
# compares on the GPU machine, persistent blocks (tile.work_loop) against a block a tile, same knobs otherwise:
#   .device/aot-fa3p/    --persistent 1: every built-in variant, bf16 and f16, head dims 64, 128, 256, 192:128, both
#                        shape classes (the correctness checks and the benchmark)
#   .device/aot-fa3np/   --persistent 0: none and causal, bf16, the same head dims and classes (the baseline)
#   .device/lib/         libflashtile.so;  .device/bin/flashtile_gpu_tests (runtime-only)
# FLASHTILE_VARIANTS / FLASHTILE_HEAD_DIMS narrow the first library. Then copy .device/ to the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PATH="/usr/local/cuda/bin:$PATH"
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON \
  -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}"
rm -rf .device/aot-fa3p .device/aot-fa3np
mkdir -p .device/lib .device/bin
heads=${FLASHTILE_HEAD_DIMS:-64,128,256,192:128}
build/tools/flashtile aot --schedule fa3 --persistent 1 --out .device/aot-fa3p --shape-classes default,short \
  --dtypes bf16,f16 --head-dims "$heads" \
  --variants "${FLASHTILE_VARIANTS:-none,causal,causal_top_left,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,alibi_per_batch,alibi_causal,sinks,sinks_causal,document_mask}" "$@"
build/tools/flashtile aot --schedule fa3 --persistent 0 --out .device/aot-fa3np --shape-classes default,short \
  --dtypes bf16 --head-dims "$heads" --variants none,causal "$@"
cp build-rt/runtime/libflashtile.so .device/lib/
cp build-rt/tests/gpu/flashtile_gpu_tests .device/bin/
du -sh .device/aot-fa3p .device/aot-fa3np .device/lib .device/bin
