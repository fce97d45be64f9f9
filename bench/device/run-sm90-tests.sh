#!/usr/bin/env bash
# run-sm90-tests.sh — run on the GPU machine (sm_90): the sm90 primitive tests (TMA tiles, wgmma SS/RS chains,
# a producer/consumer mbarrier ring with setmaxnreg; tests/gpu/Sm90PrimitivesTest.cpp), then the SASS of every test
# kernel. Needs .device/bin/flashtile_sm90_gpu_tests from bench/device/prepare-sm90.sh on the build machine.
# Writes $OUT/sm90-tests.log, $OUT/sm90-cubins/*.cubin, $OUT/sm90-sass/*.sass and $OUT/sm90-sass-summary.txt
# ($OUT defaults to .device/out). Extra arguments go to the test binary, e.g. --gtest_filter='*Ring*'.
# Exit status: the test binary's (2 when the binary is missing).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DEVICE_DIR=${FLASHTILE_DEVICE_DIR:-.device}
OUT=${OUT:-$PWD/$DEVICE_DIR/out}
BIN=$DEVICE_DIR/bin/flashtile_sm90_gpu_tests
mkdir -p "$OUT/sm90-cubins" "$OUT/sm90-sass" || exit 2

echo "== machine"
nvidia-smi -L || echo "nvidia-smi -L failed (exit $?)"
echo "driver version: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
if [[ ! -x $BIN ]]; then
  echo "error: $BIN is missing; build it on the build machine with bash bench/device/prepare-sm90.sh" >&2
  exit 2
fi

echo "== flashtile_sm90_gpu_tests"
export FLASHTILE_REQUIRE_GPU=1 # no sm_90 GPU here is a failure, not a skip
export FLASHTILE_SM90_CUBIN_DIR=$OUT/sm90-cubins
timeout -k 10 "${FLASHTILE_TESTS_TIMEOUT:-480}" "$BIN" "$@" 2>&1 | tee "$OUT/sm90-tests.log"
rc=${PIPESTATUS[0]}
((rc == 124 || rc == 137)) && echo "error: the tests ran past ${FLASHTILE_TESTS_TIMEOUT:-480} s and were stopped" >&2
echo "== cases: $(grep -c '^\[flashtile-sm90\] .* PASS$' "$OUT/sm90-tests.log") PASS," \
  "$(grep -c '^\[flashtile-sm90\] .* FAIL$' "$OUT/sm90-tests.log") FAIL (exit $rc)"

echo "== SASS (instruction counts per test kernel)"
cuobjdump=$(command -v cuobjdump || true)
[[ -z $cuobjdump && -x /usr/local/cuda/bin/cuobjdump ]] && cuobjdump=/usr/local/cuda/bin/cuobjdump
shopt -s nullglob
cubins=("$OUT"/sm90-cubins/*.cubin)
if [[ -z $cuobjdump ]]; then
  echo "cuobjdump not found; no SASS" | tee "$OUT/sm90-sass-summary.txt"
else
  {
    printf '%-44s %6s %7s %7s %6s %10s %6s\n' kernel HGMMA UTMALDG UTMASTG SYNCS USETMAXREG STSM
    for cubin in "${cubins[@]}"; do
      name=$(basename "$cubin" .cubin)
      "$cuobjdump" --dump-sass "$cubin" >"$OUT/sm90-sass/$name.sass" 2>&1
      count() { grep -c "$1" "$OUT/sm90-sass/$name.sass" || true; }
      printf '%-44s %6s %7s %7s %6s %10s %6s\n' "$name" "$(count HGMMA)" "$(count UTMALDG)" "$(count UTMASTG)" \
        "$(count SYNCS)" "$(count USETMAXREG)" "$(count STSM)"
    done
  } | tee "$OUT/sm90-sass-summary.txt"
fi
exit "$rc"
