// RUN: flashtile-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// tile.state_load / tile.state_store round-trip; the K/V step is a tile.dim.
// CHECK-LABEL: tile.func @step
// CHECK: tile.dim kv_step
// CHECK: tile.state_load : !tile.stats<64>, !tile.acc<64x64>
// CHECK: %[[M:[A-Za-z_0-9]+]], %[[A:[A-Za-z_0-9]+]] = tile.kv_loop
// CHECK: tile.state_store %[[M]], %[[A]] : !tile.stats<64>, !tile.acc<64x64>
tile.func @step attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %step = tile.dim kv_step
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

tile.func @loadWithoutStore attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.state_load' op needs exactly one tile.state_store in its tile.func, found 0}}
  %st0_m, %st0_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
  %o, %lse = tile.finalize %st0_m, %st0_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}

// -----

tile.func @storeWithoutLoad attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0_m, %st0_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  // expected-error @+1 {{'tile.state_store' op needs exactly one tile.state_load in its tile.func, found 0}}
  %st1_m, %st1_acc = tile.state_store %st0_m, %st0_acc : !tile.stats<64>, !tile.acc<64x64>
}

// -----

tile.func @twoLoads attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.state_load' op appears more than once in its tile.func}}
  %a_m, %a_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
  %b_m, %b_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%a_m, %a_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %st2_m, %st2_acc = tile.state_store %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64>
}

// -----

tile.func @unchanged attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0_m, %st0_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
  // expected-error @+1 {{'tile.state_store' op stores the state it loaded, unchanged: a K/V step must visit its tile (tile.kv_loop) between tile.state_load and tile.state_store}}
  %st1_m, %st1_acc = tile.state_store %st0_m, %st0_acc : !tile.stats<64>, !tile.acc<64x64>
}

// -----

tile.func @nested attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0_m, %st0_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    // expected-error @+1 {{'tile.state_load' op must be at the top level of a tile.func: the state moves through global memory between launches, once per program instance}}
    %l_m, %l_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
}

// -----

tile.func @twoStores attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.state_load' op needs exactly one tile.state_store in its tile.func, found 2}}
  %a_m, %a_acc = tile.state_load : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%a_m, %a_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %st2_m, %st2_acc = tile.state_store %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64>
  %st3_m, %st3_acc = tile.state_store %st2_m, %st2_acc : !tile.stats<64>, !tile.acc<64x64>
}

// -----

tile.func @storeInALoop attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %a_m, %a_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%a_m, %a_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    // expected-error @+1 {{'tile.state_store' op must be at the top level of a tile.func}}
    %s2_m, %s2_acc = tile.state_store %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
    tile.yield %s2_m, %s2_acc : !tile.stats<64>, !tile.acc<64x64>
  }
}
