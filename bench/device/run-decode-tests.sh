#!/usr/bin/env bash
# run-decode-tests.sh — on the GPU machine: the decode schedule's split-KV kernels against the fp32 reference kernel
# (none, causal) and against FA2 (the other variants), every split count, dense shapes with GQA ratios 1-16, with
# kernels from .device/aot and .device/aot-decode (bench/device/prepare-decode.sh). Writes $OUT/decode-tests.log;
# extra arguments go to the test binary (e.g. --gtest_filter='Cases/*hd128*'). With FLASHTILE_MEMCHECK=1 it runs
# under compute-sanitizer memcheck instead (a subset: the first shapes of each kind).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DEVICE_DIR=${FLASHTILE_DEVICE_DIR:-.device}
OUT=${OUT:-$PWD/$DEVICE_DIR/out}
mkdir -p "$OUT" || exit 2
BIN=$DEVICE_DIR/bin/flashtile_decode_gpu_tests
[[ -x $BIN ]] || { echo "error: $BIN is missing; run bench/device/prepare-decode.sh on the build machine" >&2; exit 2; }
nvidia-smi -L || true
export FLASHTILE_AOT_DIR=$PWD/$DEVICE_DIR/aot
export FLASHTILE_DECODE_AOT_DIR=$PWD/$DEVICE_DIR/aot-decode
export FLASHTILE_REQUIRE_GPU=1
export FLASHTILE_DISABLE_CACHE=1
if [[ ${FLASHTILE_MEMCHECK:-0} == 1 ]]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-540}" "$sanitizer" --tool memcheck --error-exitcode 9 "$BIN" \
    --gtest_filter='Cases/*B1_H32x8_Sq1_Sk1:Cases/*B2_H32x8_Sq1_Sk127*:Cases/*B3_H16x1_Sq4_Sk4097*:Variants/*sinks*Sq4*:DecodeGpuWorkspace.*' \
    "$@" 2>&1 | tee "$OUT/decode-memcheck.log"
  exit "${PIPESTATUS[0]}"
fi
timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-540}" "$BIN" "$@" 2>&1 | tee "$OUT/decode-tests.log"
rc=${PIPESTATUS[0]}
echo "== splits checked: $(grep -c 'splits=' "$OUT/decode-tests.log") (exit $rc)"
exit "$rc"
