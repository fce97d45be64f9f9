#!/usr/bin/env bash
# sm100-sass.sh — the SASS of the sm100 prelude's exercise kernels (tests/unit/sm100/Sm100PreludeTest.cpp), compiled
# by NVRTC for sm_100a and disassembled with nvdisasm from its pip wheel (nvidia-cuda-nvdisasm, unpacked into the
# git-ignored .whl/nvdisasm/; the wheel is taken from .whl/*.whl or downloaded with pip). Runs the test that checks
# the opcodes, keeps its cubin, and reports how often each tcgen05, TMA and mbarrier opcode appears. No SM100 GPU
# exists here: this reads the code ptxas made, nothing runs it.
# Usage: bash scripts/sm100-sass.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
source scripts/nvdisasm-wheel.sh
echo "nvdisasm: $nvdisasm ($("$nvdisasm" --version | tail -n 1))"
cmake --build "$BUILD" --target flashtile_sm100_tests
cubin=$(mktemp --suffix=.cubin)
trap 'rm -f "$cubin"' EXIT
FLASHTILE_NVDISASM=$nvdisasm FLASHTILE_SM100_CUBIN=$cubin "$BUILD/tests/unit/sm100/flashtile_sm100_tests" \
  --gtest_filter='Sm100Prelude.SassHasTcgen05Instructions'
sass=$("$nvdisasm" -c "$cubin")
# Opcodes as nvdisasm prints them (the mnemonic with its modifiers), counted per kernel and in all.
echo "sm_100a SASS of the exercise kernels (opcode: count):"
echo "$sass" | grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z][A-Za-z0-9_.]*' | awk '{print $NF}' |
  grep -E '^(UTC|LDTM|STTM|UTMA|SYNCS|FFMA2|FADD2|ELECT|FENCE)' | sort | uniq -c | sort -rn
for kernel in tmemAllocation tmemAccess fragmentAccess mmaIssue tmaLoads softwareExp2; do
  ops=$(echo "$sass" | awk -v k=".text.$kernel:" '$1 == k {on = 1; next} /^[ \t]*\.section/ {on = 0} on' |
    grep -oE '(UTC[A-Z0-9_.]+|LDTM[A-Za-z0-9_.]*|STTM[A-Za-z0-9_.]*|UTMA[A-Z0-9_.]+|FFMA2|FADD2[A-Z0-9_.]*)' |
    sort | uniq -c | awk '{printf "%s %s x%s", sep, $2, $1; sep = ","}')
  echo "  $kernel:${ops:- (none)}"
done
