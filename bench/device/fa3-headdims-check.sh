#!/usr/bin/env bash
# fa3-headdims-check.sh — on the GPU machine, after bench/device/fa3-headdims-prepare.sh: fa3 at every head dim the
# runtime serves, with no schedule named (the dispatch rules choose), then its speed at head dims 32 and 96 beside
# torch SDPA's FLASH and CUDNN backends. Run from the repository root, or from a copy of .device/fa3hd with
# FLASHTILE_DEVICE_DIR=$PWD. Logs in $OUT, a summary line per step:
#   gpu-tests.log   flashtile_gpu_tests on the fa2 + fa3 library, no schedule named, strict mode and
#                   FLASHTILE_EXPECT_SCHEDULE=fa3: every case must run an fa3 kernel, never a fallback (in
#                   FLASHTILE_SHARDS gtest shards at once, 3 by default; their logs one after another)
#   variants.log    bench/check_variants.py --strict: every built-in variant, bf16 and f16, every head dim, fa3
#   control.log     the same GPU test binary on a library whose fa3 kernels are at head dim 128 alone (fa2's at every
#                   head dim): the cases at 96 and 32 must fail, once by FLASHTILE_EXPECT_SCHEDULE=fa3 and once by
#                   strict mode, or the check above could not catch a fallback
#   bench.log/.md   bench/bench_attention.py at head dims 32 and 96, bf16 and f16, 1k-16k, same run as torch SDPA
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$HERE" || exit 2
D=${FLASHTILE_DEVICE_DIR:-$HERE/.device/fa3hd}
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 PYTHONUNBUFFERED=1
LIB=$D/lib/libflashtile.so
status=0
nvidia-smi -L | tee "$OUT/summary.log"
summary() { # summary NAME RC LOG
  echo "$1: exit $2, $(grep -E '^\[  (PASSED|FAILED)|checks passed|FAILED TESTS' "$3" | tr '\n' ' ')" | tee -a "$OUT/summary.log"
}
# Correctness (the GPU tests, in FLASHTILE_SHARDS gtest shards, and the variant checks side by side: none is timed).
SHARDS=${FLASHTILE_SHARDS:-3}
pids=()
for ((i = 0; i < SHARDS; ++i)); do
  env FLASHTILE_AOT_DIR="$D/fa2:$D/fa3" FLASHTILE_STRICT_SCHEDULE=1 FLASHTILE_EXPECT_SCHEDULE=fa3 GTEST_TOTAL_SHARDS=$SHARDS \
    GTEST_SHARD_INDEX=$i timeout -k 5 "${FLASHTILE_GPU_TESTS_TIMEOUT:-200}" "$D/bin/flashtile_gpu_tests" \
    >"$OUT/gpu-tests-$i.log" 2>&1 &
  pids+=($!)
done
timeout -k 5 "${FLASHTILE_VARIANTS_TIMEOUT:-200}" python3 bench/check_variants.py --lib "$LIB" \
  --aot-dir "$D/fa3-variants" --strict --no-speed --dtypes bf16,f16 --head-dims 32,64,96,128,192,256,192:128 \
  >"$OUT/variants.log" 2>&1
rc=$?
((rc == 0)) || status=1
summary variants $rc "$OUT/variants.log"
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=$?
done
((rc == 0)) || status=1
: >"$OUT/gpu-tests.log"
for ((i = 0; i < SHARDS; ++i)); do
  summary "gpu-tests shard $i" "$(grep -q '^\[  PASSED' "$OUT/gpu-tests-$i.log" && ! grep -q '^\[  FAILED' "$OUT/gpu-tests-$i.log" && echo 0 || echo 1)" "$OUT/gpu-tests-$i.log"
  cat "$OUT/gpu-tests-$i.log" >>"$OUT/gpu-tests.log"
  rm -f "$OUT/gpu-tests-$i.log"
done
echo "gpu-tests: exit $rc (the worst shard's)" | tee -a "$OUT/summary.log"
# The control: fa3's rule is known (its hd128 kernels) but it has no kernel at 96 and 32: each way must fail.
: >"$OUT/control.log"
for mode in FLASHTILE_EXPECT_SCHEDULE=fa3 FLASHTILE_STRICT_SCHEDULE=1; do
  env FLASHTILE_AOT_DIR="$D/fa2:$D/fa3-hd128" "$mode" timeout -k 5 60 "$D/bin/flashtile_gpu_tests" \
    --gtest_filter='Cases/*_hd96_causal*:Cases/*_hd32_full*' >"$OUT/control-one.log" 2>&1
  rc=$?
  cat "$OUT/control-one.log" >>"$OUT/control.log"
  echo "control ($mode, fa3 kernels at hd128 only): exit $rc (must not be 0), $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$OUT/control-one.log" | tr '\n' ' ')" |
    tee -a "$OUT/summary.log"
  ((rc != 0)) || status=1
done
rm -f "$OUT/control-one.log"
# Speed, alone on the GPU.
timeout -k 5 "${FLASHTILE_BENCH_TIMEOUT:-150}" python3 bench/bench_attention.py --lib "$LIB" --aot-dir "$D/fa3" \
  --dtypes bf16,f16 --head-dims 32,96 --seqlens 1024,2048,4096,8192,16384 --markdown "$OUT/bench.md" \
  >"$OUT/bench.log" 2>&1
rc=$?
((rc == 0)) || status=1
echo "bench: exit $rc" | tee -a "$OUT/summary.log"
echo "fa3-headdims-check: exit $status" | tee -a "$OUT/summary.log"
exit $status
