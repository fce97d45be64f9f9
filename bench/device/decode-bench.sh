#!/usr/bin/env bash
# decode-bench.sh — on the GPU machine: decode timings (issue 13's table, speculative decoding, a prefill check)
# of flashtile's decode schedule next to PyTorch SDPA's FLASH and CUDNN backends in the same run, bandwidth counted
# as the K+V bytes a call reads, then the same decode cases over a contiguous and a paged KV cache (page 64; paged
# vs contiguous, SDPA on the same K/V). Kernels from .device/aot and .device/aot-decode (prepare-decode.sh): plain
# decode rows run the kernels without the cache code, cache rows the `_kvcache` ones.
# Writes $OUT/decode-bench.log and $OUT/decode-bench.json; extra arguments go to bench/decode_bench.py.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
PYTHONUNBUFFERED=1 python3 bench/decode_bench.py --lib .device/lib/libflashtile.so --aot-dir .device/aot \
  --decode-aot-dir .device/aot-decode --json "$OUT/decode-bench.json" "$@" 2>&1 | tee "$OUT/decode-bench.log"
exit "${PIPESTATUS[0]}"
