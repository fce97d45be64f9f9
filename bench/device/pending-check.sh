#!/usr/bin/env bash
# pending-check.sh — on the GPU machine: the checks and timings of work built without a GPU (deterministic mode,
# the e4m3 forward, position offsets and flashtile.parallel, swap-dkv), in parts chosen by PENDING (comma list,
# default all): detcheck (the gradients of deterministic calls against an fp32 reference), detpytest
# (test_backward.py -k deterministic), fp8 (test_fp8_forward.py), fp8bench (bench/fp8_bench.py), fp8kv
# (test_fp8_kvcache.py: decode over an e4m3 KV cache), fp8kvbench (bench/fp8_decode_bench.py: e4m3 vs bf16 cache), positions
# (test_positions_gpu.py and test_parallel_gpu.py), detbench (the deterministic backward's time beside the default),
# skv (swap-dkv's gradients at head dim 192 and its time beside the default: the libraries .device/aot-skv2 and
# .device/aot-skv of bench/device/pending-prepare.sh, through bench/device/bwd-steps.sh), h64 (head dim 64's key
# split, 64 x 128 tiles as at 128, with and without swap-sdp, beside the default split-Q 128 x 128: the libraries
# .device/aot-h64km and .device/aot-h64kms), rot (deterministic mode's rotated walk, the library .device/aot-rot of
# `--rotated-walk 1`: its gradients, bitwise repeatability and time beside the default; logs pending-rot*.log),
# lpt (lpt-group-blocks 256: the backward's grouped launch order, the library .device/aot-lpt, through
# bench/device/bwd-steps.sh, two rounds at 1k-8k; logs in $OUT/lpt), sdp (swap-sdp 1 at 96 and 128 again, .device/aot-sdp;
# logs in $OUT/sdp; with ds-buffers 2 too, .device/aot-dsr), r80 (block-m 80 at head dim 128, alone and with ds-buffers 2:
# .device/aot-r80, .device/aot-r80d; logs in $OUT/r80), rr (ring-rows 1 at head dim 64, .device/aot-rr; logs in $OUT/rr), sw (dq-swizzle 1 at head dims 96, 128, 192 beside the default's padded rows: the library .device/aot-sw, through
# bench/device/bwd-steps.sh, two rounds; logs in $OUT/sw), ringfa (ring-flash-attn itself on flashtile's flash-attn
# entry points, test_parallel_gpu.py -k ring_flash_attn: carry .whl/ring, its wheel, `pip download --no-deps -d
# .whl/ring ring-flash-attn` on the build machine), fp8kvsweep (bench/fp8_decode_bench.py once with the default kernels
# and once per e4m3 KV-cache candidate library .device/aot-f8kv-<name> of pending-prepare.sh, FP8KV_SWEEP names them; a
# table of e4m3 and bf16 tokens/s and % of the HBM roof per candidate), compile (test_parallel_gpu.py -k compiled:
# ring and Ulysses attention under torch.compile with inductor, two ranks sharing the GPU), fp8kvr (test_fp8_kvcache.py with kv-convert 1's
# library .device/aot-f8kv-rtest loaded). Neither of the last two is in the default list: PENDING=fp8kvsweep,fp8kvr
# (about 4 minutes); nor is fp8kvf16 (test_fp8_kvcache.py with kv-f16-mma 1's library .device/aot-f8kv-f16test: the
# f16 MMAs over the e4m3 cache; FP8KV_SWEEP="f16 f16m10" PENDING=fp8kvsweep times them), nor fknobs (the bf16 fa3
# forward's max-chains, lane-vote and late-pv-wait, .device/fc4, flv, flpw, fall, through bench/device/forward-knobs.sh;
# logs in $OUT/fknobs). Nor are dqf (dq-fragments 1 with 64- and 80-row tiles and block-m 80, through
# bench/device/bwd-steps.sh; logs in $OUT/dqf), before (an earlier build's wheel, .device/python-before, against this
# one: carry both), fda (the forward's desc-advance 1, .device/fda, through bench/device/forward-knobs.sh; logs in
# $OUT/fda) and f8knobs (bench/fp8_bench.py with the e4m3 candidates .device/aot-f8-<name>: max-chains, lane-vote,
# late-pv-wait), window (bench/window_sweep.py), dkvs (dkv-staged 1 beside the default, and in the window's
# sweep), dkv64 (dkv-staged 1 at head dim 64, four rounds), detdq (deterministic mode with dq-fragments and
# dq-swizzle: one bulk add a turn), a4 (dq-add-v4 1 at head dim 256, .device/aot-a4) and lv (late-v 1 at 96 and
# 128, .device/aot-lv).
# Each part has its own time limit; logs in $OUT/pending-<part>.log. Carry .device/python, and for skv the two
# libraries (bench/device/pending-prepare.sh makes all three).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
root=$PWD
OUT=${OUT:-$PWD/.device/out}
parts=,${PENDING:-detcheck,detpytest,fp8,fp8bench,fp8kv,fp8kvbench,positions,detbench},
parts=${parts//,rot,/,rotcheck,rotpytest,rotbench,}  # rot: its three parts
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/pending-gpu.log"
source bench/device/bwd-env.sh || exit 2
status=0
# deterministic mode's rotated walk (rotated-walk 1): the library .device/aot-rot serves the calls it matches
rot=(env FLASHTILE_AOT_DIR="$root/.device/aot-rot" FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-rot)
part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  [[ $parts == *,$name,* ]] || return 0
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/pending-$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || status=1
  echo "== $name rc=$rc $((SECONDS - start)) s: $(tail -1 "$OUT/pending-$name.log")"
}
part detcheck 150 python3 bench/backward_bench.py --check --check-deterministic
cd tests/python/gpu || exit 2
part detpytest 180 python3 -m pytest -q -n 16 -p no:cacheprovider test_backward.py -k deterministic
part fp8 180 python3 -m pytest -q -n 8 -p no:cacheprovider test_fp8_forward.py
part fp8kv 240 python3 -m pytest -q -n 8 -p no:cacheprovider test_fp8_kvcache.py
# the e4m3 cache's fragments converted in registers (kv-convert 1) wherever the library has the call's kernel
part fp8kvr 240 env FLASHTILE_AOT_DIR="$root/.device/aot-f8kv-rtest" FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-fp8kvr \
  python3 -m pytest -q -n 8 -p no:cacheprovider test_fp8_kvcache.py
# kv-f16-mma 1's kernels (bf16 at head dims 64 and 128) serving test_fp8_kvcache.py's calls they match
part fp8kvf16 240 env FLASHTILE_AOT_DIR="$root/.device/aot-f8kv-f16test" FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-fp8kvf16 \
  python3 -m pytest -q -n 8 -p no:cacheprovider test_fp8_kvcache.py
part positions 180 python3 -m pytest -q -p no:cacheprovider test_positions_gpu.py test_parallel_gpu.py -k "not compiled"
# flashtile.parallel under torch.compile(fullgraph=True, inductor): 2 ranks sharing the GPU
part compile 400 python3 -m pytest -q -p no:cacheprovider test_parallel_gpu.py -k compiled
if [[ $parts == *,ringfa,* ]] && ls "$root"/.whl/ring/ring_flash_attn-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/ringfa-site "$root"/.whl/ring/*.whl
fi
part ringfa 200 env PYTHONPATH="/tmp/ringfa-site:$PYTHONPATH" python3 -m pytest -q -rs -p no:cacheprovider \
  test_parallel_gpu.py -k ring_flash_attn
part rotpytest 180 "${rot[@]}" python3 -m pytest -q -n 16 -p no:cacheprovider test_backward.py \
  -k "deterministic and not causal"
cd "$root" || exit 2
part fp8bench 150 python3 bench/fp8_bench.py --json "$OUT/fp8-bench.json"
part fp8kvbench 150 python3 bench/fp8_decode_bench.py --json "$OUT/fp8-decode-bench.json"
# f8knobs: bench/fp8_bench.py once with the default kernels and once per e4m3 candidate library .device/aot-f8-<name>
# of pending-prepare.sh (F8_SWEEP names them; its bf16 baseline runs the JIT's default in the same process).
if [[ $parts == *,f8knobs,* ]]; then
  # shellcheck disable=SC2206  # F8_SWEEP is a list of words
  names=(default ${F8_SWEEP:-f8-c4 f8-lv4 f8-lpw f8-all})
  for name in "${names[@]}"; do
    dir=$root/.device/aot-$name
    [ "$name" = default ] && dir=
    [ -z "$dir" ] || [ -d "$dir" ] || { echo "f8knobs: $name: no library $dir"; continue; }
    FLASHTILE_AOT_DIR=$dir FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-$name timeout 150 python3 bench/fp8_bench.py \
      --json "$OUT/f8knobs-$name.json" > "$OUT/pending-f8knobs-$name.log" 2>&1 || status=1
    echo "f8knobs $name:"; grep -E "^ *(128|256) " "$OUT/pending-f8knobs-$name.log"
  done
fi
if [[ $parts == *,fp8kvsweep,* ]]; then
  # Each candidate in its own process: the library's e4m3 kernel replaces the JIT's for the bench's call; the bf16
  # cache's call runs the JIT's default kernel in the same process (the baseline of the ratio), checked first.
  start=$SECONDS sweep=/tmp/fp8kvsweep log=$OUT/pending-fp8kvsweep.log
  rm -rf "$sweep" && mkdir -p "$sweep" && : > "$log"
  # shellcheck disable=SC2206  # FP8KV_SWEEP is a list of words
  names=(default ${FP8KV_SWEEP:-n128 n32 m10 w})
  for name in "${names[@]}"; do
    aot=() expect=()
    if [ "$name" != default ]; then
      [ -d "$root/.device/aot-f8kv-$name" ] || { echo "== $name: no library .device/aot-f8kv-$name" >> "$log"; continue; }
      aot=(FLASHTILE_AOT_DIR="$root/.device/aot-f8kv-$name")
      expect=(--expect-aot)  # a library that does not serve the call would time the default under its name
    fi
    echo "== $name" >> "$log"
    timeout 90 env "${aot[@]}" FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-fp8kv python3 bench/fp8_decode_bench.py \
      --json "$sweep/$name.json" "${expect[@]}" >> "$log" 2>&1 || { echo "== $name: rc=$?" >> "$log"; status=1; }
  done
  python3 - "$sweep" "${names[@]}" <<'EOF' | tee -a "$log"
import json, os, sys
folder, names = sys.argv[1], sys.argv[2:]
print(f"{'candidate':10} {'e4m3 ms':>8} {'bf16 ms':>8} {'e4m3/bf16 tokens/s':>18} {'e4m3 roof':>9} {'bf16 roof':>9}  check")
for name in names:
    path = os.path.join(folder, name + ".json")
    if not os.path.exists(path):
        print(f"{name:10} (no result)")
        continue
    r = json.load(open(path))
    rows = {row["cache"]: row for row in r["rows"]}
    print(f"{name:10} {rows['e4m3']['ms']:8.4f} {rows['bf16']['ms']:8.4f} {r['speedup']:18.2f} "
          f"{100 * rows['e4m3']['of_peak']:8.1f}% {100 * rows['bf16']['of_peak']:8.1f}%  "
          f"{'ok' if r['checked'] else 'FAIL'}")
EOF
  echo "== fp8kvsweep $((SECONDS - start)) s (target: e4m3/bf16 >= 1.8 at >= 85% of the roof)"
fi
part detbench 200 python3 bench/backward_bench.py --bench --deterministic --peers "" \
  --shapes "${PENDING_DET_SHAPES:-128:8192,96:8192,192:8192,64:8192}"
part rotcheck 150 "${rot[@]}" python3 bench/backward_bench.py --check --check-deterministic
part rotbench 200 "${rot[@]}" python3 bench/backward_bench.py --bench --deterministic --peers "" \
  --shapes "${PENDING_ROT_SHAPES:-128:4096,128:8192,128:16384,96:8192,64:8192}"
# steps_part NAME SECONDS ROUNDS CHECK_HEAD_DIMS LIBRARIES SHAPES: kernel libraries (name:dir,...) beside the default
# through bench/device/bwd-steps.sh (their gradients first, then the timings, ROUNDS rounds); logs in $OUT/NAME.
steps_part() {
  local name=$1 limit=$2 rounds=$3 dims=$4 libraries=$5 shapes=$6
  [[ $parts == *,$name,* ]] || return 0
  OUT=$OUT/$name STEPS=check,bench STEPS_ROUNDS=$rounds STEPS_CHECK_AOT=1 STEPS_CHECK_AOT_ARGS="--check-head-dims $dims" \
    STEPS_AOT=$libraries STEPS_SHAPES=$shapes \
    timeout "$limit" bash bench/device/bwd-steps.sh > "$OUT/pending-$name.log" 2>&1 || status=1
  grep -E "check:|FAIL|^hd|^round|exit" "$OUT/pending-$name.log" | head -30
}
steps_part skv 330 1 192 skv2:.device/aot-skv2,skv:.device/aot-skv "${PENDING_SKV_SHAPES:-192:8192,192:16384}"
steps_part h64 300 1 64 km:.device/aot-h64km,kms:.device/aot-h64kms "${PENDING_H64_SHAPES:-64:2048,64:8192,64:16384}"
steps_part sw 330 2 96,128,192 sw:.device/aot-sw "${PENDING_SW_SHAPES:-128:8192,128:16384,96:8192,192:8192}"
# lpt-group-blocks 256 (the main kernel's K/V tiles index by index across groups of (batch, head) pairs) beside the
# default's pair-after-pair order: where causal walks are short (1k-2k) the launch order's tail weighs most.
steps_part lpt 400 2 64,128,192 lpt:.device/aot-lpt \
  "${PENDING_LPT_SHAPES:-128:1024,128:2048,128:8192,64:2048,64:8192,192:8192}"
# swap-sdp 1 (S and dP transposed, FA3's SdP_swapAB) again: measured 2-11% slower before the wgmma descriptors moved
# to uniform registers and the spills went (bench/NOTES.md v34, v35).
# ds-buffers 2 with it (dS in the ring stage's buffer, no barrier before an iteration stages: .device/aot-dsr).
steps_part sdp 400 2 96,128 sdp:.device/aot-sdp,dsr:.device/aot-dsr \
  "${PENDING_SDP_SHAPES:-128:2048,128:8192,128:16384,96:8192}"
# block-m 80 at head dim 128 (FA3's non-causal tile: S, dP and dQ transposed), alone and with ds-buffers 2
# (.device/aot-r80, .device/aot-r80d), beside the default's 64-row tiles.
steps_part r80 400 2 128 r80:.device/aot-r80,r80d:.device/aot-r80d \
  "${PENDING_R80_SHAPES:-128:2048,128:8192,128:16384}"
# dq-fragments 1 (whole Q tiles of dq_accum in the fragments' order: bench/NOTES.md v46) with 64- and 80-row tiles and
# block-m 80 alone (now without serialized wgmma) beside the default.
# PENDING_DQF_ARGS=--deterministic adds deterministic mode's column (its turns hold one bulk add a tile instead of 64).
STEPS_BENCH_ARGS=${PENDING_DQF_ARGS:-} steps_part dqf 480 2 128 \
  dqf:.device/aot-dqf,dqf80:.device/aot-dqf80,r80:.device/aot-r80 "${PENDING_DQF_SHAPES:-128:8192,128:16384,128:2048}"
# before: an earlier build's wheel (.device/python-before, pending-prepare.sh's BEFORE_TREE) against this one, the
# default backward alternating, two rounds each, same machine (a change to the default's CUDA: the descriptor adds).
if [[ $parts == *,before,* ]] && ls .device/python-before/flashtile-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/flashtile-site-before \
    .device/python-before/flashtile-*.whl || status=1
  for round in 1 2; do
    for who in before after; do
      site=/tmp/flashtile-site; [ "$who" = before ] && site=/tmp/flashtile-site-before
      PYTHONPATH=$site FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-$who timeout 200 python3 bench/backward_bench.py --bench \
        --peers "" --shapes "${PENDING_BEFORE_SHAPES:-128:8192,128:16384,64:8192,192:8192,256:8192,128:2048}" \
        > "$OUT/pending-before-$who-$round.log" 2>&1 || status=1
      echo "before/after round $round $who: $(grep -E '^hd' "$OUT/pending-before-$who-$round.log" | awk '{printf "%s %s %s %s; ", $1, $2, $3, $4}')"
    done
  done
fi
# dkvs: dkv-staged 1 (dK and dV through shared memory, a bulk copy a row: .device/aot-dkvs) beside the default, its
# gradients and time where blocks' fixed costs weigh (1k-2k) and at 8k, then the causal window's sweep with it.
# dkvw: with dq-last-wait 1 too (.device/aot-dkvw).
steps_part dkvs 480 2 64,96,128 dkvs:.device/aot-dkvs,dkvw:.device/aot-dkvw \
  "${PENDING_DKVS_SHAPES:-128:1024,128:2048,128:8192,64:2048,96:8192}"
if [[ $parts == *,dkvs,* ]]; then
  for name in dkvs dkvw; do
    FLASHTILE_AOT_DIR=$root/.device/aot-$name FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-$name timeout 120 \
      python3 bench/window_sweep.py > "$OUT/pending-$name-window.log" 2>&1 || status=1
    echo "$name:"; tail -3 "$OUT/pending-$name-window.log"
  done
fi
# detdq: deterministic mode with one bulk add a turn instead of one a row (its writer's turn is the chain each Q tile's
# blocks pass along): dq-fragments at 128 (.device/aot-dqf) and dq-swizzle at 96-192 (.device/aot-sw), the default and
# deterministic columns of each.
STEPS_BENCH_ARGS=--deterministic steps_part detdq 480 2 96,128,192 dqf:.device/aot-dqf,sw:.device/aot-sw \
  "${PENDING_DETDQ_SHAPES:-128:8192,128:2048,96:8192,192:8192}"
# a4: dq-add-v4 1 at head dim 256 (the computing warps' dQ adds four floats of a row a lane: half the LSU's reduction
# instructions; ncu put lg_throttle first among that kernel's stalls, bench/NOTES.md v49) beside the default.
# a4s: with dq-slices 2 too (dQ's product in two 64-column slices a warpgroup: FA3's hd256 dQ path, .device/aot-a4s).
steps_part a4 420 3 256 a4:.device/aot-a4,a4s:.device/aot-a4s "${PENDING_A4_SHAPES:-256:8192,256:16384,256:2048}"
# lv: late-v 1 at head dims 96 and 128 (V's TMA after the walk's first Q and dO tiles, on its own barrier: the first S
# GEMM waits for 64 of the 96 KB at hd128) beside the default, where a block's fixed cost weighs (1k-2k) and at 8k.
steps_part lv 400 3 96,128 lv:.device/aot-lv "${PENDING_LV_SHAPES:-128:1024,128:2048,128:8192,96:2048}"
# dkv64: dkv-staged 1 at head dim 64 (split-Q; the default at 96 and 128 since 2026-12-07) in four rounds at 1k-8k:
# +6% at 1k, -8% at 2k in its first rounds (bench/NOTES.md v48).
steps_part dkv64 300 4 64 dkvs:.device/aot-dkvs "${PENDING_DKV64_SHAPES:-64:1024,64:2048,64:4096,64:8192}"
# window: the backward of a causal window at widths 128-4096 and plain causal, per kernel (bench/window_sweep.py; FA4
# beside it where fa4-install.sh installed it): the main kernel's time over the Q tiles a block walks, fitted.
part window 200 python3 bench/window_sweep.py ${PENDING_WINDOW_ARGS:-}
# The fa3 forward with desc-advance 1 (.device/fda) beside its default, FA4 and cuDNN.
if [[ $parts == *,fda,* ]]; then
  OUT=$OUT/fda KNOBS_TIMEOUT=150 KNOBS_AOT=fda:.device/fda \
    KNOBS_SHAPES=${PENDING_FDA_SHAPES:-64:8192,96:8192,128:2048,128:8192,192:8192,256:8192} \
    timeout 330 bash bench/device/forward-knobs.sh > "$OUT/pending-fda.log" 2>&1 || status=1
  grep -E "^(default|fda) " "$OUT/pending-fda.log" | head -30
fi
# The bf16 fa3 forward's softmax path (bench/NOTES.md v50) beside its default, FA4 and cuDNN: max-chains 4 (.device/fc4),
# with rescale-threshold 8 and lane-vote (flv), late-pv-wait (flpw) and all three (fall); bf16 at head dims 64-128
# (flpw and fall non-causal only: their causal calls run the JIT's default), and causal with persistent blocks alone
# (fpc) and with late-pv-wait (flpwc: the non-persistent causal default spills with it, bench/NOTES.md v50).
if [[ $parts == *,fknobs,* ]]; then
  OUT=$OUT/fknobs KNOBS_TIMEOUT=100 \
    KNOBS_AOT=c4:.device/fc4,lv:.device/flv,lpw:.device/flpw,all:.device/fall,pc:.device/fpc,lpwc:.device/flpwc \
    KNOBS_SHAPES=${PENDING_FKNOBS_SHAPES:-64:8192,96:8192,128:2048,128:8192} \
    timeout 580 bash bench/device/forward-knobs.sh > "$OUT/pending-fknobs.log" 2>&1 || status=1
  grep -E "^(default|c4|lv|lpw|all|pc|lpwc) " "$OUT/pending-fknobs.log" | head -60
fi
# ring-rows 1 at head dim 64 (the warpgroups' ring rows broadcast once: 46 fewer R2URs, one causal loop segment longer
# by SASS; bench/NOTES.md v44) beside the default.
steps_part rr 300 2 64 rr:.device/aot-rr "${PENDING_RR_SHAPES:-64:2048,64:8192,64:16384}"
for name in detcheck detpytest fp8 fp8kv fp8kvr positions; do
  [ -f "$OUT/pending-$name.log" ] && grep -E "FAIL|Error|error" "$OUT/pending-$name.log" | head -12
done
exit $status
