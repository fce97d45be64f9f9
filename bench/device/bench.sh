#!/usr/bin/env bash
# bench.sh — on the GPU machine: flashtile vs PyTorch SDPA (FA2, cuDNN) [and FlexAttention with --flex] on the
# issue's grid, through the C ABI, with kernels from .device/aot (see prepare.sh). Extra arguments go to
# bench_attention.py. Writes $OUT/bench.json and $OUT/bench.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
PYTHONUNBUFFERED=1 python3 bench/bench_attention.py --lib .device/lib/libflashtile.so --aot-dir .device/aot \
  --cli .device/bin/flashtile --compile-times .device/compile-times.txt \
  --json "$OUT/bench.json" --markdown "$OUT/bench.md" "$@" 2>&1 | tee "$OUT/bench.log"
