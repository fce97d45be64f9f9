#!/usr/bin/env bash
# python-timings.sh — on the GPU machine, the Python package's timings alone (a few minutes, not the whole test
# port of python-check.sh): installs the wheel from .device/python (bench/device/python-prepare.sh), runs the
# torch.compile / CUDA graph / warm-path tests (tests/python/gpu/test_torch_integration.py), then
# bench/python_timings.py, which prints the call overhead, the cold JIT and the disk-cache hit next to the numbers
# measured before (2026-12-01), and bench/python_overhead.py (warm calls against torch SDPA in the same loop, the C++
# call path and the ctypes one). Logs and results go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/python-timings.log"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/flashtile-site .device/python/flashtile-*.whl || exit 2
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1
export FLASHTILE_CACHE_DIR=/tmp/flashtile-cache-timings
export FLASHTILE_EXTENSION=${FLASHTILE_EXTENSION:-wait}  # the C++ call path built before the first call returns
rm -rf "$FLASHTILE_CACHE_DIR"
status=0
( cd tests/python/gpu && timeout 240 python3 -m pytest -q -p no:cacheprovider test_torch_integration.py ) 2>&1 |
  tee "$OUT/python-integration.log" | tail -15 | tee -a "$OUT/python-timings.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 180 python3 bench/python_timings.py --iters 5000 --json "$OUT/python-timings.json" 2>&1 |
  tee "$OUT/python-timings.md" | tee -a "$OUT/python-timings.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 150 python3 bench/python_overhead.py --json "$OUT/python-overhead.json" 2>&1 |
  tee "$OUT/python-overhead.md" | tee -a "$OUT/python-timings.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "python-timings: exit $status" | tee -a "$OUT/python-timings.log"
exit $status
