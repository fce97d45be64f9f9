#!/usr/bin/env bash
# profile-backward-source.sh — on the GPU machine: where fa3's backward main kernel stalls, instruction by instruction.
# Nsight Compute's source counters (warp-state samples per SASS instruction) of flashtile's backward main kernel
# (the wheel from .device/python, no schedule named) at one shape: bf16, batch 2, 16 heads, non-causal; head dim and
# length from PROFILE_D (128) and PROFILE_S (8192). Writes $OUT/bwd-source.csv (the SASS page: per instruction its
# address, text, executed instructions and stall samples by reason) and $OUT/bwd-source-summary.txt (the sampled
# stall reasons over the kernel). Read the CSV with bench/sass_stalls.py. PROFILE_WHO=fa4: FA4's SM90 backward main
# kernel instead (flash-attn-4, where bench/device/fa4-install.sh installed it), to $OUT/bwd-source-fa4.csv and
# $OUT/bwd-source-fa4-summary.txt, for the same reading beside ours.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
d=${PROFILE_D:-128} s=${PROFILE_S:-8192}
script='
import sys, torch, flashtile
d, s, who = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
q, k, v = (torch.randn(2, s, 16, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
if who == "fa4":
    from flash_attn.cute import interface
    out = interface.flash_attn_func(q, k, v)
    out = out[0] if isinstance(out, tuple) else out
else:
    out = flashtile.flash_attn_func(q, k, v)
do = torch.randn_like(out)
for _ in range(3):
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
'
who=${PROFILE_WHO:-flashtile}
name=bwd-source regex='_bwd$'
[ "$who" = fa4 ] && name=bwd-source-fa4 regex='bwd_sm90'
rm -f "$OUT/$name.ncu-rep"
timeout -k 5 200 ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
  --kernel-name regex:"$regex" --launch-skip 2 --launch-count 1 -o "$OUT/$name" python3 -c "$script" "$d" "$s" "$who" \
  > "$OUT/$name.log" 2>&1 || { tail -5 "$OUT/$name.log"; exit 1; }
ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name.csv" 2>> "$OUT/$name.log"
ncu -i "$OUT/$name.ncu-rep" --section WarpStateStats > "$OUT/$name-summary.txt" 2>&1
rm -f "$OUT/$name.ncu-rep"
wc -c "$OUT/$name.csv"; head -c 600 "$OUT/$name.csv"; echo; grep -E "Stall|Warp Cycles" "$OUT/$name-summary.txt" | head -12
