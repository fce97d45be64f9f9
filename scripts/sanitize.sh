#!/usr/bin/env bash
# sanitize.sh — builds the runtime and compiler unit tests (and flashtile-opt) with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-sanitize/, runs them, then fuzzes the sanitized flashtile-opt and the C ABI's
# JIT entry points (variant descriptions through libflashtile_jit.so) for FUZZ_SECONDS each (default 60; 0 skips
# them). Any sanitizer report fails the run (halt_on_error).
#   bash scripts/sanitize.sh           # everything (a cold build of the compiler side takes long on 2 cores)
#   bash scripts/sanitize.sh runtime   # the runtime and C ABI tests only: no MLIR code, minutes
#   bash scripts/sanitize.sh jit       # the C ABI's JIT entry points only: descriptions, register, id, compile
# Not part of CI (.ci/run) because of its build time: run it before release-like changes and after touching
# parsers, the cache, the AOT loader or the printer. Logs: build-sanitize/sanitize-<suite>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
MODE=${1:-all}
case $MODE in
all | runtime | jit) ;;
*)
  echo "usage: scripts/sanitize.sh [all|runtime|jit]" >&2
  exit 2
  ;;
esac
BUILD=build-sanitize
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDAToolkit_ROOT=/usr/local/cuda \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DCMAKE_C_FLAGS="$sanitizers -fno-omit-frame-pointer" -DCMAKE_CXX_FLAGS="$sanitizers -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers" >/dev/null
# LLVM/MLIR keep process-lifetime allocations (registries, uniqued types) that LeakSanitizer would report:
# leak checking is on for the runtime suites only. LLVM's headers poison bump-allocator memory when compiled with
# ASan, but the prebuilt libMLIR that allocates from the same allocators is not instrumented: its ordinary use of
# that memory would read as "use-after-poison". allow_user_poisoning=0 turns those annotations off; real heap
# errors are still reported.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
asanBase=halt_on_error=1:strict_string_checks=1:allow_user_poisoning=0
failed=()
suites=()
# Builds `targets` and runs the suites among them; the runtime ones come first, so their results arrive early.
run_phase() {
  local suite binary leaks log
  cmake --build "$BUILD" -j "${FLASHTILE_JOBS:-2}" --target "$@"
  for suite in "$@"; do
    [[ $suite == flashtile-opt || $suite == flashtile_variant_fuzz_worker ]] && continue
    suites+=("$suite")
    binary=$(find "$BUILD" -name "$suite" -type f -perm -u+x | head -n 1)
    # MLIR's process-lifetime allocations (registries, uniqued types, the C ABI's process-wide compiler) are not
    # leaks: leak checking is for the runtime's suites.
    leaks=1
    [[ $suite == flashtile_runtime_tests || $suite == flashtile_capi_tests ]] || leaks=0
    log=$BUILD/sanitize-$suite.log
    echo "== $suite (ASan + UBSan, detect_leaks=$leaks)"
    if ASAN_OPTIONS=detect_leaks=$leaks:$asanBase "$binary" --gtest_brief=1 >"$log" 2>&1; then
      tail -n 3 "$log"
    else
      failed+=("$suite")
      grep -E "ERROR: |runtime error:|FAILED|SUMMARY" "$log" | head -n 20 || tail -n 30 "$log"
    fi
  done
}
if [[ $MODE != jit ]]; then
  run_phase flashtile_runtime_tests flashtile_capi_tests
fi
if [[ $MODE == all ]]; then
  run_phase flashtile_compiler_tests flashtile-opt
fi
if [[ $MODE != runtime ]]; then
  run_phase flashtile_variant_description_tests flashtile_capi_jit_tests flashtile_variant_fuzz_worker
fi
if [[ $MODE == all && ${FUZZ_SECONDS:-60} != 0 ]]; then
  suites+=(fuzz-ir)
  echo "== fuzz-ir on the sanitized flashtile-opt (${FUZZ_SECONDS:-60} s)"
  if ! ASAN_OPTIONS=detect_leaks=0:$asanBase bash scripts/fuzz-ir.sh "$BUILD" >"$BUILD/sanitize-fuzz-ir.log" 2>&1; then
    failed+=(fuzz-ir)
  fi
  tail -n 5 "$BUILD/sanitize-fuzz-ir.log"
fi
if [[ $MODE != runtime && ${FUZZ_SECONDS:-60} != 0 ]]; then
  suites+=(fuzz-variant)
  echo "== fuzz-variant on the sanitized libflashtile_jit.so (${FUZZ_SECONDS:-60} s)"
  if ! ASAN_OPTIONS=detect_leaks=0:$asanBase python3 tests/fuzz/fuzz_variant.py \
    --worker "$BUILD/tests/fuzz/flashtile_variant_fuzz_worker" --python python --seconds "${FUZZ_SECONDS:-60}" \
    --out "$BUILD/fuzz-crashes" >"$BUILD/sanitize-fuzz-variant.log" 2>&1; then
    failed+=(fuzz-variant)
  fi
  tail -n 5 "$BUILD/sanitize-fuzz-variant.log"
fi
if ((${#failed[@]})); then
  echo "sanitize: FAILED: ${failed[*]} (logs in $BUILD/)" >&2
  exit 1
fi
echo "sanitize: clean (${suites[*]})"
