#!/usr/bin/env bash
# Every test: install what is missing, build, run ctest (lit pass tests, GoogleTest for the DSL, interpreter,
# codegen + NVRTC and runtime; GPU tests skip without a GPU). Ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "${FLASHTILE_JOBS:-2}"
