#!/usr/bin/env bash
# bwd-steps.sh — on the GPU machine: one step of fa3's backward checked and timed against the forms before it, in one
# run. Installs flashtile's wheel from .device/python (bench/device/python-prepare.sh), then
#   check   the gradients against an fp32 reference (bench/backward_bench.py --check) with no schedule named;
#   pytest  a time-limited selection of tests/python/gpu/test_backward.py (STEPS_PYTEST_K);
#   bench   the backward with no schedule named beside cuDNN (column flashtile), then once more for each kernel
#           library folder in STEPS_AOT ("name:dir,name:dir"; `flashtile aot --kinds backward` with the earlier form's
#           knobs, loaded through FLASHTILE_AOT_DIR, so its kernels replace the JIT's for the calls they serve), each
#           in its own process on the same warm machine.
# STEPS: which of check, pytest, bench run (default all). STEPS_SHAPES: D:S pairs (default hd 64 and 128 at 1k-16k).
# STEPS_CHECK_AOT=1: the check also runs once with each STEPS_AOT library loaded (its kernels' gradients checked too;
# STEPS_CHECK_AOT_ARGS: more backward_bench.py arguments of those runs, e.g. --check-head-dims 192).
# STEPS_BENCH_ARGS: more backward_bench.py arguments of every bench run (e.g. --deterministic: deterministic mode's
# column too).
# STEPS_ROUNDS=N (default 1): after the bench, N - 1 more rounds alternating the default and each library (no peers),
# each in its own process, their TFLOP/s printed a line each (run-to-run noise is a few per cent: compare medians).
# Logs in $OUT: steps-<part>.log and steps-<name>.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
steps=${STEPS:-check,pytest,bench}
shapes=${STEPS_SHAPES:-128:1024,128:2048,128:4096,128:8192,128:16384,64:2048,64:8192}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/steps-check.log"
source bench/device/bwd-env.sh || exit 2
status=0
if [[ ,$steps, == *,check,* ]]; then
  timeout "${STEPS_CHECK_TIMEOUT:-150}" python3 bench/backward_bench.py --check >> "$OUT/steps-check.log" 2>&1 || status=1
  grep -E "check:|FAIL" "$OUT/steps-check.log" | tail -8
  if [ "${STEPS_CHECK_AOT:-0}" = 1 ]; then
    IFS=',' read -ra libraries <<<"${STEPS_AOT:-}"
    for library in "${libraries[@]}"; do
      FLASHTILE_AOT_DIR=${library#*:} FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-${library%%:*} \
        timeout "${STEPS_CHECK_TIMEOUT:-150}" python3 bench/backward_bench.py --check ${STEPS_CHECK_AOT_ARGS:-} \
        > "$OUT/steps-check-${library%%:*}.log" 2>&1 || status=1
      echo "${library%%:*}: $(grep -E "check:" "$OUT/steps-check-${library%%:*}.log")"
      grep FAIL "$OUT/steps-check-${library%%:*}.log" | head -5
    done
  fi
fi
if [[ ,$steps, == *,pytest,* ]]; then
  ( cd tests/python/gpu && timeout "${STEPS_PYTEST_TIMEOUT:-150}" python3 -m pytest -q -n 16 -p no:cacheprovider \
      test_backward.py -k "${STEPS_PYTEST_K:-(True-mha and 128) or (False-gqa and 64) or deterministic or builtin or graphs or varlen}" ) \
    > "$OUT/steps-pytest.log" 2>&1 || status=1
  grep -E "passed|failed" "$OUT/steps-pytest.log" | tail -2; grep -E "^FAILED" "$OUT/steps-pytest.log" | head -10
fi
if [[ ,$steps, == *,bench,* ]]; then
  # shellcheck disable=SC2086  # STEPS_BENCH_ARGS: words on purpose
  timeout "${STEPS_BENCH_TIMEOUT:-200}" python3 bench/backward_bench.py --bench --shapes "$shapes" ${STEPS_BENCH_ARGS:-} \
    --peers "${STEPS_PEERS:-sdpa_cudnn}" --json "$OUT/steps-default.json" > "$OUT/steps-bench.log" 2>&1 || status=1
  IFS=',' read -ra libraries <<<"${STEPS_AOT:-}"
  for library in "${libraries[@]}"; do
    # shellcheck disable=SC2086  # STEPS_BENCH_ARGS: words on purpose
    FLASHTILE_AOT_DIR=${library#*:} FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-${library%%:*} \
      timeout "${STEPS_BENCH_TIMEOUT:-200}" python3 bench/backward_bench.py --bench --shapes "$shapes" ${STEPS_BENCH_ARGS:-} --peers "" \
      --json "$OUT/steps-${library%%:*}.json" >> "$OUT/steps-bench.log" 2>&1 || status=1
  done
  grep -vE "^ *$" "$OUT/steps-bench.log" | tail -60
  for ((round = 2; round <= ${STEPS_ROUNDS:-1}; ++round)); do
    for library in default: ${STEPS_AOT//,/ }; do
      name=${library%%:*} dir=${library#*:}
      # shellcheck disable=SC2086  # STEPS_BENCH_ARGS: words on purpose
      FLASHTILE_AOT_DIR=$dir FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-$name \
        timeout "${STEPS_BENCH_TIMEOUT:-200}" python3 bench/backward_bench.py --bench --shapes "$shapes" ${STEPS_BENCH_ARGS:-} --peers "" \
        > "$OUT/steps-round$round-$name.log" 2>&1 || status=1
      echo "round $round $name: $(grep -E '^hd' "$OUT/steps-round$round-$name.log" | awk '{printf "%s %s %s %s; ", $1, $2, $3, $4}')"
    done
  done
fi
echo "bwd-steps: exit $status"
exit $status
