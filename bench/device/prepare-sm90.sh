#!/usr/bin/env bash
# prepare-sm90.sh — on the build machine: build the sm90 primitive tests (tests/gpu/Sm90PrimitivesTest.cpp) in the
# runtime-only configuration (no MLIR; static gtest and libstdc++, like flashtile_gpu_tests) and put the binary in
# .device/bin/ (git-ignored). Then, with .device/ on the GPU machine: bash bench/device/run-sm90-tests.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON \
  -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-1}" --target flashtile_sm90_gpu_tests
mkdir -p .device/bin
cp build-rt/tests/gpu/flashtile_sm90_gpu_tests .device/bin/
ls -l .device/bin/flashtile_sm90_gpu_tests
