#!/usr/bin/env bash
# stage-o-bench.sh — on the GPU machine, after bench/device/prepare-fa3.sh and prepare-stage-o.sh: fa3 with its
# default knobs (O staged through shared memory where a block runs one tile) checked, and timed beside fa3 with O
# stored from the registers (--stage-o 0) and torch SDPA (FLASH, CUDNN) in the same run. Writes to $OUT:
#   gpu-tests.log      flashtile_gpu_tests with FLASHTILE_SCHEDULE=fa3 on .device/aot-fa3
#   memcheck.log       compute-sanitizer memcheck on a subset of those tests (step "memcheck")
#   check.log, variants.md   every built-in variant under fa3 (FlashAttention's error rule, GQA, varlen)
#   bench-staged.md / bench-direct.md   bf16, batch·seqlen = 16k, hidden 2048, alternating FLASHTILE_REPEATS times
# FLASHTILE_STEPS (default "tests,memcheck,check,bench") picks the steps; each is bounded in time.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
LIB=.device/lib/libflashtile.so
STEPS=${FLASHTILE_STEPS:-tests,memcheck,check,bench}
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
    .device/bin/flashtile_gpu_tests --gtest_filter="${FLASHTILE_MEMCHECK_FILTER:-Cases/*bf16_hd256*:Varlen/*bf16_hd256*}" \
    >"$OUT/memcheck.log" 2>&1 || status=1
  tail -3 "$OUT/memcheck.log"
fi
if has check; then
  timeout -k 5 "${FLASHTILE_CHECK_TIMEOUT:-200}" python3 bench/check_variants.py --lib $LIB \
    --aot-dir .device/aot-fa3 --schedule fa3 --markdown "$OUT/variants.md" >"$OUT/check.log" 2>&1 || status=1
  grep -c PASS "$OUT/check.log"; grep FAIL "$OUT/check.log" | head
fi
if has bench; then
  for round in $(seq "${FLASHTILE_REPEATS:-2}"); do
    for lib in staged direct; do
      timeout -k 5 "${FLASHTILE_BENCH_TIMEOUT:-150}" python3 bench/bench_attention.py --lib $LIB \
        --aot-dir .device/$([[ $lib == staged ]] && echo aot-fa3 || echo aot-fa3direct) --schedule fa3 --dtypes bf16 \
        --head-dims "${FLASHTILE_BENCH_HEAD_DIMS:-64,128,256}" --seqlens "${FLASHTILE_BENCH_SEQLENS:-1024,2048,4096,8192,16384}" \
        --markdown "$OUT/bench-$lib-$round.md" >"$OUT/bench-$lib-$round.log" 2>&1 || status=1
    done
  done
fi
grep -h -E "FAIL|Error|error" "$OUT"/*.log | head -20
exit $status
