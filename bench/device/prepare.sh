#!/usr/bin/env bash
# prepare.sh — on the build machine: fill .device/ (git-ignored) with what the GPU machine runs:
#   .device/aot/   kernels compiled ahead of time by the full build's `flashtile aot` (sm_90a by default), for
#                  every head dim the GPU tests check (FLASHTILE_HEAD_DIMS overrides them; extra arguments go to
#                  `flashtile aot`, which refuses a flag given twice)
#   .device/bin/   runtime-only binaries: flashtile (CLI), flashtile_gpu_tests
#   .device/lib/   libflashtile.so (C ABI, for bench/bench_attention.py)
# Then copy .device/ to the GPU machine and run bench/device/run-gpu-tests.sh or bench/device/bench.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}"
rm -rf .device/aot .device/aot-variants .device/bin .device/lib
mkdir -p .device/bin .device/lib
# Its table (MLIR and NVRTC milliseconds per kernel, on this machine) goes to compile-times.txt for bench.sh.
build/tools/flashtile aot --arch "$ARCH" --out .device/aot --head-dims "${FLASHTILE_HEAD_DIMS:-32,64,96,128,192,256,192:128}" "$@" |
  tee .device/compile-times.txt
# The built-in variants at bf16, head dim 128, for bench/check_variants.py (a directory of its own: the GPU tests
# load .device/aot whole).
build/tools/flashtile aot --arch "$ARCH" --out .device/aot-variants --dtypes bf16 --head-dims 128 \
  --variants "${FLASHTILE_VARIANTS:-none,causal,causal_top_left,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,alibi_causal,sinks,sinks_causal,document_mask}"
cp build-rt/tools/flashtile build-rt/tests/gpu/flashtile_gpu_tests .device/bin/
cp build-rt/runtime/libflashtile.so .device/lib/
du -sh .device
