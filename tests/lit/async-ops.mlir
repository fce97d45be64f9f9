// RUN: flashtile-opt %s --split-input-file --verify-diagnostics | FileCheck %s
// The asynchronous ops of pipelined programs: buffers, slots, copies that return tokens, waits that take them, and
// loops that carry tokens. Round trip, then each verifier.

// CHECK-LABEL: tile.func @roundtrip
// CHECK: %[[B:.*]] = tile.buffer "k" : <tensor<64x64xbf16>, slots = 2>
// CHECK: %[[S:.*]] = tile.slot %[[B]][%{{.*}}] : <tensor<64x64xbf16>, slots = 2>
// CHECK: %[[T:.*]] = tile.copy_async "k"[%{{.*}}] into %[[S]] if %{{.*}} : <tensor<64x64xbf16>>
// CHECK: %{{.*}}, %[[TOUT:.*]] = tile.kv_loop from %{{.*}} to %{{.*}} iter_args(%{{.*}}, %[[T]]) : <64x64>, !tile.token -> <64x64>, !tile.token
// CHECK: tile.wait %{{.*}}
// CHECK: tile.load "k"[%{{.*}}] from %{{.*}} : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
// CHECK: tile.wait %[[TOUT]]
tile.func @roundtrip attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %true = arith.constant true
  %s0 = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %t0 = tile.copy_async "k"[%c0] into %s0 if %true : !tile.slot<tensor<64x64xbf16>>
  %st0 = tile.init_state : !tile.state<64x64>
  %st, %tout = tile.kv_loop from %c0 to %c2 iter_args(%st0, %t0) : !tile.state<64x64>, !tile.token -> !tile.state<64x64>, !tile.token {
  ^bb0(%j: i32, %s: !tile.state<64x64>, %t: !tile.token):
    tile.wait %t
    %slot = tile.slot %kb[%j] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
    %k = tile.load "k"[%j] from %slot : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
    tile.yield %s, %t : !tile.state<64x64>, !tile.token
  }
  tile.wait %tout
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op Q's buffer holds the instance's one Q tile: slots = 1, got 2}}
  %qb = tile.buffer "q" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op holds k tiles of 128 columns; the head dim is 64}}
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x128xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op holds 'f16' tiles but the program's dtype is 'bf16'}}
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op operand 'o' is not one of: q, k, v}}
  %kb = tile.buffer "o" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{a buffer has 1 to 16 slots, got 0}}
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xbf16>, slots = 0>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{a buffer holds static rank-2 tiles (a scheduled program's), got 'tensor<?x64xbf16>'}}
  %kb = tile.buffer "k" : !tile.buffer<tensor<?x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.slot' op a buffer of 2 slots needs a tile index: tile.slot %buffer[%j]}}
  %s = tile.slot %kb : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.copy_async' op moves a v tile through a slot of the "k" buffer}}
  %t = tile.copy_async "v"[%c0] into %s : !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.copy_async' op the k tile needs a tile index: k[%j]}}
  %t = tile.copy_async "k" into %s : !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer "k" : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.load' op reads a 'tensor<32x64xbf16>' from a slot of 'tensor<64x64xbf16>'}}
  %k = tile.load "k"[%c0] from %s : !tile.slot<tensor<64x64xbf16>> : tensor<32x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %qb = tile.buffer "q" : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %s = tile.slot %qb : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  // expected-error @+1 {{'tile.load' op moves a k tile through a slot of the "q" buffer}}
  %k = tile.load "k"[%c0] from %s : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
  %c0 = arith.constant 0 : i32
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.wait' op waits for at least one token}}
  tile.wait
}
