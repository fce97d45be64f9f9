#!/usr/bin/env bash
# kvcache-errors-check.sh — on the GPU machine, after bench/device/prepare-kvcache-errors.sh: the KV cache's device
# error record. flashtile_kvcache_gpu_tests' KvCacheGpuBadValues.* (bad cache_seqlens, cache_batch_idx and block-table
# values on the device, each reported by Runtime::checkErrors with its argument; FLASHTILE_CHECK_KVCACHE=1 refusing
# them) and a set of good cases (nothing reported at any split count), then the same under compute-sanitizer
# memcheck. Runs from the folder it was copied to (.device/kvcache-errors); logs in $OUT.
set -uo pipefail
D=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 FLASHTILE_DECODE_AOT_DIR=$D/decode
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
GOOD='Cases/*bf16_hd128_causal_paged16*:Cases/*bf16_hd64_none_contiguous_idx*:Cases/*bf16_hd128_none_paged64*'
status=0
nvidia-smi -L || true
timeout -k 5 "${KVERR_TESTS_TIMEOUT:-120}" "$D/bin/flashtile_kvcache_gpu_tests" \
  --gtest_filter="KvCacheGpuBadValues.*:$GOOD" >"$OUT/kvcache-errors.log" 2>&1
rc=$?
((rc == 0)) || status=1
echo "tests: exit $rc, $(grep -c 'splits=' "$OUT/kvcache-errors.log") split lines, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/kvcache-errors.log" | tr '\n' ' ')"
grep -E 'reported:|bad values,' "$OUT/kvcache-errors.log" | cut -c1-400
timeout -k 5 "${KVERR_MEMCHECK_TIMEOUT:-150}" "$sanitizer" --tool memcheck --error-exitcode 9 \
  "$D/bin/flashtile_kvcache_gpu_tests" --gtest_filter='KvCacheGpuBadValues.*:Cases/*bf16_hd128_causal_paged16*' \
  >"$OUT/kvcache-errors-memcheck.log" 2>&1
rc=$?
((rc == 0)) || status=1
echo "memcheck: exit $rc, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/kvcache-errors-memcheck.log" | tr '\n' ' ')"
grep -h "ERROR SUMMARY" "$OUT/kvcache-errors-memcheck.log"
echo "kvcache-errors-check: exit $status"
exit $status
