// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_90a | FileCheck %s
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_80 | FileCheck %s --check-prefix=SM80

// The schedule (fa2) names the family (sm80) on every arch; the arch is the canonical one NVRTC compiles for.
// CHECK: target = #tile.target<arch = "sm_90a", isa = "sm80">
// CHECK-NOT: tile.inst
// SM80: target = #tile.target<arch = "sm_80", isa = "sm80">

// Arch names map to the arch kernels are built for: every 8.x GPU runs sm_80 cubins; sm_90 and sm_100 are the
// `a` targets the runtime dispatches to.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_86 | FileCheck %s --check-prefix=SM86
// SM86: target = #tile.target<arch = "sm_80", isa = "sm80">
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_89 | FileCheck %s --check-prefix=SM86
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_90 | FileCheck %s --check-prefix=SM90
// SM90: target = #tile.target<arch = "sm_90a", isa = "sm80">
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_100 | FileCheck %s --check-prefix=SM100
// SM100: target = #tile.target<arch = "sm_100a", isa = "sm80">

// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_75 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: error: 'tile.func' op unknown arch 'sm_75' (did you mean 'sm_80'?); accepted: sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a, sm_100, sm_100a
