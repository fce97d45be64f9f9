#!/usr/bin/env bash
# fa3-headdims-prepare.sh — on the build machine: what bench/device/fa3-headdims-check.sh runs on the GPU machine, in
# .device/fa3hd/ (git-ignored; FLASHTILE_DEVICE_DIR to put it elsewhere), about 20 MB:
#   fa2/, fa3/        none and causal, bf16 and f16, every head dim the runtime serves (32, 64, 96, 128, 192, 256 and
#                     192/128), both shape classes: the library of both schedules the GPU tests run with no schedule named
#   fa3-variants/     every built-in variant of bench/check_variants.py under fa3 at every head dim, bf16 and f16
#   fa3-hd128/        fa3's none and causal kernels at head dim 128 alone: the control, a library where fa3's rule is
#                     known but its kernels at other head dims are missing
#   bin/, lib/        the runtime-only flashtile_gpu_tests and libflashtile.so (same git revision as the kernels)
#   bench/            the scripts the check runs (bench/*.py and bench/device/fa3-headdims-check.sh)
# Kernels are cubins and manifests (the .cu sources are left out to keep the copy small).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ARCH=${FLASHTILE_ARCH:-sm_90a}
D=${FLASHTILE_DEVICE_DIR:-.device/fa3hd}
HEAD_DIMS=32,64,96,128,192,256,192:128
VARIANTS=causal,causal_top_left,sliding_window,sliding_window_causal,softcap,softcap_causal,alibi,alibi_causal,sinks,sinks_causal,document_mask
bash scripts/build.sh
cmake -S . -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHTILE_RUNTIME_ONLY=ON >/dev/null
cmake --build build-rt -j "${FLASHTILE_JOBS:-2}" --target flashtile_gpu_tests flashtile_c
rm -rf "$D"
mkdir -p "$D/bin" "$D/lib" "$D/bench/device"
aot() { build/tools/flashtile aot --arch "$ARCH" --dtypes bf16,f16 --head-dims "$HEAD_DIMS" -j "${FLASHTILE_JOBS:-2}" "$@" >/dev/null; }
aot --out "$D/fa2" --variants none,causal --shape-classes default,short
aot --out "$D/fa3" --schedule fa3 --variants none,causal --shape-classes default,short
aot --out "$D/fa3-variants" --schedule fa3 --variants "$VARIANTS" --shape-classes default
build/tools/flashtile aot --arch "$ARCH" --schedule fa3 --variants none,causal --dtypes bf16,f16 --head-dims 128 \
  --shape-classes default --out "$D/fa3-hd128" >/dev/null
rm -f "$D"/*/*.cu
cp build-rt/tests/gpu/flashtile_gpu_tests "$D/bin/"
cp build-rt/runtime/libflashtile.so "$D/lib/"
cp bench/*.py "$D/bench/"
cp bench/device/fa3-headdims-check.sh "$D/bench/device/"
ls "$D"/*/ | grep -c manifest
du -sh "$D"
