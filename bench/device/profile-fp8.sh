#!/usr/bin/env bash
# profile-fp8.sh — on the GPU machine: Nsight Compute's counters (ncu-metrics.sh) of fa3's e4m3 forward and its bf16
# forward at hd128 8k non-causal (B2 H16), one launch each after a warm-up, with the kernels of FLASHTILE_AOT_DIR when
# set. Carry .device/python. Log: $OUT/profile-fp8.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
source bench/device/bwd-env.sh || exit 2
source bench/device/ncu-metrics.sh
cat > /tmp/fp8-once.py <<'PY'
import torch, flashtile
torch.manual_seed(0)
q, k, v = (torch.randn(2, 8192, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
e4 = [t.to(torch.float8_e4m3fn) for t in (q, k, v)]
ones = torch.ones(2, 16, device="cuda")
for _ in range(2):
    flashtile.flash_attn_func(q, k, v, schedule="fa3", strict=True)
    flashtile.flash_attn_func(*e4, schedule="fa3", strict=True, q_descale=ones, k_descale=ones, v_descale=ones)
torch.cuda.synchronize()
PY
timeout "${PROFILE_TIMEOUT:-240}" ncu --clock-control none --metrics "$NCU_METRICS" -k regex:flashtile_fa3 \
  --launch-skip 3 --launch-count 3 python3 /tmp/fp8-once.py > "$OUT/profile-fp8.log" 2>&1
ncu_summary "$OUT/profile-fp8.log"
