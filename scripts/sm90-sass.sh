#!/usr/bin/env bash
# sm90-sass.sh — unpacks nvdisasm from its pip wheel (nvidia-cuda-nvdisasm) into .whl/nvdisasm/ (git-ignored) and
# runs the runtime tests' SASS check of the sm90 prelude (HGMMA, UTMALDG/UTMASTG, SYNCS, USETMAXREG), which skips
# while nvdisasm is missing. The wheel is taken from .whl/*.whl, or downloaded with pip when there is none.
# Usage: bash scripts/sm90-sass.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
if ! find .whl/nvdisasm -name nvdisasm -type f 2>/dev/null | grep -q .; then
  mkdir -p .whl
  wheel=$(ls .whl/nvidia_cuda_nvdisasm-*.whl 2>/dev/null | head -n 1 || true)
  if [[ -z $wheel ]]; then
    python3 -m pip download --no-deps --only-binary=:all: -d .whl nvidia-cuda-nvdisasm
    wheel=$(ls .whl/nvidia_cuda_nvdisasm-*.whl | head -n 1)
  fi
  rm -rf .whl/nvdisasm
  python3 -m zipfile -e "$wheel" .whl/nvdisasm
fi
nvdisasm=$(find .whl/nvdisasm -name nvdisasm -type f | head -n 1)
chmod +x "$nvdisasm"
echo "nvdisasm: $nvdisasm"
cmake --build "$BUILD" --target flashtile_runtime_tests
FLASHTILE_NVDISASM=$PWD/$nvdisasm "$BUILD/tests/unit/runtime/flashtile_runtime_tests" --gtest_filter='Sm90Prelude.*'
