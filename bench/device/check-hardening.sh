#!/usr/bin/env bash
# check-hardening.sh — run on the GPU machine after bench/device/prepare.sh (with .device/ copied there):
#   1. bench/device/bad_aot.py: every kind of bad ahead-of-time kernel and bad variant numbers through the C ABI
#      (each must be a clear error; O untouched), and an all-empty varlen call with null tensors;
#   2. compute-sanitizer memcheck over flashtile_gpu_tests (every head dim, dtype, causal or not, varlen) against
#      .device/aot, bounded by FLASHTILE_MEMCHECK_TIMEOUT (default 420 s) so the logs still come back.
# Extra arguments go to the test binary (e.g. --gtest_filter='Cases/*hd128*' to memcheck a subset).
# Writes $OUT/bad-aot.log, $OUT/memcheck.log. Exit status: 0 when both pass.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DEVICE_DIR=${FLASHTILE_DEVICE_DIR:-.device}
OUT=${OUT:-$PWD/$DEVICE_DIR/out}
mkdir -p "$OUT" || exit 2
rc=0

echo "== bad ahead-of-time kernels and variant numbers through the C ABI"
python3 bench/device/bad_aot.py --lib "$DEVICE_DIR/lib/libflashtile.so" --aot "$DEVICE_DIR/aot" \
  --variants "$DEVICE_DIR/aot-variants" 2>&1 | tee "$OUT/bad-aot.log"
((PIPESTATUS[0] == 0)) || rc=1

echo "== compute-sanitizer memcheck over flashtile_gpu_tests"
sanitizer=$(command -v compute-sanitizer || true)
[[ -z $sanitizer && -x /usr/local/cuda/bin/compute-sanitizer ]] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [[ -z $sanitizer ]]; then
  echo "error: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" | tee "$OUT/memcheck.log" >&2
  exit 2
fi
export FLASHTILE_AOT_DIR=$PWD/$DEVICE_DIR/aot FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1
timeout -k 10 "${FLASHTILE_MEMCHECK_TIMEOUT:-420}" "$sanitizer" --tool memcheck --error-exitcode 99 \
  --print-limit 20 "$DEVICE_DIR/bin/flashtile_gpu_tests" "$@" >"$OUT/memcheck.log" 2>&1
mrc=$?
grep -E "ERROR SUMMARY|Invalid|out of bounds|PASSED|FAILED|tests ran" "$OUT/memcheck.log" | tail -n 25
case $mrc in
0) echo "memcheck: clean" ;;
99) echo "memcheck: errors reported (see $OUT/memcheck.log)"; rc=1 ;;
124 | 137) echo "memcheck: stopped after ${FLASHTILE_MEMCHECK_TIMEOUT:-420} s; pass --gtest_filter to check a subset"; rc=1 ;;
*) echo "memcheck: the tests failed (exit $mrc)"; rc=1 ;;
esac
exit $rc
