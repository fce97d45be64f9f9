#!/usr/bin/env bash
# plan-check.sh — on the GPU machine, after bench/device/prepare-plan.sh: every way a module is launched, run through
# its launch plan against the fp32 reference (head dims 64 and 128, none and causal): fa2, fa3 (TMA, persistent),
# fa3's dynamic scheduler, fa1's repeated launches, decode's split-KV pair and the KV-cache modules (append first,
# rotary); then compute-sanitizer memcheck on a few cases of each. One log per step in $OUT; a summary line each.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
D=$PWD/.device/plan
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1
status=0
nvidia-smi -L || true
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
HD='*hd64_*:*hd128_*'
# The libraries hold none and causal only: cases of other variants are left out.
OTHERS='Variants/*:Rotary/*_causal_top_left_*:Rotary/*_sliding_*:Rotary/*_softcap_*:Rotary/*_alibi_*:Rotary/*_sinks_*'
step() { # step NAME TIMEOUT ENV... -- COMMAND...
  local name=$1 limit=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  ((rc == 0)) || status=1
  echo "$name: exit $rc, $(grep -c ' PASS' "$OUT/$name.log") PASS lines, $(grep -c 'splits=' "$OUT/$name.log") split lines, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
}
step fa2 120 FLASHTILE_AOT_DIR=$D/fa2 -- $D/bin/flashtile_gpu_tests --gtest_filter="$HD:ForwardGpuArgs.*"
step fa3 150 FLASHTILE_AOT_DIR=$D/fa3 FLASHTILE_SCHEDULE=fa3 -- $D/bin/flashtile_gpu_tests --gtest_filter="$HD"
step fa3-dynamic 90 FLASHTILE_AOT_DIR=$D/fa3-dynamic FLASHTILE_SCHEDULE=fa3 -- $D/bin/flashtile_gpu_tests \
  --gtest_filter='*bf16_hd128_*'
step fa1 90 FLASHTILE_AOT_DIR=$D/fa1 FLASHTILE_SCHEDULE=fa1 -- $D/bin/flashtile_gpu_tests --gtest_filter='*bf16_hd64_*:*bf16_hd128_*'
step decode 150 FLASHTILE_AOT_DIR=$D/fa2 FLASHTILE_DECODE_AOT_DIR=$D/decode -- $D/bin/flashtile_decode_gpu_tests \
  --gtest_filter="$HD:DecodeGpuWorkspace.*-$OTHERS"
step kvcache 150 FLASHTILE_AOT_DIR=$D/fa2 FLASHTILE_DECODE_AOT_DIR=$D/decode -- $D/bin/flashtile_kvcache_gpu_tests \
  --gtest_filter="$HD:KvCacheGpuBadValues.*-$OTHERS"
step memcheck-fa3 120 FLASHTILE_AOT_DIR=$D/fa3 FLASHTILE_SCHEDULE=fa3 -- "$sanitizer" --tool memcheck --error-exitcode 9 \
  $D/bin/flashtile_gpu_tests --gtest_filter='Cases/*bf16_hd128_causal*Sq1000*:Cases/*bf16_hd64_full*:Varlen/*hd128*'
step memcheck-decode 120 FLASHTILE_AOT_DIR=$D/fa2 FLASHTILE_DECODE_AOT_DIR=$D/decode -- "$sanitizer" --tool memcheck \
  --error-exitcode 9 $D/bin/flashtile_decode_gpu_tests --gtest_filter='Cases/*hd64_*B1_H32x8_Sq1_Sk1:Cases/*hd128_*B2_H32x8_Sq1_Sk127*:DecodeGpuWorkspace.*'
step memcheck-kvcache 120 FLASHTILE_AOT_DIR=$D/fa2 FLASHTILE_DECODE_AOT_DIR=$D/decode -- "$sanitizer" --tool memcheck \
  --error-exitcode 9 $D/bin/flashtile_kvcache_gpu_tests --gtest_filter='Cases/*bf16_hd128_causal_paged16*:Rotary/*bf16_hd128_causal*interleaved'
grep -h "ERROR SUMMARY" "$OUT"/memcheck-*.log
echo "plan-check: exit $status"
exit $status
