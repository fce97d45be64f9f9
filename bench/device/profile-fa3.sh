#!/usr/bin/env bash
# profile-fa3.sh — on the GPU machine, after bench/device/prepare-fa3.sh and prepare-stage-o.sh (.device/aot-fa3,
# .device/bin/flashtile): Nsight Compute counters of fa3's kernel and of cuDNN's (torch SDPA's CUDNN backend) on the
# same shapes, bf16 hd128, batch·seqlen = 16k, hidden 2048: non-causal 1k and 4k, causal 4k. Per kernel: duration,
# the tensor pipe's active cycles (wgmma), instructions, issue slots, and the warp-stall reasons per issued instruction.
# Clocks are left alone (--clock-control none). Writes $OUT/ncu-fa3-*.txt and $OUT/ncu-cudnn-*.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
# The full set as raw metrics (every counter by name; the summary below greps the ones that say why).
collect=(--set full --page raw)
for shape in "nc 1024 16" "nc 4096 4" "causal 4096 4"; do
  read -r mask seqlen batch <<<"$shape"
  variant=$([[ $mask == causal ]] && echo causal || echo none)
  FLASHTILE_SCHEDULE=fa3 timeout -k 5 120 ncu --clock-control none --kernel-name regex:flashtile --launch-skip 2 \
    --launch-count 1 "${collect[@]}" .device/bin/flashtile run --aot-dir .device/aot-fa3 --variant $variant \
    --dtype bf16 --head-dim 128 --batch $batch --heads 16 --seqlen-q $seqlen --seqlen-k $seqlen --iters 1 --warmup 2 \
    > "$OUT/ncu-fa3-$mask-$seqlen.txt" 2>&1
  timeout -k 5 120 ncu --clock-control none --kernel-name regex:"sdpa|fmha|flash|attn" --launch-skip 2 --launch-count 1 \
    "${collect[@]}" python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn($batch, 16, $seqlen, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3))
causal = '$mask' == 'causal'
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
torch.cuda.synchronize()
" > "$OUT/ncu-cudnn-$mask-$seqlen.txt" 2>&1
done
for f in "$OUT"/ncu-fa3-*.txt "$OUT"/ncu-cudnn-*.txt; do
  echo "== $f"
  grep -E "ERROR|gpu__time_duration.sum |sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active |smsp__inst_executed.sum |smsp__issue_active.avg.pct_of_peak_sustained_active |smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio " "$f" | awk '{print $1, $NF}' | head -40
done
