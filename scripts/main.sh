#!/usr/bin/env bash
# The main job: install what is missing, build, then run attention on the GPU if there is one. Without a GPU,
# `flashtile summary` asks the runtime what a call naming no schedule would run on each arch (sm_80, sm_90a, sm_100a:
# fa3 on sm_90a, decode for decode-sized calls, fa2 elsewhere), forward and backward, for a representative set of
# calls (every variant, head dim and dtype once), compiles it and prints a table: each call's schedule and why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  for variant in none causal; do
    ./build/tools/flashtile run --variant "$variant" --dtype bf16 --head-dim 128 --batch 2 --heads 16 \
      --seqlen-q 4096 --seqlen-k 4096
  done
else
  ./build/tools/flashtile summary
fi
