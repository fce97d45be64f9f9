#!/usr/bin/env bash
# prepare-fa3.sh — on the build machine: fill .device/ (git-ignored) with the fa3 (sm90: TMA, wgmma, mbarriers)
# kernel library and the runtime-only C ABI library for bench/device/fa3-bench.sh:
#   .device/aot-fa3/     every built-in variant, bf16 and f16, head dims 64, 128, 256 and 192:128, both shape classes
#   .device/fa3-serial/  none/causal bf16 hd128 without the intra-warpgroup overlap (the ablation)
#   .device/lib/         libflashtile.so
# Extra arguments go to both `flashtile aot` calls (e.g. --block-n 176). Then copy .device/ to the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}"
rm -rf .device/aot-fa3 .device/fa3-serial
mkdir -p .device/lib
build/tools/flashtile aot --schedule fa3 --out .device/aot-fa3 --shape-classes default,short --dtypes bf16,f16 \
  --head-dims "${FLASHTILE_HEAD_DIMS:-64,128,256,192:128}" \
  --variants "${FLASHTILE_VARIANTS:-none,causal,causal_top_left,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,alibi_per_batch,alibi_causal,sinks,sinks_causal,document_mask}" "$@"
build/tools/flashtile aot --schedule fa3 --intra-wg-overlap 0 --out .device/fa3-serial --shape-classes default \
  --dtypes bf16 --head-dims 128 --variants none,causal "$@"
cp build-rt/runtime/libflashtile.so .device/lib/
du -sh .device
