#!/usr/bin/env bash
# fa3-options-check.sh — on the GPU machine, after bench/device/fa3-options-prepare.sh: fa3's kernels of each option
# set it prepared (one folder each: the defaults, FA4's conditional rescaling, the partial software exp2), bf16, head
# dims 64 and 128, in one run: plain and causal attention at
# 2k and 8k tokens a sequence (bench/bench_attention.py, batch·seqlen = 16k, hidden 2048, its correctness check
# included) and softcap / softcap_causal at 8k (bench/check_variants.py, its checks at head dim 128 first). Run from
# the repository root, or from a copy of .device/fa3opt with FLASHTILE_DEVICE_DIR=$PWD. Logs in $OUT.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$HERE" || exit 2
D=${FLASHTILE_DEVICE_DIR:-$HERE/.device/fa3opt}
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export FLASHTILE_REQUIRE_GPU=1 FLASHTILE_DISABLE_CACHE=1 PYTHONUNBUFFERED=1
LIB=$D/lib/libflashtile.so
status=0
: >"$OUT/options.log"
# FLASHTILE_ROUNDS (default 2) alternations of the two libraries: each figure is seen against the other in time.
for ((round = 1; round <= ${FLASHTILE_ROUNDS:-2}; ++round)); do
  for dir in $(cd "$D" && ls -d */ | tr -d / | grep -vxE 'lib|bench|out'); do
    echo "== $dir (round $round): plain and causal" >>"$OUT/options.log"
    timeout -k 5 90 python3 bench/bench_attention.py --lib "$LIB" --aot-dir "$D/$dir" --dtypes bf16 --head-dims 64,128 \
      --seqlens 2048,8192 >>"$OUT/options.log" 2>&1 || status=1
    for hd in 64 128; do
      echo "== $dir (round $round): softcap, hd $hd" >>"$OUT/options.log"
      checks=$([[ $round == 1 && $hd == 128 ]] && echo "" || echo "--no-check")
      timeout -k 5 90 python3 bench/check_variants.py --lib "$LIB" --aot-dir "$D/$dir" --variants softcap,softcap_causal \
        $checks --speed-head-dim $hd --speed-seqlen 8192 >>"$OUT/options.log" 2>&1 || status=1
    done
  done
done
echo "fa3-options-check: exit $status" | tee -a "$OUT/options.log"
exit $status
