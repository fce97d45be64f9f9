#!/usr/bin/env bash
# profile.sh — on the GPU machine: Nsight Compute on one flashtile forward (bf16, hd 128, 8k, non-causal) and on
# torch's FLASH_ATTENTION kernel for the same shape, for the speed-of-light, warp-stall and scheduler sections.
# Clocks are left alone (--clock-control none). Writes $OUT/ncu-flashtile.txt and $OUT/ncu-torch.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy
          --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats)
ncu --clock-control none --kernel-name regex:flashtile --launch-count 1 "${sections[@]}" \
  .device/bin/flashtile run --aot-dir .device/aot --variant none --dtype bf16 --head-dim 128 --batch 2 --heads 16 \
  --seqlen-q 8192 --seqlen-k 8192 --iters 1 --warmup 0 > "$OUT/ncu-flashtile.txt" 2>&1
ncu --clock-control none --kernel-name regex:flash_fwd --launch-count 1 "${sections[@]}" python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(2, 16, 8192, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
" > "$OUT/ncu-torch.txt" 2>&1
for f in "$OUT"/ncu-*.txt; do
  echo "== $f"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Block Limit Registers|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|L1/TEX Hit|Executed Ipc A" "$f" | head -20
done
