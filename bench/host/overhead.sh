#!/usr/bin/env bash
# overhead.sh — the host path of a forward call, timed on any machine (no GPU): builds a stand-in libcuda.so.1
# (tests/python/FakeCuda.c: every driver call succeeds, launches run nothing) and CApiOverhead.c against
# ./build's libflashtile_jit.so, then prints the first call with an empty kernel cache (MLIR + NVRTC), the first call
# of a fresh process with the cache on disk (a short-class call, and a default-class one), and the warm per-call
# cost of the C ABI (forward calls, and a backward at hd128 1k causal on the fake sm_90a: 6.9 µs here, 2026-12-07); then
# bench/python_timings.py with the stand-in torch of tests/python/host (its numbers include
# the stand-in's own Python-level tensor calls, which real PyTorch does in C). Needs `scripts/build.sh` first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
work=build/host-overhead
rm -rf "$work"
mkdir -p "$work/cache"
cuda=${CUDA_HOME:-/usr/local/cuda}
cc -O2 -shared -fPIC -Wl,-soname,libcuda.so.1 -Iruntime/include -I. -I"$cuda/include" -o "$work/libcuda.so.1" \
  tests/python/FakeCuda.c
cc -O2 -Iruntime/include -I"$cuda/include" bench/host/CApiOverhead.c -o "$work/capi-overhead" -Lbuild/capi \
  -lflashtile_jit -Wl,-rpath,"$PWD/build/capi"
export FLASHTILE_CACHE_DIR=$PWD/$work/cache LD_LIBRARY_PATH=$PWD/$work
echo "== C ABI, empty kernel cache"
"$work/capi-overhead" 200000
echo "== C ABI, a fresh process with the kernels on disk (short class: seqlen 128; default class: 4096)"
"$work/capi-overhead" 200000 | grep first
"$work/capi-overhead" 10 4096 >/dev/null
"$work/capi-overhead" 10 4096 | grep first
echo "== bench/python_timings.py with the stand-in torch"
FLASHTILE_LIBRARY=$PWD/build/capi/libflashtile_jit.so PYTHONPATH=$PWD/tests/python/host:$PWD/python \
  python3 bench/python_timings.py --iters 20000
