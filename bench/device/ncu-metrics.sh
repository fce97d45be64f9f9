# ncu-metrics.sh — sourced by the GPU machine's Nsight Compute scripts (profile-backward.sh, profile-forward.sh): the
# counters they read (NCU_METRICS) and ncu_summary FILE..., which prints each kernel's name and those counters.
NCU_METRICS=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
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
ncu_summary() {
  for f in "$@"; do
    echo "== $f"
    grep -E "==PROF==|ERROR|^  [A-Za-z_].*\(|gpu__time|sm__pipe|inst_executed|issue_active|warps_active|bank_conflicts|lts__|dram__|launch__|stalled|throughput" "$f" \
      | grep -v "^==PROF== Profiling\|Connected" | awk '{ if (NF > 2) print $1, $(NF-1), $NF; else print }' | head -80
  done
}
