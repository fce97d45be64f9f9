#!/usr/bin/env bash
# Mutation-fuzzes flashtile-opt over the lit inputs for FUZZ_SECONDS (default 60), with a new seed each run (ctest
# runs a fixed seed); fails on any crash or hang and saves the crashing inputs in BUILD_DIR/fuzz-crashes.
# ctest runs the same check (test `fuzz-ir`). Extra arguments go to tests/fuzz/fuzz_ir.py (e.g. --seed N).
#   bash scripts/fuzz-ir.sh [BUILD_DIR]   # BUILD_DIR defaults to build; build-sanitize gives ASan/UBSan reports
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
exec python3 tests/fuzz/fuzz_ir.py --opt "$BUILD/tools/flashtile-opt" --corpus tests/lit \
  --seconds "${FUZZ_SECONDS:-60}" --out "$BUILD/fuzz-crashes" "$@"
