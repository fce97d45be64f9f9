#!/usr/bin/env bash
# profile-backward.sh — on the GPU machine: Nsight Compute counters of fa3's backward main kernel (flashtile's wheel,
# no schedule named) and of FA4's SM90 backward (flash-attn-4, where bench/device/fa4-install.sh installed it) at one
# shape: bf16, hd128, seqlen 8k, batch 2, 16 heads, non-causal. Per kernel: duration, tensor pipe active, issue
# slots, instructions, warp stalls per issued instruction by reason, shared-memory bank conflicts, L2 and DRAM
# traffic. Clocks are left alone (--clock-control none). Writes $OUT/ncu-bwd-<who>.txt and a summary.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
script='
import sys, torch
who = sys.argv[1]
q, k, v = (torch.randn(2, 8192, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
if who == "flashtile":
    import flashtile
    out = flashtile.flash_attn_func(q, k, v)
else:
    from flash_attn.cute import interface
    out = interface.flash_attn_func(q, k, v)
out = out[0] if isinstance(out, tuple) else out
do = torch.randn_like(out)
for _ in range(3):
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
'
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,\
smsp__warps_active.avg.per_cycle_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,lts__t_bytes.sum,dram__bytes.sum,\
lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,launch__registers_per_thread,launch__block_size,\
launch__shared_mem_per_block_dynamic,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio
# The backward's kernels of the last (third) backward call: the main kernel is the longest.
timeout -k 5 150 ncu --clock-control none --metrics "$metrics" --kernel-name regex:'_bwd$' --launch-skip 2 \
  --launch-count 1 python3 -c "$script" flashtile > "$OUT/ncu-bwd-flashtile.txt" 2>&1
timeout -k 5 200 ncu --clock-control none --metrics "$metrics" --kernel-name regex:'(?i)bwd|backward' \
  --launch-skip "${FA4_SKIP:-6}" --launch-count "${FA4_COUNT:-4}" python3 -c "$script" fa4 > "$OUT/ncu-bwd-fa4.txt" 2>&1
for f in "$OUT"/ncu-bwd-flashtile.txt "$OUT"/ncu-bwd-fa4.txt; do
  echo "== $f"
  grep -E "==PROF==|ERROR|^  [A-Za-z_].*\(|gpu__time|sm__pipe|inst_executed|issue_active|warps_active|bank_conflicts|lts__|dram__|launch__|stalled|throughput" "$f" \
    | grep -v "^==PROF== Profiling\|Connected" | awk '{ if (NF > 2) print $1, $(NF-1), $NF; else print }' | head -80
done | tee "$OUT/ncu-bwd-summary.txt"
