// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline --tile-lower-to-target=arch=sm_90a | FileCheck %s
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline --tile-lower-to-target=arch=sm_80 | FileCheck %s --check-prefix=SM80

// CHECK: target = #tile.target<arch = "sm_90a", isa = "sm80">
// CHECK: tile.copy_async "q" {tile.inst = "cp.async.cg.shared.global.16"}
// CHECK: tile.load "k"[%{{.*}}] {tile.inst = "ldmatrix.x4"}
// CHECK: tile.qk {{.*}}{tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"}
// CHECK: tile.load "v"[%{{.*}}] {tile.inst = "ldmatrix.x4.trans"}
// SM80: target = #tile.target<arch = "sm_80", isa = "sm80">

// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline --tile-lower-to-target=arch=sm_75 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: error: 'tile.func' op unknown arch 'sm_75'; accepted: sm_80, sm_90a, sm_100a
