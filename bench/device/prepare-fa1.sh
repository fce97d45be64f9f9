#!/usr/bin/env bash
# prepare-fa1.sh — on the build machine: fill .device/ (git-ignored) with what bench/device/fa1-check.sh runs on the
# GPU machine:
#   .device/aot-fa1/   the fa1 (teaching schedule: one launch per K/V tile, the state in global memory) kernel library:
#                      every built-in variant, bf16 and f16, the head dims the GPU tests check, sm_90a by default
#   .device/bin/       runtime-only flashtile_gpu_tests and flashtile (CLI)
#   .device/lib/       libflashtile.so (C ABI, for bench/check_variants.py)
# FLASHTILE_ARCH, FLASHTILE_HEAD_DIMS and FLASHTILE_VARIANTS override the defaults; extra arguments go to
# `flashtile aot` (e.g. --block-n 32). Then copy .device/ to the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}"
rm -rf .device/aot-fa1
mkdir -p .device/bin .device/lib
build/tools/flashtile aot --schedule fa1 --arch "$ARCH" --out .device/aot-fa1 --shape-classes default \
  --dtypes bf16,f16 --head-dims "${FLASHTILE_HEAD_DIMS:-32,64,96,128,192,256,192:128}" \
  --variants "${FLASHTILE_VARIANTS:-none,causal,causal_top_left,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,alibi_per_batch,alibi_causal,sinks,sinks_causal,document_mask}" "$@"
build/tools/flashtile aot --check .device/aot-fa1 --arch "$ARCH"
cp build-rt/tools/flashtile build-rt/tests/gpu/flashtile_gpu_tests .device/bin/
cp build-rt/runtime/libflashtile.so .device/lib/
du -sh .device
