#!/usr/bin/env bash
# pending-prepare.sh — on the build machine: what bench/device/pending-check.sh carries to the GPU machine: the wheel
# (.device/python, bench/device/python-prepare.sh) and, for its skv part, two kernel libraries of fa3's backward at
# head dim 192 built by this build's `flashtile aot` (a library loads only into the runtime of the build that wrote
# it): .device/aot-skv2 (swap-dkv 1 with its defaults: one dO buffer, the dQ writer, early dV) and .device/aot-skv
# (swap-dkv 1, do-buffers 2: the computing warps add dQ), and for its h64 part two of head dim 64 with the keys split
# (block-m 64): .device/aot-h64km and, with S and dP transposed (swap-sdp 1), .device/aot-h64kms; for its rot part
# .device/aot-rot (rotated-walk 1: deterministic mode's rotated walk); for its sw part .device/aot-sw (dq-swizzle 1 at
# head dims 96, 128 and 192, where the default pads sDq's rows and adds them one at a time); for its lpt part
# .device/aot-lpt (lpt-group-blocks 256 at head dims 64, 128, 192); for its sdp part .device/aot-sdp (swap-sdp 1 at
# 96 and 128) and .device/aot-dsr (swap-sdp 1 with ds-buffers 2); for its r80 part .device/aot-r80 and .device/aot-r80d (block-m 80 at head dim
# 128, without and with ds-buffers 2 beside one dO buffer); for its rr part .device/aot-rr (ring-rows 1 at head dim 64); for its fp8kvsweep part the
# decode KV-cache kernels over an e4m3 cache (none and causal: a one-row causal call runs the none kernel; bf16 q, head dim 128: bench/fp8_decode_bench.py's shape) with
# each candidate's knobs, .device/aot-f8kv-<name> (FP8KV_CANDIDATES below), and for its fp8kvr part kv-convert 1's
# kernels of every shape tests/python/gpu/test_fp8_kvcache.py runs without rotary embedding, .device/aot-f8kv-rtest
# (its rotary cases run the JIT's default kernels); for its dqf part .device/aot-dqf and .device/aot-dqf80 (dq-fragments 1
# at head dim 128, with 64- and 80-row tiles) and, where BEFORE_TREE names the checkout of an earlier commit (a git
# worktree), .device/python-before (that checkout's wheel, built there: the A/B of a change to the default's CUDA; a
# kernel library loads only into the runtime of the build that wrote it, so the earlier build runs as a whole); for
# its fda part .device/fda (the fa3 forward with desc-advance 1); for its fknobs part .device/fc4, flv, flpw, fall,
# fpc and flpwc (the bf16 forward's max-chains, lane-vote and late-pv-wait at head dims 64-128); for its dkvs part
# .device/aot-dkvs (dkv-staged 1 at head dims 64-128, none, causal and the causal window) and .device/aot-dkvw (with dq-last-wait 1 too); for its a4 part
# .device/aot-a4 (dq-add-v4 1 at head dim 256: four floats of a dQ row a lane) and .device/aot-a4s (with dq-slices 2
# too: FA3's hd256 dQ path); for its lv part .device/aot-lv (late-v 1
# at head dims 96 and 128: V loaded after the first Q tile); for its f8knobs part the e4m3 forward at head dim 128
# with FA4's partial software exp2 (exp2-poly-share 1 to 3) and desc-advance, .device/aot-f8-<name> (F8_CANDIDATES).
# F8_HEAD_DIMS: their head dims (default 128).
# PREPARE_LIBRARIES (comma list of the names above, without aot-): build only those (default: all).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash bench/device/python-prepare.sh
wanted() { [ -z "${PREPARE_LIBRARIES:-}" ] || [[ ,$PREPARE_LIBRARIES, == *,$1,* ]]; }
if [ -n "${BEFORE_TREE:-}" ] && wanted before; then
  rm -rf .device/python-before
  bash "$BEFORE_TREE/bench/device/python-prepare.sh" > /dev/null
  cp -r "$BEFORE_TREE/.device/python" .device/python-before
  ls .device/python-before
fi
# The e4m3 forward at head dim 128 (issue 42's 1.6x): its exp2s take as long as its GEMMs (bench/NOTES.md v41).
# Measured and off since (2026-12-07): exp2-poly-share 1-3 and desc-advance ("p1:--exp2-poly-share 1|...|da:--desc-advance
# 1"). Now the softmax's critical path (bench/NOTES.md v50): max-chains 4 (c4), with lane-vote (lv4), late-pv-wait (lpw)
# and all three (all).
F8_CANDIDATES=${F8_CANDIDATES:-"c4:--max-chains 4|lv4:--max-chains 4 --lane-vote 1|lpw:--late-pv-wait 1|all:--max-chains 4 --lane-vote 1 --late-pv-wait 1"}
IFS='|' read -ra f8 <<< "$F8_CANDIDATES"
for library in "${f8[@]}"; do
  name=aot-f8-${library%%:*} knobs=${library#*:}
  wanted "${name#aot-}" || continue
  rm -rf ".device/$name"
  # shellcheck disable=SC2086  # the knobs are words
  build/tools/flashtile aot --schedule fa3 --kinds forward --variants none,causal --dtypes e4m3 --head-dims "${F8_HEAD_DIMS:-128}" \
    $knobs --arch sm_90a --jobs 2 --out ".device/$name" | tail -1
done
# The bf16 forward's softmax path at head dims 64-128 (bench/NOTES.md v50; at 64 a tile's exponentials take as long
# as its GEMMs, as e4m3's at 128): max-chains 4 (fc4), with conditional rescaling and lane-vote (flv), late-pv-wait
# where it adds no spills (flpw: non-causal) and all of them (fall: non-causal); causal, persistent blocks alone (fpc)
# and with late-pv-wait (flpwc): the non-persistent causal default spills with it, the persistent form does not.
for library in "fc4:--max-chains 4 --variants none,causal" \
  "flv:--max-chains 4 --rescale-threshold 8 --lane-vote 1 --variants none,causal" \
  "flpw:--late-pv-wait 1 --variants none" \
  "fall:--max-chains 4 --rescale-threshold 8 --lane-vote 1 --late-pv-wait 1 --variants none" \
  "fpc:--persistent 1 --variants causal" "flpwc:--persistent 1 --late-pv-wait 1 --variants causal"; do
  name=${library%%:*} knobs=${library#*:}
  wanted "$name" || continue
  rm -rf ".device/$name"
  # shellcheck disable=SC2086  # the knobs are words
  build/tools/flashtile aot --schedule fa3 --kinds forward $knobs --dtypes bf16 --head-dims 64,96,128 \
    --arch sm_90a --jobs 2 --out ".device/$name" | tail -1
done
if wanted fda; then
  rm -rf .device/fda
  build/tools/flashtile aot --schedule fa3 --kinds forward --desc-advance 1 --variants none,causal --dtypes bf16 \
    --head-dims 64,96,128,192,256 --arch sm_90a --jobs 2 --out .device/fda | tail -1
fi
for library in "aot-skv2:--swap-dkv 1 --head-dims 192" "aot-skv:--swap-dkv 1 --do-buffers 2 --head-dims 192" \
  "aot-h64km:--block-m 64 --head-dims 64" "aot-h64kms:--block-m 64 --swap-sdp 1 --head-dims 64" \
  "aot-rot:--rotated-walk 1 --head-dims 64,96,128,192,256" "aot-sw:--dq-swizzle 1 --head-dims 96,128,192" \
  "aot-lpt:--lpt-group-blocks 256 --head-dims 64,128,192" "aot-sdp:--swap-sdp 1 --head-dims 96,128" \
  "aot-dsr:--swap-sdp 1 --ds-buffers 2 --head-dims 96,128" \
  "aot-r80:--block-m 80 --head-dims 128" "aot-r80d:--block-m 80 --ds-buffers 2 --do-buffers 1 --head-dims 128" \
  "aot-rr:--ring-rows 1 --head-dims 64" "aot-dqf:--dq-fragments 1 --head-dims 128" \
  "aot-dqf80:--dq-fragments 1 --block-m 80 --head-dims 128" "aot-a4:--dq-add-v4 1 --head-dims 256" \
  "aot-lv:--late-v 1 --head-dims 96,128" "aot-a4s:--dq-add-v4 1 --dq-slices 2 --head-dims 256"; do
  name=${library%%:*} knobs=${library#*:}
  wanted "${name#aot-}" || continue
  rm -rf ".device/$name"
  # shellcheck disable=SC2086  # the knobs are words
  build/tools/flashtile aot --schedule fa3 --kinds backward $knobs \
    --variants none,causal --dtypes bf16,f16 --arch sm_90a --jobs 2 --out ".device/$name" | tail -1
done
# dkv-staged 1 (dK and dV through shared memory, a bulk copy a row) at head dims 64-128, with the causal window too
# (bench/window_sweep.py's variant): .device/aot-dkvs.
if wanted dkvs; then
  rm -rf .device/aot-dkvs
  build/tools/flashtile aot --schedule fa3 --kinds backward --dkv-staged 1 --head-dims 64,96,128 \
    --variants none,causal,sliding_window_causal --dtypes bf16 --arch sm_90a --jobs 2 --out .device/aot-dkvs | tail -1
fi
# with dq-last-wait 1 too (the block's end as FA3's: .device/aot-dkvw)
if wanted dkvw; then
  rm -rf .device/aot-dkvw
  build/tools/flashtile aot --schedule fa3 --kinds backward --dkv-staged 1 --dq-last-wait 1 --head-dims 64,96,128 \
    --variants none,causal,sliding_window_causal --dtypes bf16 --arch sm_90a --jobs 2 --out .device/aot-dkvw | tail -1
fi
# The e4m3 KV cache's candidates (issue 42, item 3; bench/NOTES.md v43, v45) beside today's default (kv-convert 1 on
# one warp of 16 rows, measured 1.80x bf16 at 92% of the roof on 2026-12-07): 128- or 32-key tiles (n128, n32),
# registers capped for 10 blocks an SM (m10: shared memory allows 11), and the widening with bf16's tiling (w).
# kv-f16-mma 1 (f16 MMAs over the e4m3 fragments: one conversion a pair instead of four; bench/NOTES.md v50): f16,
# alone and with registers capped for 10 blocks an SM (f16m10); f16test: its kernels of the shapes
# tests/python/gpu/test_fp8_kvcache.py runs in bf16 at head dims 64 and 128 (pending-check.sh's fp8kvf16 part).
FP8KV_CANDIDATES=${FP8KV_CANDIDATES:-"n128:--block-n 128|n32:--block-n 32|m10:--min-blocks-per-sm 10|w:--kv-convert 0|f16:--kv-f16-mma 1|f16m10:--kv-f16-mma 1 --min-blocks-per-sm 10"}
IFS='|' read -ra fp8kv <<< "$FP8KV_CANDIDATES"
bench_shape="--variants none,causal --dtypes bf16 --head-dims 128"  # a one-row causal call runs the none kernel
for library in "${fp8kv[@]/%/ $bench_shape}" "rtest:--kv-convert 1 --block-m 32 --warps 2 --variants none,causal,sliding_window,\
sliding_window_causal,softcap,softcap_causal,alibi,alibi_causal --dtypes bf16,f16 --head-dims 64,128,256" \
  "f16test:--kv-f16-mma 1 --variants none,causal,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,\
alibi_causal --dtypes bf16 --head-dims 64,128"; do
  name=aot-f8kv-${library%%:*} knobs=${library#*:}
  wanted "${name#aot-}" || continue
  rm -rf ".device/$name"
  # shellcheck disable=SC2086  # the knobs are words
  build/tools/flashtile aot --schedule decode --kinds forward --kv-cache 1 --kv-dtypes e4m3 --shape-classes default \
    $knobs --arch sm_90a --jobs 2 --out ".device/$name" | tail -1
done
