#!/usr/bin/env bash
# dynsched-check.sh — on the GPU machine, after bench/device/dynsched-prepare.sh: fa3's dynamic tile scheduler
# (.device/aot-fa3dyn) checked for correctness and timed beside fa3's default kernels (.device/aot-fa3def) and torch
# SDPA (FLASH, CUDNN), in the same run. Writes to $OUT:
#   check-dyn.log, variants-dyn.md   none, causal, sliding_window_causal under the dynamic scheduler (FlashAttention's
#                                    error rule, GQA, varlen, Sq != Sk)
#   bench-dyn.md / bench-def.md      bf16, batch·seqlen = 16k, hidden 2048, head dims 64 and 128: dynamic / default
#   sliding-dyn.log / sliding-def.log   sliding_window_causal's speed line of check_variants (8k)
# FLASHTILE_STEPS (default "check,bench,sliding") picks the steps; each is bounded in time.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
LIB=.device/lib/libflashtile.so
STEPS=${FLASHTILE_STEPS:-check,bench,sliding}
VARIANTS=${FLASHTILE_VARIANTS:-none,causal,sliding_window_causal}
export FLASHTILE_CACHE_DIR=${FLASHTILE_CACHE_DIR:-/tmp/flashtile-cache}
status=0
has() { [[ ,$STEPS, == *,$1,* ]]; }
nvidia-smi -L || true
grep -l "bind=tileCounter@0" .device/aot-fa3dyn/*.manifest | wc -l | xargs echo "dynamic-scheduler manifests:"
if has check; then
  timeout -k 5 "${FLASHTILE_CHECK_TIMEOUT:-200}" python3 bench/check_variants.py --lib $LIB \
    --aot-dir .device/aot-fa3dyn --schedule fa3 --variants "$VARIANTS" --markdown "$OUT/variants-dyn.md" \
    >"$OUT/check-dyn.log" 2>&1 || status=1
  grep -c PASS "$OUT/check-dyn.log"; grep FAIL "$OUT/check-dyn.log" | head
fi
if has bench; then
  # Alternating, so that both libraries see the same clocks and temperature as far as one run allows.
  for lib in dyn def; do
    timeout -k 5 "${FLASHTILE_BENCH_TIMEOUT:-150}" python3 bench/bench_attention.py --lib $LIB \
      --aot-dir .device/aot-fa3$lib --schedule fa3 --dtypes bf16 --head-dims "${FLASHTILE_BENCH_HEAD_DIMS:-64,128}" \
      --seqlens "${FLASHTILE_BENCH_SEQLENS:-1024,2048,4096,8192,16384}" --markdown "$OUT/bench-$lib.md" \
      >"$OUT/bench-$lib.log" 2>&1 || status=1
    tail -n 25 "$OUT/bench-$lib.md" 2>/dev/null
  done
fi
if has sliding; then
  for lib in dyn def; do
    timeout -k 5 "${FLASHTILE_CHECK_TIMEOUT:-200}" python3 bench/check_variants.py --lib $LIB \
      --aot-dir .device/aot-fa3$lib --schedule fa3 --variants sliding_window_causal \
      --markdown "$OUT/sliding-$lib.md" >"$OUT/sliding-$lib.log" 2>&1 || status=1
  done
fi
grep -h -E "FAIL|Error|error" "$OUT"/*.log | head -20
exit $status
