// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=block-m=128,block-n=64,stages=3" --tile-split-boundary --tile-role-pipeline="intra-wg-overlap=false pingpong=0" | FileCheck %s
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline | FileCheck %s --check-prefix=OVERLAP
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline | FileCheck %s --check-prefix=LOOPS
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline --tile-lower-to-target=arch=sm_90a | FileCheck %s --check-prefix=SM90
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline --tile-lower-to-target=arch=sm_80 2>&1 | FileCheck %s --check-prefix=NOTARGET

// FA3: buffers (Q one slot, K and V rings of `stages` slots) with their full/empty barriers at the top.
// CHECK: #tile.schedule<name = "fa3", blockM = 128, blockN = 64, warps = 12, warpLayout = split_q, warpRows = 16, stages = 3>
// CHECK: %[[QB:.*]] = tile.buffer q : <tensor<128x64xbf16>, slots = 1>
// CHECK-NEXT: %[[KB:.*]] = tile.buffer k : <tensor<64x64xbf16>, slots = 3>
// CHECK-NEXT: %[[VB:.*]] = tile.buffer v : <tensor<64x64xbf16>, slots = 3>
// CHECK-NEXT: %[[QF:.*]] = tile.barrier %[[QB]] {bytes = 16384 : i64}
// CHECK-NEXT: %[[KF:.*]] = tile.barrier %[[KB]] {bytes = 8192 : i64}
// CHECK-NEXT: %[[KE:.*]] = tile.barrier %[[KB]] {arrivals = 1 : i64}
// CHECK-NEXT: %[[VF:.*]] = tile.barrier %[[VB]] {bytes = 8192 : i64}
// CHECK-NEXT: %[[VE:.*]] = tile.barrier %[[VB]] {arrivals = 1 : i64}
// The producer warpgroup: Q, then each tile of the walk into ring position i = highest - 1 - j, after the slot's
// empty barrier, arriving on its full barrier.
// CHECK: tile.role "producer" attributes {regs = 24 : i64, warps = 4 : i64} {
// CHECK: tile.copy_async q into %{{.*}} arrive %[[QF]][%{{.*}}]
// CHECK: tile.kv_walk from %[[LO:.*]] to %[[HI:.*]] order descending {
// CHECK-NEXT: ^bb0(%[[J:.*]]: i32):
// CHECK: %[[I:.*]] = arith.subi %{{.*}}, %[[J]] : i32
// CHECK-NEXT: %[[KS:.*]] = tile.slot %[[KB]][%[[I]]]
// CHECK-NEXT: tile.barrier_wait %[[KE]][%[[I]]]
// CHECK-NEXT: tile.copy_async k[%[[J]]] into %[[KS]] arrive %[[KF]][%[[I]]]
// CHECK-NEXT: %[[VS:.*]] = tile.slot %[[VB]][%[[I]]]
// CHECK-NEXT: tile.barrier_wait %[[VE]][%[[I]]]
// CHECK-NEXT: tile.copy_async v[%[[J]]] into %[[VS]] arrive %[[VF]][%[[I]]]
// The consumer warpgroups: Q after its full barrier; per tile, K after its full barrier, Q·Kᵀ issued asynchronously
// and waited on, then K's slot released; V the same around P·V. No block-wide tile.wait anywhere.
// CHECK: tile.role "consumer" attributes {regs = 240 : i64, warps = 8 : i64} {
// CHECK: tile.barrier_wait %[[QF]]
// CHECK: tile.load q from
// CHECK: tile.kv_loop from %{{.*}} to %[[HI]]
// CHECK: %[[CI:.*]] = arith.subi %{{.*}}, %arg{{[0-9]+}} : i32
// CHECK: tile.barrier_wait %[[KF]][%[[CI]]]
// CHECK-NEXT: %[[CKS:.*]] = tile.slot %[[KB]][%[[CI]]]
// CHECK-NEXT: tile.load k[%{{.*}}] from %[[CKS]]
// CHECK-NEXT: %{{.*}}, %[[TQK:.*]] = tile.qk {{.*}} -> tensor<128x64xf32>, !tile.token
// CHECK-NEXT: tile.mma_wait %[[TQK]]
// CHECK-NEXT: tile.barrier_arrive %[[KE]][%[[CI]]]
// CHECK: tile.barrier_wait %[[VF]][%[[CI]]]
// CHECK-NEXT: %[[CVS:.*]] = tile.slot %[[VB]][%[[CI]]]
// CHECK-NEXT: tile.load v[%{{.*}}] from %[[CVS]]
// CHECK-NEXT: %{{.*}}, %[[TPV:.*]] = tile.pv {{.*}} -> !tile.token
// CHECK-NEXT: tile.mma_wait %[[TPV]]
// CHECK-NEXT: tile.barrier_arrive %[[VE]][%[[CI]]]
// CHECK: tile.finalize
// A block a tile: O leaves through the consumer's Q slot (its tile is dead after the last Q·Kᵀ's wait).
// CHECK: tile.store o %{{.*}} through %[[CQS:[A-Za-z_0-9]+]] : tensor<128x64xf32>, !tile.slot<tensor<128x64xbf16>>
// CHECK: tile.store lse
// CHECK-NOT: tile.wait

// The intra-warpgroup overlap (the default): a prologue segment of at most one tile (the walk's first) computes S and
// P; each later iteration issues Q·K(j)ᵀ, then P(j + 1)·V(j + 1) with the carried P, waits only for S, runs the
// softmax (which reads and writes the row statistics only, while P·V writes the accumulator), then waits for P·V,
// releases V's slot and rescales the accumulator; an epilogue segment of at most one tile (the walk's last) runs the last P·V.
// Head dim 64: 192 rows over three consumer warpgroups (160 registers each, the producer 32), which take turns
// issuing their GEMMs (ping-pong: the default at head dims up to 128).
// OVERLAP: tile.role "producer" attributes {regs = 32 : i64, warps = 4 : i64}
// OVERLAP: tile.role "consumer" attributes {pingpong, regs = 160 : i64, warps = 12 : i64}
// OVERLAP: %[[FIRST:.*]] = arith.maxsi
// OVERLAP: %[[P0:.*]] = arith.constant dense<0.000000e+00> : tensor<{{.*}}xbf16>
// OVERLAP: tile.kv_loop from %[[FIRST]] to %{{.*}} iter_args(%{{.*}}, %{{.*}}, %[[P0]])
// OVERLAP: tile.qk
// OVERLAP-NEXT: tile.mma_wait
// OVERLAP: tile.softmax_update
// OVERLAP-NOT: tile.pv
// OVERLAP: tile.yield %{{.*}}, %{{.*}}, %p
// OVERLAP: tile.kv_loop
// OVERLAP: ^bb0(%[[J:.*]]: i32, %[[M:.*]]: !tile.stats<{{.*}}>, %[[A:.*]]: !tile.acc<{{.*}}>, %[[P:.*]]: tensor<{{.*}}xbf16>):
// OVERLAP: %[[I:.*]] = arith.subi %{{.*}}, %[[J]] : i32
// OVERLAP-NEXT: %[[IP:.*]] = arith.subi %[[I]], %{{.*}} : i32
// OVERLAP-NEXT: %[[JN:.*]] = arith.addi %[[J]], %{{.*}} : i32
// OVERLAP: %[[S:.*]], %[[TS:.*]] = tile.qk
// OVERLAP-NEXT: tile.barrier_wait %{{.*}}[%[[IP]]]
// OVERLAP-NEXT: %[[VS:.*]] = tile.slot %{{.*}}[%[[IP]]]
// OVERLAP-NEXT: %[[V:.*]] = tile.load v[%[[JN]]] from %[[VS]]
// OVERLAP-NEXT: %[[ACC:.*]], %[[TPV:.*]] = tile.pv %[[P]], %[[V]], %[[A]]
// OVERLAP-NEXT: tile.mma_wait %[[TS]]
// OVERLAP-NEXT: tile.barrier_arrive %{{.*}}[%[[I]]]
// OVERLAP: %[[PN:.*]], %[[ALPHA:.*]], %[[NEW:.*]] = tile.softmax_update %{{.*}}, %[[M]]
// OVERLAP-NEXT: tile.mma_wait %[[TPV]]
// OVERLAP-NEXT: tile.barrier_arrive %{{.*}}[%[[IP]]]
// OVERLAP-NEXT: %[[R:.*]] = tile.rescale %[[ACC]], %[[ALPHA]]
// OVERLAP-NEXT: tile.yield %[[NEW]], %[[R]], %[[PN]]
// The epilogue: P·V of the last tile, P passed through.
// OVERLAP: tile.load v[%arg{{[0-9]+}}]
// OVERLAP-NEXT: tile.pv %arg{{[0-9]+}}, %{{.*}}, %arg{{[0-9]+}}
// OVERLAP-NEXT: tile.mma_wait
// OVERLAP-NEXT: tile.barrier_arrive
// OVERLAP-NEXT: tile.yield %arg{{[0-9]+}}, %{{[0-9a-z_]+}}, %arg{{[0-9]+}} : !tile.stats
// OVERLAP-NEXT: }
// OVERLAP-NEXT: tile.finalize
// Four segments for causal: the prologue, tail boundary, interior, the epilogue.
// LOOPS-COUNT-4: tile.kv_loop
// LOOPS-NOT: tile.kv_loop

// SM90: target = #tile.target<arch = "sm_90a", isa = "sm90">
// NOTARGET: schedule 'fa3' has no lowering for sm_80

// Persistent blocks (persistent=1): each role's ops become a tile.work_loop over the block's tiles, the rules and
// bounds copied into both; Q has an empty barrier the consumers arrive on after the last loop with a Q·Kᵀ (before
// the P·V-only epilogue), and the producer waits on it before each tile's Q, at ring position = the tile count; K/V
// ring positions start where the tile before stopped.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline="persistent=1" | FileCheck %s --check-prefix=PERSISTENT
// PERSISTENT: %[[QB:.*]] = tile.buffer q
// PERSISTENT: %[[QF:.*]] = tile.barrier %[[QB]] {bytes = 24576 : i64}
// PERSISTENT: %[[QE:.*]] = tile.barrier %[[QB]] {arrivals = 1 : i64}
// PERSISTENT-NEXT: tile.role "producer"
// PERSISTENT-NEXT: %[[Z:.*]] = arith.constant 0 : i32
// PERSISTENT-NEXT: %{{.*}} = tile.work_loop iter_args(%[[Z]]) : i32 -> i32 {
// PERSISTENT-NEXT: ^bb0(%[[N:.*]]: i32, %[[BASE:.*]]: i32):
// PERSISTENT: tile.kv_range may
// PERSISTENT: tile.barrier_wait %[[QE]][%[[N]]]
// PERSISTENT-NEXT: tile.copy_async q into %{{.*}} arrive %[[QF]][%[[N]]]
// PERSISTENT: tile.kv_walk from %[[LO:.*]] to %[[HI:.*]] order descending
// PERSISTENT: %[[I:.*]] = arith.addi %[[BASE]], %{{.*}} : i32
// PERSISTENT-NEXT: tile.slot %{{.*}}[%[[I]]]
// PERSISTENT: %[[W:.*]] = arith.subi %[[HI]], %[[LO]] : i32
// PERSISTENT-NEXT: %[[C:.*]] = arith.maxsi %[[W]], %{{.*}} : i32
// PERSISTENT-NEXT: %[[NEXT:.*]] = arith.addi %[[BASE]], %[[C]] : i32
// PERSISTENT-NEXT: tile.yield %[[NEXT]] : i32
// PERSISTENT: tile.role "consumer"
// PERSISTENT: tile.work_loop iter_args
// PERSISTENT-NEXT: ^bb0(%[[CN:.*]]: i32, %{{.*}}: i32):
// PERSISTENT: tile.kv_range may
// PERSISTENT: tile.barrier_wait %[[QF]][%[[CN]]]
// PERSISTENT: segment interior
// PERSISTENT: tile.barrier_arrive %[[QE]][%[[CN]]]
// PERSISTENT-NEXT: arith.addi
// PERSISTENT-NEXT: arith.minsi
// PERSISTENT-NEXT: tile.kv_loop
// PERSISTENT-NOT: tile.qk
// PERSISTENT: tile.pv
// A persistent block released Q's slot for the next tile's Q: O is stored from the registers.
// PERSISTENT: tile.store o %{{[A-Za-z_0-9]+}} : tensor<{{[0-9x]+}}xf32>{{$}}

// A persistent block that stages O in Q's slot releases the slot after O left through it, not after the last Q·Kᵀ.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline="persistent=1 stage-o=1" | FileCheck %s --check-prefix=STAGEPERSISTENT
// STAGEPERSISTENT: %[[QE:.*]] = tile.barrier %{{.*}} {arrivals = 1 : i64} : <tensor<{{[0-9x]+}}xbf16>, slots = 1>
// STAGEPERSISTENT: tile.role "consumer"
// STAGEPERSISTENT: tile.work_loop
// STAGEPERSISTENT-NEXT: ^bb0(%[[CN:.*]]: i32, %{{.*}}: i32):
// STAGEPERSISTENT-NOT: tile.barrier_arrive %[[QE]]
// STAGEPERSISTENT: tile.store o %{{.*}} through %{{.*}} : tensor<{{[0-9x]+}}xf32>, !tile.slot<tensor<{{[0-9x]+}}xbf16>>
// STAGEPERSISTENT-NEXT: tile.barrier_arrive %[[QE]][%[[CN]]]

// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline="stage-o=0" | FileCheck %s --check-prefix=DIRECT
// DIRECT: tile.role "consumer"
// DIRECT: tile.store o %{{[A-Za-z_0-9]+}} : tensor<{{[0-9x]+}}xf32>{{$}}

// The dynamic scheduler (scheduler=dynamic, persistent implied): a tile.work_queue before the roles; the producer's
// loop takes the units, the consumer's receives them and releases the queue's cell first thing in each tile.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline="scheduler=dynamic" | FileCheck %s --check-prefix=DYNAMIC
// DYNAMIC: %[[WF:.*]], %[[WE:.*]] = tile.work_queue : <slots = 1>, <slots = 1>
// DYNAMIC-NEXT: tile.role "producer"
// DYNAMIC: tile.work_loop dynamic(%[[WF]], %[[WE]] : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take iter_args
// DYNAMIC: tile.role "consumer"
// DYNAMIC: tile.work_loop dynamic(%[[WF]], %[[WE]] : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) iter_args
// DYNAMIC-NEXT: ^bb0(%[[DN:.*]]: i32, %{{.*}}: i32):
// DYNAMIC-NEXT: tile.barrier_arrive %[[WE]][%[[DN]]]
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline="scheduler=dynamic persistent=0" 2>&1 | FileCheck %s --check-prefix=DYNOFF
// DYNOFF: tile-role-pipeline: scheduler = dynamic hands tiles to persistent blocks, but persistent = 0
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3" --tile-split-boundary --tile-role-pipeline="scheduler=lpt" 2>&1 | FileCheck %s --check-prefix=DYNBAD
// DYNBAD: tile-role-pipeline: scheduler = 'lpt' is not accepted; accepted: static, dynamic
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=scheduler=lpt" 2>&1 | FileCheck %s --check-prefix=KNOBBAD
// KNOBBAD: fa3: option 'scheduler=lpt' is not of the form name=static|dynamic
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=scheduler=dynamic,persistent=0" 2>&1 | FileCheck %s --check-prefix=KNOBOFF
// KNOBOFF: fa3: scheduler = dynamic hands tiles to persistent blocks, but persistent = 0; accepted: scheduler = static with persistent = 0, or persistent = 1 (or unset)
