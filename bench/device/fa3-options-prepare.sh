#!/usr/bin/env bash
# fa3-options-prepare.sh — on the build machine: what bench/device/fa3-options-check.sh runs on the GPU machine, in
# .device/fa3opt/ (git-ignored; FLASHTILE_DEVICE_DIR to put it elsewhere): fa3's kernels for each option set of
# FA3_OPTION_SETS ("name:flags;name:flags", default "default:;lazy8:--rescale-threshold 8": the defaults, and FA4's
# conditional rescaling; e.g. "default:;poly2:--exp2-poly-share 2" for the partial software exp2), none, causal,
# softcap and softcap_causal, bf16, head dims 64 and 128, the default shape class, one folder a set;
# libflashtile.so of the same revision; the bench scripts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
D=${FLASHTILE_DEVICE_DIR:-.device/fa3opt}
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile_c
rm -rf "$D"
mkdir -p "$D/lib" "$D/bench/device"
aot() { build/tools/flashtile aot --arch "$ARCH" --schedule fa3 --dtypes bf16 --head-dims 64,128 --shape-classes default \
  --variants none,causal,softcap,softcap_causal -j "${FLASHTILE_JOBS:-2}" "$@" >/dev/null; }
IFS=';' read -ra sets <<<"${FA3_OPTION_SETS:-default:;lazy8:--rescale-threshold 8}"
for set in "${sets[@]}"; do
  # shellcheck disable=SC2086 # the set's flags are words
  aot --out "$D/${set%%:*}" ${set#*:}
done
rm -f "$D"/*/*.cu
cp build-rt/runtime/libflashtile.so "$D/lib/"
cp bench/*.py "$D/bench/"
cp bench/device/fa3-options-check.sh "$D/bench/device/"
du -sh "$D"
