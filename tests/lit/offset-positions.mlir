// RUN: flashtile-opt %inputs/causal.mlir --tile-offset-positions | FileCheck %s
// RUN: flashtile-opt %s --split-input-file --tile-offset-positions --verify-diagnostics

// A block of a larger problem: the rules get their rows plus q_offset and give back keys minus k_offset; the mask
// reads global rows, keys and sizes; loads and the loop are untouched.
// CHECK: tile.func @attention attributes {{.*}}tile.position_offsets
// CHECK: tile.kv_range may
// CHECK: ^bb0(%[[FIRST:[a-z0-9]+]]: i32, %[[LAST:[a-z0-9]+]]: i32, %{{[a-z0-9]+}}: i32, %[[H:[a-z0-9]+]]: i32):
// CHECK-DAG: tile.dim q_offset
// CHECK-DAG: arith.addi %[[FIRST]], %{{.*}} : i32
// CHECK-DAG: arith.addi %[[LAST]], %{{.*}} : i32
// CHECK-DAG: tile.dim head_offset
// CHECK-DAG: arith.addi %[[H]], %{{.*}} : i32
// CHECK-DAG: tile.dim seqlen_q_global
// CHECK-DAG: tile.dim seqlen_k_global
// CHECK: %[[KOFF:.*]] = tile.dim k_offset
// CHECK: %[[LO:.*]] = arith.subi %{{.*}}, %[[KOFF]]
// CHECK: %[[HI:.*]] = arith.subi %{{.*}}, %[[KOFF]]
// CHECK: tile.yield %[[LO]], %[[HI]]
// CHECK: tile.kv_range full
// CHECK: tile.load q
// CHECK: tile.mask
// CHECK: ^bb0(%{{[a-z0-9]+}}: i32, %{{[a-z0-9]+}}: i32, %[[QI:[a-z0-9]+]]: i32, %[[KV:[a-z0-9]+]]: i32):
// CHECK-DAG: tile.dim k_offset
// CHECK-DAG: %[[GKV:.*]] = arith.addi %[[KV]], %{{.*}} : i32
// CHECK-DAG: tile.dim q_offset
// CHECK-DAG: arith.addi %[[QI]], %{{.*}} : i32
// CHECK: arith.cmpi sle, %[[GKV]], %{{.*}}

// -----

// The rewrite is done once: a program placed already is refused.
// expected-error @+1 {{'tile.func' op already takes position offsets (tile-offset-positions ran twice)}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], tile.position_offsets} {
}
