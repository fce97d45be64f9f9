#!/usr/bin/env bash
# Every test: install what is missing, build, run ctest (lit pass tests, GoogleTest for the DSL, interpreter,
# codegen + NVRTC and runtime; GPU tests skip without a GPU), after the Python package's wheel, installed in a
# fresh virtual environment, and the installation (scripts/python-test.sh). Ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/python-test.sh
# ctest pads every name with dots out to the longest name's width; its lines are printed without them (the
# failures' output and the summary pass through unchanged; pipefail keeps ctest's exit status).
ctest --test-dir build --output-on-failure -j "${FLASHTILE_JOBS:-2}" |
  sed -u -E 's/^( *[0-9]+\/[0-9]+ +Test +#[0-9]+: [^ ]+) \.+ */\1  /'
