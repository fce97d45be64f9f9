#!/usr/bin/env bash
# ab-decode.sh — on the GPU machine: the decode rows of bench/decode_bench.py on several decode kernel libraries in
# alternation (FLASHTILE_DECODE_DIRS, default "aot-decode", directories under .device/ made with
# `flashtile aot --schedule decode` and different knobs), FLASHTILE_REPEATS rounds (default 2), torch SDPA in every
# run. Registers and shared memory of each kernel first (cuobjdump). Logs to $OUT/ab.log, one JSON per run;
# extra arguments go to bench/decode_bench.py (e.g. --kvcache 0 --cases B).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
DIRS=${FLASHTILE_DECODE_DIRS:-aot-decode}
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader >"$OUT/gpu.txt"
for d in $DIRS; do
  for c in .device/"$d"/*.cubin; do
    echo "$d $(cuobjdump --dump-resource-usage "$c" 2>/dev/null | grep -oE 'REG:[0-9]+|SHARED:[0-9]+|LOCAL:[0-9]+' | tr '\n' ' ') $(basename "$c")"
  done
done >"$OUT/regs.txt"
for r in $(seq "${FLASHTILE_REPEATS:-2}"); do
  for d in $DIRS; do
    echo "=== run $r $d" >>"$OUT/ab.log"
    timeout 280 python3 bench/decode_bench.py --lib .device/lib/libflashtile.so --aot-dir .device/aot \
      --decode-aot-dir ".device/$d" --json "$OUT/$d-$r.json" "$@" >>"$OUT/ab.log" 2>&1
  done
done
