#!/usr/bin/env bash
# prepare-plan.sh — on the build machine: what bench/device/plan-check.sh runs on the GPU machine, in .device/plan/
# (git-ignored): one kernel library per way a module is launched — fa2 (one kernel), fa3 (TMA descriptors,
# persistent blocks), fa3 with the dynamic scheduler (a zeroed counter workspace), fa1 (repeated launches with a
# state workspace), decode (split-KV: attention + combine by programmatic dependent launch, and KV-cache modules
# that append first, with rotary) — and the runtime-only test binaries. Head dims 64 and 128, none and causal.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile_gpu_tests flashtile_decode_gpu_tests \
  flashtile_kvcache_gpu_tests
D=.device/plan
rm -rf "$D"
mkdir -p "$D/bin"
aot() { build/tools/flashtile aot --arch "$ARCH" --variants none,causal "$@" >/dev/null; }
aot --out "$D/fa2" --head-dims 64,128
aot --out "$D/fa3" --schedule fa3 --head-dims 64,128
aot --out "$D/fa3-dynamic" --schedule fa3 --scheduler dynamic --dtypes bf16 --head-dims 128
aot --out "$D/fa1" --schedule fa1 --dtypes bf16 --head-dims 64,128
aot --out "$D/decode" --schedule decode --head-dims 64,128 --rotary none,halves,interleaved
cp build-rt/tests/gpu/flashtile_gpu_tests build-rt/tests/gpu/flashtile_decode_gpu_tests \
  build-rt/tests/gpu/flashtile_kvcache_gpu_tests "$D/bin/"
ls "$D"/*/ | grep -c manifest
du -sh "$D"
