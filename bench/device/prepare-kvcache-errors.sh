#!/usr/bin/env bash
# prepare-kvcache-errors.sh — on the build machine: what bench/device/kvcache-errors-check.sh runs on the GPU machine,
# in .device/kvcache-errors/ (git-ignored): the decode schedule's kernels (plain and KV-cache, none and causal, bf16
# and f16, head dims 64 and 128) and the runtime-only flashtile_kvcache_gpu_tests, both built at this revision.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile_kvcache_gpu_tests
D=.device/kvcache-errors
rm -rf "$D"
mkdir -p "$D/bin"
build/tools/flashtile aot --arch "$ARCH" --schedule decode --variants none,causal --head-dims 64,128 \
  --out "$D/decode" >/dev/null
cp build-rt/tests/gpu/flashtile_kvcache_gpu_tests "$D/bin/"
cp bench/device/kvcache-errors-check.sh "$D/"
ls "$D"/decode/*.manifest | wc -l
du -sh "$D"
