#!/usr/bin/env bash
# forward-knobs.sh — on the GPU machine: the forward's tile configurations (ahead-of-time kernel libraries built on
# the build machine with the same sources as the wheel) against the JIT's default, FA4 and cuDNN, in one run
# (bench/forward_knobs.py). Installs flashtile's wheel from .device/python (bench/device/python-prepare.sh) and FA4
# where bench/device/fa4-install.sh installed it (bwd-env.sh). KNOBS_AOT: "name:dir,name:dir" (each library's kernels
# replace the JIT's for the calls they serve); KNOBS_SHAPES: D:S pairs (default hd96 at 8k and 16k).
# Log and rows in $OUT/forward-knobs.log, forward-knobs.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
shapes=${KNOBS_SHAPES:-96:8192,96:16384}
log=$OUT/forward-knobs.log json=$OUT/forward-knobs.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$log"
status=0
timeout "${KNOBS_TIMEOUT:-150}" python3 bench/forward_knobs.py --label default --shapes "$shapes" \
  --peers fa4,sdpa_cudnn --json "$json" 2>&1 | grep -v Warning | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
IFS=',' read -ra libraries <<<"${KNOBS_AOT:-}"
for library in "${libraries[@]}"; do
  FLASHTILE_AOT_DIR=${library#*:} FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-${library%%:*} \
    timeout "${KNOBS_TIMEOUT:-150}" python3 bench/forward_knobs.py --label "${library%%:*}" --shapes "$shapes" \
    --json "$json" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
echo "forward-knobs: exit $status" | tee -a "$log"
exit $status
