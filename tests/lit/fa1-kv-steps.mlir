// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa1" --tile-fa1-kv-steps | FileCheck %s

// The fa1 schedule's defaults at head dim 64: 64 x 64 tiles of 4 warps, one K and one V buffer.
// CHECK: schedule = #tile.schedule<name = "fa1", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>
// The "may" rule is bounded by the launch's K/V tile, [kv_step·64, kv_step·64 + 64); the "full" rule is unchanged.
// CHECK: tile.kv_range may
// CHECK:   %[[STEP:.*]] = tile.dim kv_step
// CHECK:   %[[N:.*]] = arith.constant 64 : i32
// CHECK:   %[[BEGIN:.*]] = arith.muli %[[STEP]], %[[N]] : i32
// CHECK:   %[[END:.*]] = arith.addi %[[BEGIN]], %[[N]] : i32
// CHECK:   %[[LO:.*]] = arith.maxsi %{{.*}}, %[[BEGIN]] : i32
// CHECK:   %[[HI:.*]] = arith.minsi %{{.*}}, %[[END]] : i32
// A step past the sequence's keys (varlen) walks nothing: [0, 0), not a range clamped into its last partial tile.
// CHECK:   %[[SK:.*]] = tile.dim seqlen_k
// CHECK:   %[[PAST:.*]] = arith.cmpi sge, %[[BEGIN]], %[[SK]] : i32
// CHECK:   %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK:   %[[LO2:.*]] = arith.select %[[PAST]], %[[ZERO]], %[[LO]] : i32
// CHECK:   %[[HI2:.*]] = arith.select %[[PAST]], %[[ZERO]], %[[HI]] : i32
// CHECK:   tile.yield %[[LO2]], %[[HI2]] : i32, i32
// CHECK: tile.kv_range full
// CHECK-NOT: kv_step
// The state comes from the previous step (empty at step 0) and goes back before it is finalized.
// CHECK-NOT: tile.init_state
// CHECK: %[[M0:[A-Za-z_0-9]+]], %[[A0:[A-Za-z_0-9]+]] = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
// CHECK: %[[M:[A-Za-z_0-9]+]], %[[A:[A-Za-z_0-9]+]] = tile.kv_loop iter_args(%[[M0]], %[[A0]])
// CHECK: %[[SM:[A-Za-z_0-9]+]], %[[SA:[A-Za-z_0-9]+]] = tile.state_store %[[M]], %[[A]] : !tile.stats<64>, !tile.acc<64x64>
// CHECK-NEXT: %[[O:.*]], %[[LSE:.*]] = tile.finalize %[[SM]], %[[SA]]
// CHECK-NEXT: tile.store o %[[O]]
// CHECK-NEXT: tile.store lse %[[LSE]]

// The whole pipeline: the step's tile is walked in the three segments of the rules, each bounded by the step.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa1" --tile-fa1-kv-steps --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target | FileCheck %s --check-prefix=PIPE
// PIPE: target = #tile.target<arch = "sm_80", isa = "sm80">
// PIPE: tile.state_load
// PIPE: segment tail_boundary
// PIPE: segment interior
// PIPE: tile.state_store

// Knobs go through the registry: fa1 has no stages knob; a block-m that does not give each warp whole 16-row MMA
// tiles is refused naming the knob.
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa1 options=stages=2" 2>&1 | FileCheck %s --check-prefix=KNOB
// KNOB: stages
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa1 options=block-m=48" 2>&1 | FileCheck %s --check-prefix=BLOCKM
// BLOCKM: fa1: block-m = 48 is not supported; accepted: a multiple of 16 x warps (64) up to 256

// RUN: flashtile-opt %s --split-input-file --tile-fa1-kv-steps --verify-diagnostics

// expected-error @+1 {{'tile.func' op must be scheduled before splitting the walk into K/V steps (run tile-apply-schedule)}}
tile.func @unscheduled attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<?x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    tile.yield %s_m, %s_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// expected-error @+1 {{'tile.func' op has no tile.kv_range may rule to bound by the K/V step}}
tile.func @noRule attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                              schedule = #tile.schedule<name = "fa1", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
  %q = tile.load q : tensor<64x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}

// -----

// expected-error @+1 {{'tile.func' op already walks K/V steps (it has a tile.state_load)}}
tile.func @twice attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                             schedule = #tile.schedule<name = "fa1", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
  %q = tile.load q : tensor<64x64xbf16>
  %st0_m, %st0_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %st2_m, %st2_acc = tile.state_store %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64>
  %o, %lse = tile.finalize %st2_m, %st2_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}

// -----

// expected-error @+1 {{'tile.func' op has bounded K/V loops; split the walk into K/V steps before tile-split-boundary}}
tile.func @bounded attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                               schedule = #tile.schedule<name = "fa1", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  %q = tile.load q : tensor<64x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop from %c0 to %c4 iter_args(%st0_m, %st0_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}
