#!/usr/bin/env bash
# bench.sh — on the GPU machine: flashtile vs PyTorch SDPA (FA2, cuDNN) [and FlexAttention with --flex, FA4 with
# --fa4] on the issue's grid, through the C ABI, with kernels from .device/aot (see prepare.sh). Extra arguments go to
# bench_attention.py. FA4 imports where bench/device/fa4-install.sh installed it on this machine (/tmp/fa4-env.sh).
# Writes $OUT/bench.json and $OUT/bench.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -f /tmp/fa4-env.sh ]; then
  source /tmp/fa4-env.sh
  export PYTHONPATH=$FA4_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH} FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 \
    FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4-cache
fi
PYTHONUNBUFFERED=1 python3 bench/bench_attention.py --lib .device/lib/libflashtile.so --aot-dir .device/aot \
  --cli .device/bin/flashtile --compile-times .device/compile-times.txt \
  --json "$OUT/bench.json" --markdown "$OUT/bench.md" "$@" 2>&1 | tee "$OUT/bench.log"
