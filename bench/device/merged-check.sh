#!/usr/bin/env bash
# merged-check.sh — on the GPU machine, a short check of a merged tree's wheel (.device/python, from
# bench/device/python-prepare.sh) with no schedule named: the backward's gradient check (bench/backward_bench.py
# --check), a selection of tests/python/gpu/test_backward.py (MERGED_PYTEST_K) and of test_flash_attn_port.py's
# forward (MERGED_FWD_K; its ids name the dtype as dtype0/dtype1). Logs in $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/flashtile-site .device/python/flashtile-*.whl || exit 2
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1 FLASHTILE_CACHE_DIR=/tmp/flashtile-cache FLASHTILE_REQUIRE_GPU=1
status=0
timeout 110 python3 bench/backward_bench.py --check > "$OUT/merged-grads.log" 2>&1 || status=1
grep -E "check:|FAIL" "$OUT/merged-grads.log" | tail -5
( cd tests/python/gpu && timeout 110 python3 -m pytest -q -n 16 -p no:cacheprovider test_backward.py \
    -k "${MERGED_PYTEST_K:-(True-mha and 128) or deterministic or builtin or graphs}" ) > "$OUT/merged-pytest.log" 2>&1 || status=1
grep -E "passed|failed" "$OUT/merged-pytest.log" | tail -2; grep -E "^FAILED" "$OUT/merged-pytest.log" | head -10
( cd tests/python/gpu && timeout 60 python3 -m pytest -q -n 16 -p no:cacheprovider test_flash_attn_port.py \
    -k "${MERGED_FWD_K:-mha and 128}" ) > "$OUT/merged-forward.log" 2>&1 || status=1
grep -E "passed|failed" "$OUT/merged-forward.log" | tail -2; grep -E "^FAILED" "$OUT/merged-forward.log" | head -10
echo "merged-check: exit $status"
exit $status
