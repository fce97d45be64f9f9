#!/usr/bin/env bash
# python-check.sh — on the GPU machine: installs the wheel from .device/python (bench/device/python-prepare.sh),
# fills a fresh kernel cache with the test port's kernels (in parallel), runs the flash-attn forward test port and
# the torch.compile / CUDA graph / variant tests and flash_attn_with_kvcache's tests (tests/python/gpu), then the
# timings (bench/python_timings.py).
# Logs and results go to $OUT. Extra arguments go to pytest (e.g. -k "bfloat16 and 128" for a quick run). Each
# step has a time limit (9 minutes in all: one device command), so that one slow step leaves the others their turn.
# PYTHON_CHECK_ONLY=kvcache runs the flash_attn_with_kvcache tests alone (after the install).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
only=${PYTHON_CHECK_ONLY:-}
case "$only" in
  "" | kvcache) ;;
  *) echo "PYTHON_CHECK_ONLY=$only: accepted: kvcache, or unset (every step)" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/python-check.log"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/flashtile-site .device/python/flashtile-*.whl || exit 2
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1
export FLASHTILE_CACHE_DIR=/tmp/flashtile-cache
# The C++ call path (flashtile/_extension.py) built before the first call returns, so that every test runs through it
# (test_torch_integration.py runs the ctypes path in a child process).
export FLASHTILE_EXTENSION=${FLASHTILE_EXTENSION:-wait}
rm -rf "$FLASHTILE_CACHE_DIR"
python3 -c "import flashtile; print(flashtile.build_extension())" 2>&1 | tee -a "$OUT/python-check.log"  # once, for every worker
python3 -c "import flashtile, torch; print('flashtile', flashtile.version(), 'torch', torch.__version__)" 2>&1 | tee -a "$OUT/python-check.log"
status=0
if [ -z "$only" ]; then
( cd tests/python/gpu && timeout 120 python3 warm_cache.py 16 ) 2>&1 | tee -a "$OUT/python-check.log" || status=1
( cd tests/python/gpu && timeout 240 python3 -m pytest -q -n 16 -p no:cacheprovider --maxfail=50 --junitxml="$OUT/python-port.xml" \
    test_flash_attn_port.py "$@" ) > "$OUT/python-port.log" 2>&1 || status=1
tail -5 "$OUT/python-port.log" | tee -a "$OUT/python-check.log"
( cd tests/python/gpu && timeout 90 python3 -m pytest -q -p no:cacheprovider test_torch_integration.py ) 2>&1 |
  tee "$OUT/python-integration.log" | tail -15 | tee -a "$OUT/python-check.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
( cd tests/python/gpu && timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider --junitxml="$OUT/python-kvcache.xml" \
    test_kvcache.py ) > "$OUT/python-kvcache.log" 2>&1 || status=1
tail -15 "$OUT/python-kvcache.log" | tee -a "$OUT/python-check.log"
if [ -z "$only" ]; then
( cd tests/python && python3 -m unittest discover -s . 2>&1 | tail -3 ) | tee -a "$OUT/python-check.log"
timeout 90 python3 bench/python_timings.py --json "$OUT/python-timings.json" 2>&1 | tee "$OUT/python-timings.md" || status=1
fi
echo "python-check: exit $status" | tee -a "$OUT/python-check.log"
exit $status
