#!/usr/bin/env bash
# backward-anchors.sh — on the GPU machine: flashtile's backward beside its anchors in one run
# (bench/backward_bench.py --bench --variants --deterministic): FA4 (flash-attn-4's SM90 kernels, when
# bench/device/fa4-install.sh has installed them on this machine; else that column is skipped), cuDNN, FA2 (SDPA FLASH)
# and compiled FlexAttention. Prints the head-dim table (backward TFLOP/s, forward too, ratios to FA4, cuDNN, Flex and
# deterministic/default) and the variants table at hd128 8k (plain, causal, softcap 30, ALiBi, causal window 1024:
# backward and training-step milliseconds, ratios to FA4 and Flex).
# Carry .device/python (flashtile's wheel: bench/device/python-prepare.sh; BWD_WHEEL_DIR names another folder; without
# it, a flashtile already installed in /tmp/flashtile-site by an earlier call on this warm machine is used).
# With FA4, from the repository root: bash bench/device/fa4-install.sh; bash bench/device/backward-anchors.sh
# Cases in priority order, so that a run cut at its time limit keeps the most wanted rows: hd128 8k's variants, then
# ANCHORS_SHAPES (D:S pairs; default hd 64, 96, 192, 256 at 8k, then hd128 at 1k, 2k, 16k). ANCHORS_FLEX_SHAPES: where
# Flex runs (each shape and case is a compile; default hd64 and hd128 at 8k; "all"). ANCHORS_TIMEOUT: seconds
# (default 450). ANCHORS_ARGS: more arguments for backward_bench.py. Compiled kernels stay cached in /tmp (flashtile's,
# FA4's, Inductor's), so a run cut short can be repeated right after on the warm machine, much faster, in one process.
# Logs in $OUT: backward-anchors.log and backward-anchors.json (rewritten after each case).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
wheels=${BWD_WHEEL_DIR:-.device/python}
log=$OUT/backward-anchors.log json=$OUT/backward-anchors.json
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$log"
if ls "$wheels"/flashtile-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/flashtile-site \
    "$wheels"/flashtile-*.whl || exit 2
fi
[ -d /tmp/flashtile-site/flashtile ] || { echo "backward-anchors: no flashtile wheel in $wheels" | tee -a "$log"; exit 2; }
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1 FLASHTILE_CACHE_DIR=/tmp/flashtile-cache
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4-cache
if [ -f /tmp/fa4-site/.fa4-installed ] && [ -f /tmp/fa4-env.sh ]; then
  source /tmp/fa4-env.sh
  PYTHONPATH=$FA4_PYTHONPATH:$PYTHONPATH
else
  echo "backward-anchors: FA4 is not installed on this machine (bench/device/fa4-install.sh)" | tee -a "$log"
fi
shapes=${ANCHORS_SHAPES:-64:8192,96:8192,192:8192,256:8192,128:1024,128:2048,128:16384}
# shellcheck disable=SC2086  # ANCHORS_ARGS: words on purpose
timeout "${ANCHORS_TIMEOUT:-450}" python3 bench/backward_bench.py --bench --variants --deterministic \
  --variant-shape 128:8192 --shapes "$shapes" --flex-shapes "${ANCHORS_FLEX_SHAPES:-64:8192,128:8192}" \
  --json "$json" ${ANCHORS_ARGS:-} 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
if [ "$status" -eq 124 ] && [ -s "$json" ]; then
  echo "backward-anchors: cut at ${ANCHORS_TIMEOUT:-450} s; the tables of what was measured:" | tee -a "$log"
  python3 bench/backward_bench.py --table "$json" | tee -a "$log"
fi
# ANCHORS_KERNELS=D:S:C,... : then each backward's device time by kernel beside FA4's and cuDNN's, with the call's time
# alone, back to back and the host's issue time (bench/backward_kernels.py), at those shapes.
if [ -n "${ANCHORS_KERNELS:-}" ]; then
  timeout 150 python3 bench/backward_kernels.py --shapes "$ANCHORS_KERNELS" 2>&1 | grep -v Warning | tee -a "$log"
fi
echo "backward-anchors: exit $status" | tee -a "$log"
exit "$status"
