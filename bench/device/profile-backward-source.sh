#!/usr/bin/env bash
# profile-backward-source.sh — on the GPU machine: where fa3's backward main kernel stalls, instruction by instruction.
# Nsight Compute's source counters (warp-state samples per SASS instruction) of flashtile's backward main kernel
# (the wheel from .device/python, no schedule named) at one shape: bf16, batch 2, 16 heads, non-causal; head dim and
# length from PROFILE_D (128) and PROFILE_S (8192). Writes $OUT/bwd-source.csv (the SASS page: per instruction its
# address, text, executed instructions and stall samples by reason) and $OUT/bwd-source-summary.txt (the sampled
# stall reasons over the kernel). Read the CSV with bench/sass_stalls.py.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
d=${PROFILE_D:-128} s=${PROFILE_S:-8192}
script='
import sys, torch, flashtile
d, s = int(sys.argv[1]), int(sys.argv[2])
q, k, v = (torch.randn(2, s, 16, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
out = flashtile.flash_attn_func(q, k, v)
do = torch.randn_like(out)
for _ in range(3):
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
'
rm -f "$OUT/bwd-source.ncu-rep"
timeout -k 5 200 ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
  --kernel-name regex:'_bwd$' --launch-skip 2 --launch-count 1 -o "$OUT/bwd-source" python3 -c "$script" "$d" "$s" \
  > "$OUT/bwd-source.log" 2>&1 || { tail -5 "$OUT/bwd-source.log"; exit 1; }
ncu -i "$OUT/bwd-source.ncu-rep" --page source --csv --print-source sass > "$OUT/bwd-source.csv" 2>> "$OUT/bwd-source.log"
ncu -i "$OUT/bwd-source.ncu-rep" --section WarpStateStats > "$OUT/bwd-source-summary.txt" 2>&1
rm -f "$OUT/bwd-source.ncu-rep"
wc -c "$OUT/bwd-source.csv"; head -c 600 "$OUT/bwd-source.csv"; echo; grep -E "Stall|Warp Cycles" "$OUT/bwd-source-summary.txt" | head -12
