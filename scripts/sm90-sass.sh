#!/usr/bin/env bash
# sm90-sass.sh — unpacks nvdisasm from its pip wheel (nvidia-cuda-nvdisasm) into .whl/nvdisasm/ (git-ignored) and
# runs the runtime tests' SASS check of the sm90 prelude (HGMMA, UTMALDG/UTMASTG, SYNCS, USETMAXREG), which skips
# while nvdisasm is missing. The wheel is taken from .whl/*.whl, or downloaded with pip when there is none.
# Usage: bash scripts/sm90-sass.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
source scripts/nvdisasm-wheel.sh
echo "nvdisasm: $nvdisasm"
cmake --build "$BUILD" --target flashtile_runtime_tests
FLASHTILE_NVDISASM=$nvdisasm "$BUILD/tests/unit/runtime/flashtile_runtime_tests" --gtest_filter='Sm90Prelude.*'
