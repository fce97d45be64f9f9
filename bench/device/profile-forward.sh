#!/usr/bin/env bash
# profile-forward.sh — on the GPU machine: Nsight Compute counters of fa3's forward kernel (flashtile's wheel, no
# schedule named) and of FA4's SM90 forward (flash-attn-4, where bench/device/fa4-install.sh installed it) at one
# shape: bf16, batch 2, 16 heads, seqlen PROFILE_SEQLEN (8192), head dim PROFILE_D (128), causal when
# PROFILE_CAUSAL=1. The same counters as profile-backward.sh (ncu-metrics.sh: duration, tensor pipe active, issue
# slots, instructions, warp stalls by reason, shared-memory bank conflicts, L2 and DRAM traffic), clocks left alone.
# Writes $OUT/ncu-fwd-<who>.txt and $OUT/ncu-fwd-summary.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
source bench/device/ncu-metrics.sh || exit 2
script='
import sys, torch
who, d, s, causal = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
q, k, v = (torch.randn(2, s, 16, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
if who == "flashtile":
    import flashtile
    run = lambda: flashtile.flash_attn_func(q, k, v, causal=causal)
else:
    from flash_attn.cute import interface
    run = lambda: interface.flash_attn_func(q, k, v, causal=causal)
for _ in range(3):
    run()
torch.cuda.synchronize()
'
args=("${PROFILE_D:-128}" "${PROFILE_SEQLEN:-8192}" "${PROFILE_CAUSAL:-0}")
# The third call's attention kernel (the first two warm the caches and compile).
timeout -k 5 150 ncu --clock-control none --metrics "$NCU_METRICS" --kernel-name regex:'^flashtile_' --launch-skip 2 \
  --launch-count 1 python3 -c "$script" flashtile "${args[@]}" > "$OUT/ncu-fwd-flashtile.txt" 2>&1
timeout -k 5 200 ncu --clock-control none --metrics "$NCU_METRICS" --kernel-name regex:'(?i)fwd|forward|flash' \
  --launch-skip "${FA4_SKIP:-2}" --launch-count "${FA4_COUNT:-1}" python3 -c "$script" fa4 "${args[@]}" \
  > "$OUT/ncu-fwd-fa4.txt" 2>&1
# FA4's kernel names come from the CuTe DSL; where none matched, every launch after the inputs' three (random
# numbers), the third call's included.
if ! grep -q "gpu__time_duration" "$OUT/ncu-fwd-fa4.txt"; then
  timeout -k 5 200 ncu --clock-control none --metrics "$NCU_METRICS" --launch-skip 3 --launch-count 6 \
    python3 -c "$script" fa4 "${args[@]}" > "$OUT/ncu-fwd-fa4.txt" 2>&1
fi
ncu_summary "$OUT"/ncu-fwd-flashtile.txt "$OUT"/ncu-fwd-fa4.txt | tee "$OUT/ncu-fwd-summary.txt"
