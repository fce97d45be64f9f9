#!/usr/bin/env bash
# Every test: install what is missing, build, run ctest (lit pass tests, GoogleTest for the DSL, interpreter,
# codegen + NVRTC and runtime; GPU tests skip without a GPU), after the Python package's wheel, installed in a
# fresh virtual environment, and the installation (scripts/python-test.sh). Ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
# NVRTC's compiles are kept between runs (runtime/lib/NvrtcMemo.h), as ccache keeps the build's objects: the codegen
# sweeps compile again only what a change altered. Set FLASHTILE_NVRTC_CACHE_DIR to move it, or to "" to turn it off;
# entries no run used for 14 days are removed.
if [ -z "${FLASHTILE_NVRTC_CACHE_DIR+set}" ] && [ -n "${XDG_CACHE_HOME:-${HOME:-}}" ]; then
  export FLASHTILE_NVRTC_CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/flashtile-nvrtc
fi
if [ -n "${FLASHTILE_NVRTC_CACHE_DIR:-}" ] && [ -d "$FLASHTILE_NVRTC_CACHE_DIR" ]; then
  find "$FLASHTILE_NVRTC_CACHE_DIR" -maxdepth 1 -name '*.nvrtc' -mtime +14 -delete
fi
bash scripts/python-test.sh
# ctest pads every name with dots out to the longest name's width; its lines are printed without them (the
# failures' output and the summary pass through unchanged; pipefail keeps ctest's exit status).
ctest --test-dir build --output-on-failure -j "${FLASHTILE_JOBS:-2}" |
  sed -u -E 's/^( *[0-9]+\/[0-9]+ +Test +#[0-9]+: [^ ]+) \.+ */\1  /'
