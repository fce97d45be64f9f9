#!/usr/bin/env bash
# prepare-decode.sh — on the build machine: fill .device/ (git-ignored) with what the decode checks run on the GPU
# machine, next to prepare.sh's files:
#   .device/aot/         fa2 kernels (bf16/f16, head dims 64 and 128; FLASHTILE_HEAD_DIMS overrides), and the
#                        built-in variants at bf16, head dim 128, in .device/aot-variants
#   .device/aot-decode/  the decode schedule's split-KV kernels of the same variants and head dims: without the
#                        KV-cache code (plain decode calls) and with it (`_kvcache` entries, cache calls), the latter
#                        also rotating Q and the appended keys (`_kvcache_rotary[_interleaved]`, rotary calls)
#   .device/bin/         runtime-only binaries: flashtile, flashtile_decode_gpu_tests, flashtile_kvcache_gpu_tests
#   .device/lib/         libflashtile.so (C ABI with CApiDecode.h and CApiKvCache.h, for bench/decode_bench.py)
# Then run bench/device/run-decode-tests.sh and bench/device/decode-bench.sh on the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
HEAD_DIMS=${FLASHTILE_HEAD_DIMS:-64,128}
VARIANTS=${FLASHTILE_VARIANTS:-none,causal,causal_top_left,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,alibi_causal,sinks,sinks_causal}
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}"
rm -rf .device/aot .device/aot-decode .device/aot-variants .device/aot-decode-variants .device/bin .device/lib
mkdir -p .device/bin .device/lib
# fa2: none and causal at both dtypes (the fallback and the prefill check), the other variants at bf16 head dim 128
# (the decode kernels' comparison); decode: the same.
build/tools/flashtile aot --arch "$ARCH" --out .device/aot --variants none,causal --head-dims "$HEAD_DIMS"
build/tools/flashtile aot --arch "$ARCH" --out .device/aot-variants --dtypes bf16 --head-dims 128 --variants "$VARIANTS"
build/tools/flashtile aot --arch "$ARCH" --schedule decode --out .device/aot-decode --variants none,causal \
  --head-dims "$HEAD_DIMS" --rotary none,halves,interleaved
build/tools/flashtile aot --arch "$ARCH" --schedule decode --out .device/aot-decode-variants --dtypes bf16 \
  --head-dims 128 --variants "$VARIANTS" --rotary none,halves,interleaved
# Head dims 96 and 256 (bf16, none/causal): their combine kernels read partials in other widths (DecodeGpuTest).
build/tools/flashtile aot --arch "$ARCH" --schedule decode --out .device/aot-decode-hd --variants none,causal \
  --dtypes bf16 --head-dims 96,256
cp .device/aot-decode-hd/* .device/aot-decode/ 2>/dev/null || true
rm -rf .device/aot-decode-hd
# One directory per runtime: the variant kernels next to the none/causal ones (distinct specs).
cp .device/aot-variants/* .device/aot/ 2>/dev/null || true
cp .device/aot-decode-variants/* .device/aot-decode/ 2>/dev/null || true
rm -rf .device/aot-variants .device/aot-decode-variants
# index.txt lists one directory's kernels; the copies above merge two, so the merged ones are dropped.
rm -f .device/aot/index.txt .device/aot-decode/index.txt
cp build-rt/tools/flashtile build-rt/tests/gpu/flashtile_decode_gpu_tests build-rt/tests/gpu/flashtile_kvcache_gpu_tests \
  .device/bin/
cp build-rt/runtime/libflashtile.so .device/lib/
du -sh .device
