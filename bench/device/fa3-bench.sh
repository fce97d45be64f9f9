#!/usr/bin/env bash
# fa3-bench.sh — on the GPU machine, after bench/device/prepare-fa3.sh: fa3's correctness and speed beside torch SDPA
# (FLASH and CUDNN backends) and FlexAttention in the same run. Logs and markdown tables go to $OUT.
#   variants.md / check.log   every built-in variant under fa3 against the fp32 reference (FlashAttention's error
#                             rule, GQA, Sq != Sk, varlen) and its speed at 8k beside FlexAttention's
#   bench-bf16.md, bench-f16.md   the issue's table: batch·seqlen = 16k, hidden 2048
#   bench-serial.log / bench-overlap.log   the intra-warpgroup overlap off and on, same run
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
LIB=.device/lib/libflashtile.so
export FLASHTILE_CACHE_DIR=${FLASHTILE_CACHE_DIR:-/tmp/flashtile-cache}
status=0
python3 bench/check_variants.py --lib $LIB --aot-dir .device/aot-fa3 --schedule fa3 --flex --markdown "$OUT/variants.md" \
  >"$OUT/check.log" 2>&1 || status=1
for dtype in bf16 f16; do
  python3 bench/bench_attention.py --lib $LIB --aot-dir .device/aot-fa3 --schedule fa3 --dtypes $dtype \
    --head-dims 64,128,256,192:128 --seqlens 1024,2048,4096,8192,16384 --markdown "$OUT/bench-$dtype.md" \
    >"$OUT/bench-$dtype.log" 2>&1 || status=1
done
for dir in fa3-serial aot-fa3; do
  name=$([[ $dir == fa3-serial ]] && echo serial || echo overlap)
  python3 bench/bench_attention.py --lib $LIB --aot-dir .device/$dir --schedule fa3 --dtypes bf16 --head-dims 128 \
    --seqlens 4096,16384 >"$OUT/bench-$name.log" 2>&1 || status=1
done
grep -h -E "FAIL|Error" "$OUT"/*.log | head -20
exit $status
