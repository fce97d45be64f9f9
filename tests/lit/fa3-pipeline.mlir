// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=block-m=128,block-n=64,stages=3" --tile-split-boundary --tile-fa3-pipeline | FileCheck %s
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-fa3-pipeline --tile-lower-to-target=arch=sm_90a 2>&1 | FileCheck %s --check-prefix=NOTARGET

// FA3: buffers (Q one slot, K and V rings of `stages` slots) with their full/empty barriers at the top.
// CHECK: #tile.schedule<name = "fa3", blockM = 128, blockN = 64, warps = 12, stages = 3>
// CHECK: %[[QB:.*]] = tile.buffer "q" : <tensor<128x64xbf16>, slots = 1>
// CHECK-NEXT: %[[KB:.*]] = tile.buffer "k" : <tensor<64x64xbf16>, slots = 3>
// CHECK-NEXT: %[[VB:.*]] = tile.buffer "v" : <tensor<64x64xbf16>, slots = 3>
// CHECK-NEXT: %[[QF:.*]] = tile.barrier %[[QB]] {bytes = 16384 : i64}
// CHECK-NEXT: %[[KF:.*]] = tile.barrier %[[KB]] {bytes = 8192 : i64}
// CHECK-NEXT: %[[KE:.*]] = tile.barrier %[[KB]] {arrivals = 1 : i64}
// CHECK-NEXT: %[[VF:.*]] = tile.barrier %[[VB]] {bytes = 8192 : i64}
// CHECK-NEXT: %[[VE:.*]] = tile.barrier %[[VB]] {arrivals = 1 : i64}
// The producer warpgroup: Q, then each tile of the walk into ring position i = highest - 1 - j, after the slot's
// empty barrier, arriving on its full barrier.
// CHECK: tile.role "producer" attributes {regs = 24 : i64, warps = 4 : i64} {
// CHECK: tile.copy_async "q" into %{{.*}} arrive %[[QF]][%{{.*}}]
// CHECK: tile.kv_walk from %[[LO:.*]] to %[[HI:.*]] {order = "descending"} {
// CHECK-NEXT: ^bb0(%[[J:.*]]: i32):
// CHECK: %[[I:.*]] = arith.subi %{{.*}}, %[[J]] : i32
// CHECK-NEXT: %[[KS:.*]] = tile.slot %[[KB]][%[[I]]]
// CHECK-NEXT: tile.barrier_wait %[[KE]][%[[I]]]
// CHECK-NEXT: tile.copy_async "k"[%[[J]]] into %[[KS]] arrive %[[KF]][%[[I]]]
// CHECK-NEXT: %[[VS:.*]] = tile.slot %[[VB]][%[[I]]]
// CHECK-NEXT: tile.barrier_wait %[[VE]][%[[I]]]
// CHECK-NEXT: tile.copy_async "v"[%[[J]]] into %[[VS]] arrive %[[VF]][%[[I]]]
// The consumer warpgroups: Q after its full barrier; per tile, K after its full barrier, Q·Kᵀ issued asynchronously
// and waited on, then K's slot released; V the same around P·V. No block-wide tile.wait anywhere.
// CHECK: tile.role "consumer" attributes {regs = 240 : i64, warps = 8 : i64} {
// CHECK: tile.barrier_wait %[[QF]]
// CHECK: tile.load "q" from
// CHECK: tile.kv_loop from %{{.*}} to %[[HI]]
// CHECK: %[[CI:.*]] = arith.subi %{{.*}}, %arg{{[0-9]+}} : i32
// CHECK: tile.barrier_wait %[[KF]][%[[CI]]]
// CHECK-NEXT: %[[CKS:.*]] = tile.slot %[[KB]][%[[CI]]]
// CHECK-NEXT: tile.load "k"[%{{.*}}] from %[[CKS]]
// CHECK-NEXT: %{{.*}}, %[[TQK:.*]] = tile.qk {{.*}} -> tensor<128x64xf32>, !tile.token
// CHECK-NEXT: tile.mma_wait %[[TQK]]
// CHECK-NEXT: tile.barrier_arrive %[[KE]][%[[CI]]]
// CHECK: tile.barrier_wait %[[VF]][%[[CI]]]
// CHECK-NEXT: %[[CVS:.*]] = tile.slot %[[VB]][%[[CI]]]
// CHECK-NEXT: tile.load "v"[%{{.*}}] from %[[CVS]]
// CHECK-NEXT: %{{.*}}, %[[TPV:.*]] = tile.pv {{.*}} -> !tile.token
// CHECK-NEXT: tile.mma_wait %[[TPV]]
// CHECK-NEXT: tile.barrier_arrive %[[VE]][%[[CI]]]
// CHECK: tile.finalize
// CHECK: tile.store "lse"
// CHECK-NOT: tile.wait

// NOTARGET: schedule 'fa3' has no lowering for sm_90a
