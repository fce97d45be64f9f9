#!/usr/bin/env bash
# The main job: install what is missing, build, then run attention on the GPU if there is one; without a GPU,
# compile a representative set of kernels (every variant, head dim, dtype; sm_80, sm_90a, sm_100a) and print a table.
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
