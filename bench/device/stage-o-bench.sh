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
STEPS=${FLASHTILE_STEPS:-tests,memcheck,check,bench}
MEMCHECK_DEFAULT='Cases/*bf16_hd256*:Varlen/*bf16_hd256*'
source "$(dirname "${BASH_SOURCE[0]}")/fa3-steps.sh"
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
