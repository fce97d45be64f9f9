# fa3-steps.sh — sourced by the fa3 GPU scripts (persistent-bench.sh, stage-o-bench.sh): the steps they share, on
# .device/aot-fa3 with FLASHTILE_SCHEDULE=fa3, each bounded in time, logs in $OUT. Before sourcing, set STEPS (a
# comma list) and MEMCHECK_DEFAULT (the gtest filter memcheck runs unless FLASHTILE_MEMCHECK_FILTER is set). Sets
# OUT, LIB, status and has(); runs the steps "tests", "memcheck" and "check" that STEPS names.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
LIB=.device/lib/libflashtile.so
export FLASHTILE_CACHE_DIR=${FLASHTILE_CACHE_DIR:-/tmp/flashtile-cache}
status=0
has() { [[ ,$STEPS, == *,$1,* ]]; }
nvidia-smi -L || true
if has tests; then
  FLASHTILE_AOT_DIR=$PWD/.device/aot-fa3 FLASHTILE_SCHEDULE=fa3 FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 \
    timeout -k 5 "${FLASHTILE_TESTS_TIMEOUT:-200}" .device/bin/flashtile_gpu_tests ${FLASHTILE_GTEST_FILTER:+--gtest_filter="$FLASHTILE_GTEST_FILTER"} \
    >"$OUT/gpu-tests.log" 2>&1 || status=1
  tail -3 "$OUT/gpu-tests.log"
fi
if has memcheck; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  FLASHTILE_AOT_DIR=$PWD/.device/aot-fa3 FLASHTILE_SCHEDULE=fa3 FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 \
    timeout -k 5 "${FLASHTILE_TESTS_TIMEOUT:-200}" "$sanitizer" --tool memcheck --error-exitcode 9 \
    .device/bin/flashtile_gpu_tests --gtest_filter="${FLASHTILE_MEMCHECK_FILTER:-$MEMCHECK_DEFAULT}" \
    >"$OUT/memcheck.log" 2>&1 || status=1
  tail -3 "$OUT/memcheck.log"
fi
if has check; then
  timeout -k 5 "${FLASHTILE_CHECK_TIMEOUT:-200}" python3 bench/check_variants.py --lib $LIB \
    --aot-dir .device/aot-fa3 --schedule fa3 --markdown "$OUT/variants.md" >"$OUT/check.log" 2>&1 || status=1
  grep -c PASS "$OUT/check.log"; grep FAIL "$OUT/check.log" | head
fi
