#!/usr/bin/env bash
# pending-prepare.sh — on the build machine: what bench/device/pending-check.sh carries to the GPU machine: the wheel
# (.device/python, bench/device/python-prepare.sh) and, for its skv part, two kernel libraries of fa3's backward at
# head dim 192 built by this build's `flashtile aot` (a library loads only into the runtime of the build that wrote
# it): .device/aot-skv2 (swap-dkv 1 with its defaults: one dO buffer, the dQ writer, early dV) and .device/aot-skv
# (swap-dkv 1, do-buffers 2: the computing warps add dQ), and for its h64 part two of head dim 64 with the keys split
# (block-m 64): .device/aot-h64km and, with S and dP transposed (swap-sdp 1), .device/aot-h64kms; for its rot part
# .device/aot-rot (rotated-walk 1: deterministic mode's rotated walk), and for its sw part .device/aot-sw (dq-swizzle 1
# at head dims 96, 128 and 192, where the default pads sDq's rows and adds them one at a time).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash bench/device/python-prepare.sh
for library in "aot-skv2:--swap-dkv 1 --head-dims 192" "aot-skv:--swap-dkv 1 --do-buffers 2 --head-dims 192" \
  "aot-h64km:--block-m 64 --head-dims 64" "aot-h64kms:--block-m 64 --swap-sdp 1 --head-dims 64" \
  "aot-rot:--rotated-walk 1 --head-dims 64,96,128,192,256" "aot-sw:--dq-swizzle 1 --head-dims 96,128,192"; do
  name=${library%%:*} knobs=${library#*:}
  rm -rf ".device/$name"
  # shellcheck disable=SC2086  # the knobs are words
  build/tools/flashtile aot --schedule fa3 --kinds backward $knobs \
    --variants none,causal --dtypes bf16,f16 --arch sm_90a --jobs 2 --out ".device/$name" | tail -1
done
