#!/usr/bin/env bash
# backward-sanitize.sh — on the GPU machine: compute-sanitizer memcheck, racecheck and synccheck over the backward's
# kernels
# (bench/backward_sanitize.py: partial tiles, GQA, causal, windows, softcap, Sq != Sk, varlen, fp16). Installs the
# wheel from BWD_WHEEL_DIR (default .device/python; bench/device/python-prepare.sh builds it), runs the cases once
# plainly (the JIT compiles and caches the kernels), then under each tool with only flashtile's kernels checked.
# Logs in $OUT/backward-<tool>.log; exit 0 only when every tool reports 0 errors. BWD_SANITIZE_TOOLS: the tools
# (default memcheck racecheck synccheck).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
wheels=${BWD_WHEEL_DIR:-.device/python}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/flashtile-site "$wheels"/flashtile-*.whl || exit 2
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1 FLASHTILE_CACHE_DIR=/tmp/flashtile-cache FLASHTILE_EXTENSION=off
timeout 240 python3 bench/backward_sanitize.py || exit 1
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
for tool in ${BWD_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
  timeout -k 10 "${BWD_SANITIZE_TIMEOUT:-240}" "$sanitizer" --tool "$tool" --kernel-name kns=flashtile \
    --error-exitcode 9 python3 bench/backward_sanitize.py > "$OUT/backward-$tool.log" 2>&1
  rc=$?
  echo "$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/backward-$tool.log" | tail -1)"
  [ $rc -eq 0 ] || status=1
done
exit $status
