#!/usr/bin/env bash
# run-gpu-tests.sh — run on the GPU machine: flashtile's GPU correctness tests against ahead-of-time kernels, then
# a look at one kernel's SASS. Everything it needs was built on the build machine and copied there in .device/
# (git-ignored; see bench/README.md, "GPU tests from ahead-of-time kernels"):
#   .device/bin/flashtile_gpu_tests   runtime-only build, static gtest/libstdc++
#   .device/aot/                      <kernel>.cubin + <kernel>.manifest from `flashtile aot --arch sm_90a`
#   .device/bin/flashtile             optional: `flashtile info` is printed when present
# Writes $OUT/gpu-tests.log, $OUT/sass-summary.txt and $OUT/<kernel>.sass ($OUT defaults to .device/out).
# Extra arguments go to the test binary, e.g. --gtest_filter='Cases/*bf16_hd128*'.
# Exit status: the test binary's (2 when something it needs is missing).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DEVICE_DIR=${FLASHTILE_DEVICE_DIR:-.device}
OUT=${OUT:-$PWD/$DEVICE_DIR/out}
mkdir -p "$OUT" || exit 2
BIN=$DEVICE_DIR/bin/flashtile_gpu_tests
AOT=$DEVICE_DIR/aot

echo "== machine"
nvidia-smi -L || echo "nvidia-smi -L failed (exit $?)"
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
echo "driver version: ${driver:-unknown}"
echo "glibc: $(ldd --version 2>/dev/null | head -n 1)"
if [[ -x $DEVICE_DIR/bin/flashtile ]]; then
  echo "== flashtile info"
  "$DEVICE_DIR/bin/flashtile" info || echo "flashtile info failed (exit $?)"
fi

if [[ ! -x $BIN ]]; then
  echo "error: $BIN is missing or not executable; build it on the build machine (bench/README.md)" >&2
  exit 2
fi
shopt -s nullglob
manifests=("$AOT"/*.manifest)
cubins=("$AOT"/*.cubin)
shopt -u nullglob
echo "== kernels: ${#manifests[@]} manifests, ${#cubins[@]} cubins in $AOT"
if ((${#manifests[@]} == 0)); then
  # The tests would fail anyway (they never skip on a GPU machine); say why up front.
  echo "error: no *.manifest in $AOT; make it with \`flashtile aot --arch sm_90a --out $AOT\` on the build machine" >&2
fi

echo "== flashtile_gpu_tests"
export FLASHTILE_AOT_DIR=$PWD/$AOT
export FLASHTILE_REQUIRE_GPU=1   # no GPU here is a failure, not a skip
export FLASHTILE_DISABLE_CACHE=1 # AOT kernels only; nothing written under $HOME
# The binary ends a case that hangs after FLASHTILE_TEST_CASE_TIMEOUT s (default 120); the whole run is bounded
# too, below the GPU machine's 600 s per command, so that the log and the SASS summary still come back.
timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-480}" "$BIN" "$@" 2>&1 | tee "$OUT/gpu-tests.log"
rc=${PIPESTATUS[0]}
((rc == 124 || rc == 137)) && echo "error: the tests ran past ${FLASHTILE_TESTS_TIMEOUT:-480} s and were stopped" >&2
if ((rc == 126 || rc == 127)) || grep -q "GLIBC_\|error while loading shared libraries" "$OUT/gpu-tests.log"; then
  echo "note: the binary did not start here (system libraries differ from the build machine's):" >&2
  ldd "$BIN" >&2 || true
fi
summary=$(grep -E '^\[flashtile-gpu\] .* (PASS|FAIL)' "$OUT/gpu-tests.log")
echo "== cases: $(grep -c ' PASS' <<<"$summary") PASS, $(grep -c ' FAIL' <<<"$summary") FAIL (exit $rc)"

echo "== SASS"
cuobjdump=$(command -v cuobjdump || true)
[[ -z $cuobjdump && -x /usr/local/cuda/bin/cuobjdump ]] && cuobjdump=/usr/local/cuda/bin/cuobjdump
if [[ -z $cuobjdump ]]; then
  echo "cuobjdump not found; no SASS summary" | tee "$OUT/sass-summary.txt"
elif ((${#cubins[@]} == 0)); then
  echo "no cubin in $AOT; no SASS summary" | tee "$OUT/sass-summary.txt"
else
  # The one to dump in full: bf16, head dim 128, causal when there is one, else the first.
  pick=${cubins[0]}
  for manifest in "${manifests[@]}"; do
    if grep -qx 'dtype=bf16' "$manifest" && grep -qx 'headDim=128' "$manifest" && grep -qx 'variant=causal' "$manifest"; then
      pick=${manifest%.manifest}.cubin
      break
    fi
  done
  name=$(basename "$pick" .cubin)
  "$cuobjdump" --dump-sass "$pick" >"$OUT/$name.sass" 2>&1 || echo "cuobjdump failed on $pick (exit $?)"
  hmma=$(grep -c HMMA "$OUT/$name.sass" || true)
  {
    echo "kernel: $name"
    echo "HMMA instructions: $hmma"
    echo "HGMMA instructions: $(grep -c HGMMA "$OUT/$name.sass" || true)"
    echo
    echo "every cubin (HMMA HGMMA name):"
    for cubin in "${cubins[@]}"; do
      sass=$("$cuobjdump" --dump-sass "$cubin" 2>&1)
      echo "$(grep -c HMMA <<<"$sass" || true) $(grep -c HGMMA <<<"$sass" || true) $(basename "$cubin" .cubin)"
    done
  } >"$OUT/sass-summary.txt"
  cat "$OUT/sass-summary.txt"
  echo "HMMA count in $name: $hmma"
fi

exit "$rc"
