#!/usr/bin/env bash
# backward-check.sh — on the GPU machine: installs the wheel from .device/<dir> (bench/device/python-prepare.sh
# builds it; BWD_WHEEL_DIR names the folder, default .device/python), then checks the backward's gradients against
# an fp32 reference (bench/backward_bench.py --check), runs tests/python/gpu/test_backward.py (a time-limited
# selection: BWD_PYTEST_K) and times the backward beside torch SDPA's FLASH and CUDNN backends and FlexAttention
# (bench/backward_bench.py --bench). Logs go to $OUT. BWD_STEPS: which of check, pytest, reference, sanitize, bench
# run (default check,pytest,bench). BWD_PYTEST_FILES: the test files of tests/python/gpu (default test_backward.py).
# reference: tests/python/test_reference.py (gradcheck of the fp64 oracle on the CPU); sanitize:
# bench/device/backward-sanitize.sh (compute-sanitizer memcheck and racecheck).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
wheels=${BWD_WHEEL_DIR:-.device/python}
steps=${BWD_STEPS:-check,pytest,bench}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/backward-check.log"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/flashtile-site "$wheels"/flashtile-*.whl || exit 2
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1
export FLASHTILE_CACHE_DIR=/tmp/flashtile-cache
status=0
if [[ ,$steps, == *,check,* ]]; then
  timeout "${BWD_CHECK_TIMEOUT:-150}" python3 bench/backward_bench.py --check 2>&1 | tee "$OUT/backward-grads.log" | tail -60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [[ ,$steps, == *,pytest,* ]]; then
  ( cd tests/python/gpu && timeout "${BWD_PYTEST_TIMEOUT:-200}" python3 -m pytest -q -n 16 -p no:cacheprovider \
      --junitxml="$OUT/backward-pytest.xml" ${BWD_PYTEST_FILES:-test_backward.py} -k "${BWD_PYTEST_K:-not alibi}" ) > "$OUT/backward-pytest.log" 2>&1 || status=1
  grep -E "passed|failed" "$OUT/backward-pytest.log" | tail -3
  grep -E "^FAILED" "$OUT/backward-pytest.log" | head -40
fi
if [[ ,$steps, == *,reference,* ]]; then
  timeout 300 python3 -m unittest -v tests/python/test_reference.py > "$OUT/reference.log" 2>&1 || status=1
  tail -3 "$OUT/reference.log"
fi
if [[ ,$steps, == *,sanitize,* ]]; then
  OUT=$OUT BWD_WHEEL_DIR=$wheels bash bench/device/backward-sanitize.sh || status=1
fi
if [[ ,$steps, == *,bench,* ]]; then
  timeout "${BWD_BENCH_TIMEOUT:-200}" python3 bench/backward_bench.py --bench --json "$OUT/backward-bench.json" 2>&1 |
    tee "$OUT/backward-bench.log" | tail -30
fi
echo "backward-check: exit $status" | tee -a "$OUT/backward-check.log"
exit $status
