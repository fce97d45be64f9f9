#!/usr/bin/env bash
# backward-final.sh — on the GPU machine, a short check of a backward build in priority order (each step
# time-limited, logs in $OUT): the gradient check (bench/backward_bench.py --check), compute-sanitizer memcheck and
# racecheck (backward-sanitize.sh), then test_backward.py's feature tests and the layout/user-variant tests.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
export BWD_WHEEL_DIR=${BWD_WHEEL_DIR:-.device/python}
OUT=$OUT BWD_STEPS=check BWD_CHECK_TIMEOUT=70 bash bench/device/backward-check.sh 2>&1 | grep -E "FAIL|fail|exit|passed" | tail -4
OUT=$OUT BWD_SANITIZE_TIMEOUT=45 bash bench/device/backward-sanitize.sh 2>&1 | tail -2
OUT=$OUT BWD_STEPS=pytest BWD_PYTEST_TIMEOUT=${BWD_PYTEST_TIMEOUT:-90} \
  BWD_PYTEST_FILES="test_backward.py test_backward_layouts.py test_backward_user_variants.py" \
  BWD_PYTEST_K="deterministic or sinks or builtin or graphs or packed or only_some or padded or double or user_variant or oracle or 192_and_128" \
  bash bench/device/backward-check.sh 2>&1 | tail -8
