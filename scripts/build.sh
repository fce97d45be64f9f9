#!/usr/bin/env bash
# Configures and builds flashtile in ./build (Release, Ninja, two jobs: MLIR translation units are heavy).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build build -j "${FLASHTILE_JOBS:-2}"
