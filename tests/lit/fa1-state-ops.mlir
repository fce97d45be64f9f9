// RUN: flashtile-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// tile.state_load / tile.state_store round-trip; the K/V step is a tile.dim.
// CHECK-LABEL: tile.func @step
// CHECK: tile.dim kv_step
// CHECK: %[[ST0:.*]] = tile.state_load : <64x64>
// CHECK: %[[ST:.*]] = tile.kv_loop
// CHECK: tile.state_store %[[ST]] : <64x64>
tile.func @step attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %step = tile.dim kv_step
  %q = tile.load q : tensor<64x64xbf16>
  %st0 = tile.state_load : !tile.state<64x64>
  %st = tile.kv_loop iter_args(%st0) : !tile.state<64x64> -> !tile.state<64x64> {
  ^bb0(%j: i32, %s: !tile.state<64x64>):
    tile.yield %s : !tile.state<64x64>
  }
  %st2 = tile.state_store %st : !tile.state<64x64>
  %o, %lse = tile.finalize %st2 : !tile.state<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}

// -----

tile.func @loadWithoutStore attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.state_load' op needs exactly one tile.state_store in its tile.func, found 0}}
  %st0 = tile.state_load : !tile.state<64x64>
  %o, %lse = tile.finalize %st0 : !tile.state<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}

// -----

tile.func @storeWithoutLoad attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0 = tile.init_state : !tile.state<64x64>
  // expected-error @+1 {{'tile.state_store' op needs exactly one tile.state_load in its tile.func, found 0}}
  %st1 = tile.state_store %st0 : !tile.state<64x64>
}

// -----

tile.func @twoLoads attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.state_load' op appears more than once in its tile.func}}
  %a = tile.state_load : !tile.state<64x64>
  %b = tile.state_load : !tile.state<64x64>
  %st = tile.kv_loop iter_args(%a) : !tile.state<64x64> -> !tile.state<64x64> {
  ^bb0(%j: i32, %s: !tile.state<64x64>):
    tile.yield %s : !tile.state<64x64>
  }
  %st2 = tile.state_store %st : !tile.state<64x64>
}

// -----

tile.func @unchanged attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0 = tile.state_load : !tile.state<64x64>
  // expected-error @+1 {{'tile.state_store' op stores the state it loaded, unchanged: a K/V step must visit its tile (tile.kv_loop) between tile.state_load and tile.state_store}}
  %st1 = tile.state_store %st0 : !tile.state<64x64>
}

// -----

tile.func @nested attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0 = tile.init_state : !tile.state<64x64>
  %st = tile.kv_loop iter_args(%st0) : !tile.state<64x64> -> !tile.state<64x64> {
  ^bb0(%j: i32, %s: !tile.state<64x64>):
    // expected-error @+1 {{'tile.state_load' op must be at the top level of a tile.func: the state moves through global memory between launches, once per program instance}}
    %l = tile.state_load : !tile.state<64x64>
    tile.yield %s : !tile.state<64x64>
  }
}

// -----

tile.func @twoStores attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.state_load' op needs exactly one tile.state_store in its tile.func, found 2}}
  %a = tile.state_load : !tile.state<64x64>
  %st = tile.kv_loop iter_args(%a) : !tile.state<64x64> -> !tile.state<64x64> {
  ^bb0(%j: i32, %s: !tile.state<64x64>):
    tile.yield %s : !tile.state<64x64>
  }
  %st2 = tile.state_store %st : !tile.state<64x64>
  %st3 = tile.state_store %st2 : !tile.state<64x64>
}

// -----

tile.func @storeInALoop attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %a = tile.init_state : !tile.state<64x64>
  %st = tile.kv_loop iter_args(%a) : !tile.state<64x64> -> !tile.state<64x64> {
  ^bb0(%j: i32, %s: !tile.state<64x64>):
    // expected-error @+1 {{'tile.state_store' op must be at the top level of a tile.func}}
    %s2 = tile.state_store %s : !tile.state<64x64>
    tile.yield %s2 : !tile.state<64x64>
  }
}
