#!/usr/bin/env bash
# profile-backward.sh — on the GPU machine: Nsight Compute counters of fa3's backward main kernel (flashtile's wheel,
# no schedule named) and of FA4's SM90 backward (flash-attn-4, where bench/device/fa4-install.sh installed it) at one
# shape: bf16, hd128, seqlen 8k, batch 2, 16 heads, non-causal. Per kernel: duration, tensor pipe active, issue
# slots, instructions, warp stalls per issued instruction by reason, shared-memory bank conflicts, L2 and DRAM
# traffic. Clocks are left alone (--clock-control none). Writes $OUT/ncu-bwd-<who>.txt and a summary.
# PROFILE_HD (default 128) and PROFILE_CAUSAL (1: causal) pick another head dim (same batch, seqlen and heads) or the
# causal mask. PROFILE_PEER=cudnn profiles cuDNN's backward (SDPA with the cuDNN backend: issue 38's anchor at head dim
# 256, where it leads FA4) instead of FA4's.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
script='
import os, sys, torch
who = sys.argv[1]
hd, causal = int(os.environ.get("PROFILE_HD", "128")), os.environ.get("PROFILE_CAUSAL", "0") == "1"
q, k, v = (torch.randn(2, 8192, 16, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
if who == "flashtile":
    import flashtile
    out = flashtile.flash_attn_func(q, k, v, causal=causal)
elif who == "cudnn":
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal)
else:
    from flash_attn.cute import interface
    out = interface.flash_attn_func(q, k, v, causal=causal)
out = out[0] if isinstance(out, tuple) else out
do = torch.randn_like(out)
for _ in range(3):
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
'
source bench/device/ncu-metrics.sh || exit 2
tag=${PROFILE_HD:+-hd$PROFILE_HD}${PROFILE_CAUSAL:+-c$PROFILE_CAUSAL}  # in the output files' names
# The backward's kernels of the last (third) backward call: the main kernel is the longest.
timeout -k 5 150 ncu --clock-control none --metrics "$NCU_METRICS" --kernel-name regex:'_bwd$' --launch-skip 2 \
  --launch-count 1 python3 -c "$script" flashtile > "$OUT/ncu-bwd-flashtile$tag.txt" 2>&1
peer=${PROFILE_PEER:-fa4}
if [ "$peer" = cudnn ]; then
  # cuDNN's main kernel (cudnn_generated_..._flash_bprop_...) of the third backward call
  timeout -k 5 200 ncu --clock-control none --metrics "$NCU_METRICS" --kernel-name regex:'flash_bprop' \
    --launch-skip 2 --launch-count 1 python3 -c "$script" cudnn > "$OUT/ncu-bwd-cudnn$tag.txt" 2>&1
else
  timeout -k 5 200 ncu --clock-control none --metrics "$NCU_METRICS" --kernel-name regex:'(?i)bwd|backward' \
    --launch-skip "${FA4_SKIP:-6}" --launch-count "${FA4_COUNT:-4}" python3 -c "$script" fa4 > "$OUT/ncu-bwd-fa4$tag.txt" 2>&1
fi
ncu_summary "$OUT/ncu-bwd-flashtile$tag.txt" "$OUT/ncu-bwd-$peer$tag.txt" | tee "$OUT/ncu-bwd-summary$tag.txt"
