#!/usr/bin/env bash
# fa1-check.sh — on the GPU machine, after bench/device/prepare-fa1.sh: the fa1 teaching schedule's correctness (its
# speed is not a target). Only fa1's library is loaded, so a call fa1 has no kernel for fails instead of running
# another schedule's. Logs go to $OUT (default .device/out):
#   fa1-gpu-tests.log   flashtile_gpu_tests (forward cases: dtypes, head dims, causal, GQA, varlen, Sq != Sk) with
#                       FLASHTILE_SCHEDULE=fa1
#   fa1-memcheck.log    the hd128 cases under compute-sanitizer memcheck (the state workspace, the K/V step bounds)
#   fa1-variants.md / fa1-check.log   every built-in variant under fa1 against the fp32 reference
#                       (bench/check_variants.py --schedule fa1)
# Exit status: 0 when every step passed, 1 otherwise, 2 when .device/ lacks what prepare-fa1.sh makes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DEVICE_DIR=${FLASHTILE_DEVICE_DIR:-.device}
OUT=${OUT:-$PWD/$DEVICE_DIR/out}
mkdir -p "$OUT" || exit 2
AOT=$PWD/$DEVICE_DIR/aot-fa1
BIN=$DEVICE_DIR/bin/flashtile_gpu_tests
LIB=$DEVICE_DIR/lib/libflashtile.so
for need in "$AOT" "$BIN" "$LIB"; do
  if [[ ! -e $need ]]; then
    echo "error: $need is missing; run bash bench/device/prepare-fa1.sh on the build machine" >&2
    exit 2
  fi
done
export FLASHTILE_CACHE_DIR=${FLASHTILE_CACHE_DIR:-/tmp/flashtile-cache}
status=0
nvidia-smi -L || true
echo "== kernels: $(ls "$AOT"/*.manifest | wc -l) fa1 manifests in $AOT"

echo "== flashtile_gpu_tests, FLASHTILE_SCHEDULE=fa1"
FLASHTILE_AOT_DIR=$AOT FLASHTILE_SCHEDULE=fa1 FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 \
  timeout -k 5 "${FLASHTILE_TESTS_TIMEOUT:-400}" "$BIN" ${FLASHTILE_GTEST_FILTER:+--gtest_filter="$FLASHTILE_GTEST_FILTER"} \
  >"$OUT/fa1-gpu-tests.log" 2>&1 || status=1
tail -3 "$OUT/fa1-gpu-tests.log"

echo "== compute-sanitizer memcheck"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
FLASHTILE_AOT_DIR=$AOT FLASHTILE_SCHEDULE=fa1 FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 \
  timeout -k 5 "${FLASHTILE_TESTS_TIMEOUT:-400}" "$sanitizer" --tool memcheck --error-exitcode 9 \
  "$BIN" --gtest_filter="${FLASHTILE_MEMCHECK_FILTER:-Cases/*hd128*}" >"$OUT/fa1-memcheck.log" 2>&1 || status=1
tail -3 "$OUT/fa1-memcheck.log"

echo "== bench/check_variants.py --schedule fa1"
python3 bench/check_variants.py --lib "$LIB" --aot-dir "$AOT" --schedule fa1 --markdown "$OUT/fa1-variants.md" \
  >"$OUT/fa1-check.log" 2>&1 || status=1
tail -5 "$OUT/fa1-check.log"
grep -h -E "FAIL|Error|error" "$OUT"/fa1-*.log | head -20
exit $status
