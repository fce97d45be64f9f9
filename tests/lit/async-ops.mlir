// RUN: flashtile-opt %s --split-input-file --verify-diagnostics | FileCheck %s
// The asynchronous ops of pipelined programs: buffers, slots, copies that return tokens, waits that take them, and
// loops that carry tokens. Round trip, then each verifier.

// CHECK-LABEL: tile.func @roundtrip
// CHECK: %[[B:.*]] = tile.buffer k : <tensor<64x64xbf16>, slots = 2>
// CHECK: %[[S:.*]] = tile.slot %[[B]][%{{.*}}] : <tensor<64x64xbf16>, slots = 2>
// CHECK: %[[T:.*]] = tile.copy_async k[%{{.*}}] into %[[S]] if %{{.*}} : <tensor<64x64xbf16>>
// CHECK: %{{.*}}, %{{.*}}, %[[TOUT:.*]] = tile.kv_loop from %{{.*}} to %{{.*}} iter_args(%{{.*}}, %{{.*}}, %[[T]]) : !tile.stats<64>, !tile.acc<64x64>, !tile.token -> !tile.stats<64>, !tile.acc<64x64>, !tile.token
// CHECK: tile.wait %{{.*}}
// CHECK: tile.load k[%{{.*}}] from %{{.*}} : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
// CHECK: tile.wait %[[TOUT]]
tile.func @roundtrip attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %true = arith.constant true
  %s0 = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %t0 = tile.copy_async k[%c0] into %s0 if %true : !tile.slot<tensor<64x64xbf16>>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %st_m, %st_acc, %tout = tile.kv_loop from %c0 to %c2 iter_args(%st0_m, %st0_acc, %t0) : !tile.stats<64>, !tile.acc<64x64>, !tile.token -> !tile.stats<64>, !tile.acc<64x64>, !tile.token {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>, %t: !tile.token):
    tile.wait %t
    %slot = tile.slot %kb[%j] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
    %k = tile.load k[%j] from %slot : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
    tile.yield %s_m, %s_acc, %t : !tile.stats<64>, !tile.acc<64x64>, !tile.token
  }
  tile.wait %tout
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op Q's buffer holds the instance's one Q tile: slots = 1, got 2}}
  %qb = tile.buffer q : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op holds k tiles of 128 columns; the head dim is 64}}
  %kb = tile.buffer k : !tile.buffer<tensor<64x128xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op holds 'f16' tiles but the program's dtype is 'bf16'}}
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+2 {{expected an input operand (q, k, v, o, do, lse, delta, dq_accum), got 'x'}}
  // expected-error @+1 {{failed to parse Tile_OperandAttr parameter 'value'}}
  %kb = tile.buffer x : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

// A buffer holds tiles of a tensor the program's kind reads.
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.buffer' op a forward program reads q, k, v, not o}}
  %ob = tile.buffer o : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{a buffer has 1 to 16 slots, got 0}}
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 0>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{a buffer holds static rank-2 tiles (a scheduled program's), got 'tensor<?x64xbf16>'}}
  %kb = tile.buffer k : !tile.buffer<tensor<?x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.slot' op a buffer of 2 slots needs a tile index: tile.slot %buffer[%j]}}
  %s = tile.slot %kb : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.copy_async' op moves a v tile through a slot of the k buffer}}
  %t = tile.copy_async v[%c0] into %s : !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.copy_async' op the k tile needs a tile index: k[%j]}}
  %t = tile.copy_async k into %s : !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.load' op reads a 'tensor<32x64xbf16>' from a slot of 'tensor<64x64xbf16>'}}
  %k = tile.load k[%c0] from %s : !tile.slot<tensor<64x64xbf16>> : tensor<32x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %qb = tile.buffer q : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %s = tile.slot %qb : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  // expected-error @+1 {{'tile.load' op moves a k tile through a slot of the q buffer}}
  %k = tile.load k[%c0] from %s : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
  %c0 = arith.constant 0 : i32
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.wait' op waits for at least one token}}
  tile.wait
}

// -----

// Barriers, roles and the producer's walk.
// CHECK-LABEL: tile.func @roles
// CHECK: %[[F:.*]] = tile.barrier %{{.*}} {bytes = 8192 : i64} : <tensor<64x64xbf16>, slots = 2>
// CHECK: %[[E:.*]] = tile.barrier %{{.*}} {arrivals = 1 : i64}
// CHECK: tile.role "producer" attributes {regs = 24 : i64, warps = 4 : i64}
// CHECK: tile.kv_walk from %{{.*}} to %{{.*}} order descending
// CHECK: tile.barrier_wait %[[E]][%{{.*}}] : <slots = 2>
// CHECK: tile.copy_async k[%{{.*}}] into %{{.*}} arrive %[[F]][%{{.*}}] : <tensor<64x64xbf16>>, !tile.barrier<slots = 2>
// CHECK: tile.role "consumer" attributes {regs = 240 : i64, warps = 8 : i64}
// CHECK: tile.barrier_arrive %[[E]][%{{.*}}] : <slots = 2>
tile.func @roles attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %full = tile.barrier %kb {bytes = 8192 : i64} : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %empty = tile.barrier %kb {arrivals = 1 : i64} : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    tile.kv_walk from %c0 to %c4 order descending {
    ^bb0(%j: i32):
      %s = tile.slot %kb[%j] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
      tile.barrier_wait %empty[%j] : !tile.barrier<slots = 2>
      %t = tile.copy_async k[%j] into %s arrive %full[%j] : !tile.slot<tensor<64x64xbf16>>, !tile.barrier<slots = 2>
      tile.yield
    }
    tile.yield
  }
  tile.role "consumer" attributes {warps = 8 : i64, regs = 240 : i64} {
    tile.barrier_wait %full[%c0] : !tile.barrier<slots = 2>
    tile.barrier_arrive %empty[%c0] : !tile.barrier<slots = 2>
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.barrier' op expects 4096 bytes per phase, but a 'tensor<64x64xbf16>' tile is 8192}}
  %full = tile.barrier %kb {bytes = 4096 : i64} : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.barrier' op is a full barrier (bytes = the tile's bytes) or an empty one (arrivals = consumers): give exactly one}}
  %b = tile.barrier %kb : !tile.buffer<tensor<64x64xbf16>, slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.role' op regs must be a multiple of 8 in [24, 256] (setmaxnreg), got 20}}
  tile.role "producer" attributes {warps = 4 : i64, regs = 20 : i64} {
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  tile.role "a" attributes {warps = 16 : i64, regs = 24 : i64} {
    tile.yield
  }
  // expected-error @+1 {{'tile.role' op the roles of a block have 36 warps; a block has at most 32}}
  tile.role "b" attributes {warps = 20 : i64, regs = 24 : i64} {
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
    // expected-error @+1 {{'tile.copy_async' op inside a tile.role must arrive on a full barrier}}
    %t = tile.copy_async k[%c0] into %s : !tile.slot<tensor<64x64xbf16>>
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %empty = tile.barrier %kb {arrivals = 1 : i64} : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  // expected-error @+1 {{'tile.copy_async' op arrives on an empty barrier}}
  %t = tile.copy_async k[%c0] into %s arrive %empty[%c0] : !tile.slot<tensor<64x64xbf16>>, !tile.barrier<slots = 2>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  // expected-error @+2 {{expected a K/V walk order (ascending, descending), got 'sideways'}}
  // expected-error @+1 {{failed to parse Tile_KvOrderAttr parameter 'value'}}
  tile.kv_walk from %c0 to %c0 order sideways {
  ^bb0(%j: i32):
    tile.yield
  }
}

// -----

// The online-softmax state's accumulator may live outside registers (FA4: tensor memory); m and l stay in registers.
// CHECK-LABEL: tile.func @separable
// CHECK: tile.init_state : !tile.stats<64>, !tile.acc<64x64, tensor>
// CHECK: tile.init_state : !tile.stats<64>, !tile.acc<64x64, shared>
// CHECK: tile.init_state : !tile.stats<64>, !tile.acc<64x64>
tile.func @separable attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %a_m, %a_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64, tensor>
  %b_m, %b_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64, shared>
  %c_m, %c_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64, registers>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{the accumulator's memory space is registers, shared or tensor; got 'global'}}
  %a_m, %a_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64, global>
}

// -----

// Asynchronous MMAs return tokens; tile.mma_wait takes them.
// CHECK-LABEL: tile.func @mma
// CHECK: %[[S:.*]], %[[T:.*]] = tile.qk %{{.*}}, %{{.*}} : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>, !tile.token
// CHECK-NEXT: tile.mma_wait %[[T]]
tile.func @mma attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<64x64xbf16>
  %c0 = arith.constant 0 : i32
  %k = tile.load k[%c0] : tensor<64x64xbf16>
  %s, %t = tile.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>, !tile.token
  tile.mma_wait %t
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %kb = tile.buffer k : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %c0 = arith.constant 0 : i32
  %s = tile.slot %kb[%c0] : !tile.buffer<tensor<64x64xbf16>, slots = 2>
  %t = tile.copy_async k[%c0] into %s : !tile.slot<tensor<64x64xbf16>>
  // expected-error @+1 {{'tile.mma_wait' op waits for a copy's token; copies are waited by tile.wait or a full barrier}}
  tile.mma_wait %t
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<64x64xbf16>
  %c0 = arith.constant 0 : i32
  %k = tile.load k[%c0] : tensor<64x64xbf16>
  %s, %t = tile.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>, !tile.token
  // expected-error @+1 {{'tile.wait' op waits for an MMA's token; asynchronous MMAs are waited by tile.mma_wait}}
  tile.wait %t
}

// -----

// Persistent blocks: each role loops over its block's work tiles, carrying a ring position from tile to tile.
// CHECK-LABEL: tile.func @work_loop
// CHECK: tile.role "producer"
// CHECK: %{{.*}} = tile.work_loop iter_args(%{{.*}}) : i32 -> i32 {
// CHECK-NEXT: ^bb0(%[[N:.*]]: i32, %[[BASE:.*]]: i32):
// CHECK: tile.yield %{{.*}} : i32
// CHECK: tile.role "consumer"
// CHECK: tile.work_loop {
tile.func @work_loop attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    %end = tile.work_loop iter_args(%c0) : i32 -> i32 {
    ^bb0(%n: i32, %base: i32):
      %next = arith.addi %base, %c4 : i32
      tile.yield %next : i32
    }
    tile.yield
  }
  tile.role "consumer" attributes {warps = 8 : i64, regs = 240 : i64} {
    tile.work_loop {
    ^bb0(%n: i32):
      tile.yield
    }
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.work_loop' op body takes the tile count and one i32 per iter_arg (2 i32 arguments), got 1}}
  %end = tile.work_loop iter_args(%c0) : i32 -> i32 {
  ^bb0(%n: i32):
    tile.yield %n : i32
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.work_loop' op body yields one i32 per iter_arg (1)}}
  %end = tile.work_loop iter_args(%c0) : i32 -> i32 {
  ^bb0(%n: i32, %base: i32):
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  tile.work_loop {
  ^bb0(%n: i32):
    // expected-error @+1 {{'tile.work_loop' op must be at the top level of a tile.func or of one of its tile.role regions}}
    tile.work_loop {
    ^bb0(%m: i32):
      tile.yield
    }
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    // expected-error @+1 {{'tile.work_loop' op is in role 'producer' but role 'consumer' has none: the roles of a block walk the same tiles}}
    tile.work_loop {
    ^bb0(%n: i32):
      tile.yield
    }
    tile.yield
  }
  tile.role "consumer" attributes {warps = 8 : i64, regs = 240 : i64} {
    tile.yield
  }
}

// -----

// O staged through Q's slot (tile.store o ... through, tile.store_split ... through): round trip.
// CHECK-LABEL: tile.func @staged
// CHECK: tile.store o %{{.*}} through %[[QS:.*]] : tensor<64x64xf32>, !tile.slot<tensor<64x64xbf16>>
// CHECK: tile.store_split %{{.*}}, %{{.*}} through %{{.*}} : tensor<64x64xf32>, tensor<64xf32>, !tile.slot<tensor<64x64xbf16>>
tile.func @staged attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %qb = tile.buffer q : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %qs = tile.slot %qb : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %st_m, %st_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o through %qs : tensor<64x64xf32>, !tile.slot<tensor<64x64xbf16>>
  tile.store_split %o, %lse through %qs : tensor<64x64xf32>, tensor<64xf32>, !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %qb = tile.buffer q : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %qs = tile.slot %qb : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %st_m, %st_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  // expected-error @+1 {{'tile.store' op stages LSE through shared memory; only O is staged (`tile.store o ... through`)}}
  tile.store lse %lse through %qs : tensor<64xf32>, !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 128 : i64, variant = "none", params = []} {
  %qb = tile.buffer q : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %qs = tile.slot %qb : !tile.buffer<tensor<64x64xbf16>, slots = 1>
  %st_m, %st_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x128>
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x128> -> tensor<64x128xf32>, tensor<64xf32>
  // expected-error @+1 {{'tile.store' op stages a 64x128 O tile through a slot of 64x64; the slot needs O's rows and at least its columns}}
  tile.store o %o through %qs : tensor<64x128xf32>, !tile.slot<tensor<64x64xbf16>>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %qb = tile.buffer q : !tile.buffer<tensor<32x64xbf16>, slots = 1>
  %qs = tile.slot %qb : !tile.buffer<tensor<32x64xbf16>, slots = 1>
  %st_m, %st_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  // expected-error @+1 {{'tile.store_split' op stages a 64x64 O tile through a slot of 32x64; the slot needs O's rows and at least its columns}}
  tile.store_split %o, %lse through %qs : tensor<64x64xf32>, tensor<64xf32>, !tile.slot<tensor<32x64xbf16>>
}

// -----

// The dynamic scheduler: a work queue hands each tile's unit from the role that takes it to the other role, which
// releases the queue's cell (its empty barrier) at the tile count.
// CHECK-LABEL: tile.func @dynamic_work_loop
// CHECK: %[[F:.*]], %[[E:.*]] = tile.work_queue : <slots = 1>, <slots = 1>
// CHECK: tile.role "producer"
// CHECK: tile.work_loop dynamic(%[[F]], %[[E]] : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take iter_args(%{{.*}}) : i32 -> i32 {
// CHECK: tile.role "consumer"
// CHECK: tile.work_loop dynamic(%[[F]], %[[E]] : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) {
// CHECK-NEXT: ^bb0(%[[N:.*]]: i32):
// CHECK-NEXT: tile.barrier_arrive %[[E]][%[[N]]]
tile.func @dynamic_work_loop attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  %full, %empty = tile.work_queue {arrivals = 1} : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    %end = tile.work_loop dynamic(%full, %empty : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take iter_args(%c0) : i32 -> i32 {
    ^bb0(%n: i32, %base: i32):
      %next = arith.addi %base, %c4 : i32
      tile.yield %next : i32
    }
    tile.yield
  }
  tile.role "consumer" attributes {warps = 8 : i64, regs = 240 : i64} {
    tile.work_loop dynamic(%full, %empty : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) {
    ^bb0(%n: i32):
      tile.barrier_arrive %empty[%n] : !tile.barrier<slots = 1>
      tile.yield
    }
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.work_loop' op takes units (take) but is not dynamic: only a dynamic loop takes them from a counter}}
  tile.work_loop take {
  ^bb0(%n: i32):
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %full, %empty = tile.work_queue : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  // expected-error @+1 {{'tile.work_loop' op dynamic(full, empty) must be the two barriers of one tile.work_queue, in that order}}
  tile.work_loop dynamic(%empty, %full : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take {
  ^bb0(%n: i32):
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %full, %empty = tile.work_queue : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  // expected-error @+1 {{'tile.work_loop' op is dynamic outside roles, so it must take its units itself (take)}}
  tile.work_loop dynamic(%full, %empty : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) {
  ^bb0(%n: i32):
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %full, %empty = tile.work_queue : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    // expected-error @+1 {{'tile.work_loop' op is dynamic in role 'producer' but role 'consumer' loops statically: the roles of a block walk the same tiles}}
    tile.work_loop dynamic(%full, %empty : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take {
    ^bb0(%n: i32):
      tile.yield
    }
    tile.yield
  }
  tile.role "consumer" attributes {warps = 8 : i64, regs = 240 : i64} {
    tile.work_loop {
    ^bb0(%n: i32):
      tile.yield
    }
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %full, %empty = tile.work_queue : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  tile.role "producer" attributes {warps = 4 : i64, regs = 24 : i64} {
    // expected-error @+1 {{'tile.work_loop' op is dynamic in roles of which 2 take units; exactly one role takes them (take) and hands them to the others}}
    tile.work_loop dynamic(%full, %empty : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take {
    ^bb0(%n: i32):
      tile.yield
    }
    tile.yield
  }
  tile.role "consumer" attributes {warps = 8 : i64, regs = 240 : i64} {
    tile.work_loop dynamic(%full, %empty : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>) take {
    ^bb0(%n: i32):
      tile.yield
    }
    tile.yield
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.work_queue' op hands over one unit at a time: its barriers have 1 slot, got 2}}
  %full, %empty = tile.work_queue : !tile.barrier<slots = 2>, !tile.barrier<slots = 1>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.work_queue' op expects 1 to 32 releasing roles (arrivals), got 0}}
  %full, %empty = tile.work_queue {arrivals = 0} : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
}
