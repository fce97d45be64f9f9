#!/usr/bin/env bash
# fa2-backward-layouts.sh — on the GPU machine: fa2's backward under different warp layouts, side by side. Each folder
# of FA2BWD_DIRS (default: every folder of .device/fa2kw holding a wheel) holds a wheel whose fa2 backward defaults are
# one layout (blockM:blockN:warps and the key-warps knob, built on the build machine). For each, in one run: the
# gradient check of bench/backward_bench.py (fa2 named, strict; head dims 64 and 128, FlashAttention's rule), then its
# speed beside torch SDPA's FLASH backend's backward (bf16, 16k tokens, hidden 2048, head dims 64 and 128, FA2BWD_SEQLENS).
# FA2BWD_PYTEST (a -k expression): tests/python/gpu/test_backward.py with FLASHTILE_SCHEDULE=fa2 on the first folder;
# FA2BWD_VARIANTS=1: bench/backward_variants.py's gradient check of every built-in variant under fa2 on the first folder.
# Logs in $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
dirs=${FA2BWD_DIRS:-$(ls -d .device/fa2kw/*/ 2>/dev/null | tr '\n' ' ')}
export PYTHONUNBUFFERED=1 FLASHTILE_REQUIRE_GPU=1
status=0
first=1
for dir in $dirs; do
  name=$(basename "$dir")
  site=/tmp/flashtile-$name
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$dir"/flashtile-*.whl || exit 2
  export PYTHONPATH=$site FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-$name
  log=$OUT/fa2bwd-$name.log
  echo "== $name: check" | tee "$log"
  timeout 150 python3 bench/backward_bench.py --check --check-head-dims 64,128 --schedule fa2 --strict >>"$log" 2>&1 || status=1
  grep -E "check:|FAIL" "$log" | tail -5
  echo "== $name: bench" | tee -a "$log"
  timeout 200 python3 bench/backward_bench.py --bench --schedule fa2 --strict --head-dims 64,128 \
    --seqlens "${FA2BWD_SEQLENS:-2048,8192}" --peers sdpa_flash >>"$log" 2>&1 || status=1
  grep -vE "^\s*$" "$log" | tail -12
  if [[ $first == 1 && -n ${FA2BWD_VARIANTS:-} ]]; then
    ( cd bench && timeout 150 python3 backward_variants.py --schedule fa2 --flex "" --seqlen 1024 ) >"$OUT/fa2bwd-variants.log" 2>&1 || status=1
    grep -ciE " ok" "$OUT/fa2bwd-variants.log"; grep -iE "err|fail" "$OUT/fa2bwd-variants.log" | head -5
  fi
  if [[ $first == 1 && -n ${FA2BWD_PYTEST:-} ]]; then
    ( cd tests/python/gpu && FLASHTILE_SCHEDULE=fa2 timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider \
        test_backward.py -k "$FA2BWD_PYTEST" ) >"$OUT/fa2bwd-pytest.log" 2>&1 || status=1
    grep -E "passed|failed" "$OUT/fa2bwd-pytest.log" | tail -2; grep -E "^FAILED" "$OUT/fa2bwd-pytest.log" | head -20
  fi
  first=0
done
echo "fa2-backward-layouts: exit $status"
exit $status
