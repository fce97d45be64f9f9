#!/usr/bin/env bash
# sweep.sh — on the GPU machine: time each FA2 configuration in .device/sweep/<hdNN_mM_nN_wW>/ (made on the build
# machine with `flashtile aot --block-m M --block-n N --warps W`) on bf16 at 2k and 8k, and print each kernel's
# registers/spills (cuobjdump --dump-resource-usage). Appends everything to $OUT/sweep.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
for dir in .device/sweep/*/; do
  name=$(basename "$dir")
  hd=${name#hd}; hd=${hd%%_*}
  echo "== $name" | tee -a "$OUT/sweep.log"
  for cubin in "$dir"*.cubin; do
    cuobjdump --dump-resource-usage "$cubin" 2>/dev/null | grep -oE 'REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+' | tr '\n' ' '
    echo " $(basename "$cubin")"
  done | tee -a "$OUT/sweep.log"
  PYTHONUNBUFFERED=1 python3 bench/bench_attention.py --lib .device/lib/libflashtile.so --aot-dir "$dir" \
    --dtypes bf16 --head-dims "$hd" --seqlens 2048,8192 2>&1 | grep -E '^bf16' | tee -a "$OUT/sweep.log"
done
