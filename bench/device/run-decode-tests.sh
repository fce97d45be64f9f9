#!/usr/bin/env bash
# run-decode-tests.sh — on the GPU machine: the decode schedule's split-KV kernels against the fp32 reference kernel
# (none, causal) and against FA2 (the other variants), every split count, dense shapes with GQA ratios 1-16, with
# kernels from .device/aot and .device/aot-decode (bench/device/prepare-decode.sh). Writes $OUT/decode-tests.log;
# then the KV-cache tests (flashtile_kvcache_gpu_tests: contiguous and paged caches, appended keys) to
# $OUT/kvcache-tests.log (Rotary/* cases: rotary embedding of Q and the appended keys). Extra arguments go to both test binaries (e.g. --gtest_filter='Cases/*hd128*'). With
# FLASHTILE_MEMCHECK=1 both run under compute-sanitizer memcheck instead (a subset: the first shapes of each kind,
# and the KV-cache call with out-of-range device values), to $OUT/decode-memcheck.log and kvcache-memcheck.log.
# FLASHTILE_SUITE=decode or kvcache runs one of the two (each fits one 10-minute run on the GPU machine; default: both).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DEVICE_DIR=${FLASHTILE_DEVICE_DIR:-.device}
OUT=${OUT:-$PWD/$DEVICE_DIR/out}
mkdir -p "$OUT" || exit 2
BIN=$DEVICE_DIR/bin/flashtile_decode_gpu_tests
KVBIN=$DEVICE_DIR/bin/flashtile_kvcache_gpu_tests
SUITE=${FLASHTILE_SUITE:-all}
case $SUITE in all | decode | kvcache) ;; *) echo "error: FLASHTILE_SUITE=$SUITE; accepted: all, decode, kvcache" >&2; exit 2 ;; esac
runs() { [[ $SUITE == all || $SUITE == "$1" ]]; }
rc=0
kvrc=0
for bin in "$BIN" "$KVBIN"; do
  [[ -x $bin ]] || { echo "error: $bin is missing; run bench/device/prepare-decode.sh on the build machine" >&2; exit 2; }
done
nvidia-smi -L || true
export FLASHTILE_AOT_DIR=$PWD/$DEVICE_DIR/aot
export FLASHTILE_DECODE_AOT_DIR=$PWD/$DEVICE_DIR/aot-decode
export FLASHTILE_REQUIRE_GPU=1
export FLASHTILE_DISABLE_CACHE=1
if [[ ${FLASHTILE_MEMCHECK:-0} == 1 ]]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if runs decode; then
    timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-540}" "$sanitizer" --tool memcheck --error-exitcode 9 "$BIN" \
      --gtest_filter='Cases/*B1_H32x8_Sq1_Sk1:Cases/*B2_H32x8_Sq1_Sk127*:Cases/*B3_H16x1_Sq4_Sk4097*:Variants/*sinks*Sq4*:DecodeGpuWorkspace.*' \
      "$@" 2>&1 | tee "$OUT/decode-memcheck.log"
    rc=${PIPESTATUS[0]}
  fi
  if runs kvcache; then
    timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-540}" "$sanitizer" --tool memcheck --error-exitcode 9 "$KVBIN" \
      --gtest_filter='Cases/*bf16_hd128_causal_contiguous_idx*:Cases/*bf16_hd128_causal_paged16*:Cases/*bf16_hd64_none_paged256*:Variants/*sinks_causal*:Rotary/*bf16_hd128_causal_paged64*rotary64_interleaved:KvCacheGpuBadValues.*' \
      "$@" 2>&1 | tee "$OUT/kvcache-memcheck.log"
    kvrc=${PIPESTATUS[0]}
  fi
  echo "== memcheck exit: decode $rc, kv cache $kvrc"
  exit $((rc != 0 ? rc : kvrc))
fi
if runs decode; then
  timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-540}" "$BIN" "$@" 2>&1 | tee "$OUT/decode-tests.log"
  rc=${PIPESTATUS[0]}
  echo "== splits checked: $(grep -c 'splits=' "$OUT/decode-tests.log") (exit $rc)"
fi
if runs kvcache; then
  timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-540}" "$KVBIN" "$@" 2>&1 | tee "$OUT/kvcache-tests.log"
  kvrc=${PIPESTATUS[0]}
  echo "== KV-cache splits checked: $(grep -c 'splits=' "$OUT/kvcache-tests.log") (exit $kvrc)"
fi
exit $((rc != 0 ? rc : kvrc))
