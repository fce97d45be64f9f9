#!/usr/bin/env bash
# Every test: install what is missing, build, run ctest (lit pass tests, GoogleTest for the DSL, interpreter,
# codegen + NVRTC and runtime; GPU tests skip without a GPU), after the Python package's wheel, installed in a
# fresh virtual environment, and the installation (scripts/python-test.sh). Ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/python-test.sh
ctest --test-dir build --output-on-failure -j "${FLASHTILE_JOBS:-2}"
