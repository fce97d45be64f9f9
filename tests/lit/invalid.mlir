// RUN: flashtile-opt %s --split-input-file --verify-diagnostics

// A program's kind must be registered (passes/IR/ProgramKinds.h).
// expected-error @+1 {{'tile.func' op program kind 'sideways' is not registered; known: backward_main, backward_postprocess, backward_preprocess, forward}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], kind = "sideways"} {
}

// -----

// expected-error @+1 {{'tile.func' op dtype must be f16, bf16 or f8E4M3FN (e4m3), got 'f32'}}
tile.func @f attributes {dtype = f32, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
}

// -----

// expected-error @+1 {{'tile.func' op head_dim must be a multiple of 8 in [8, 512], got 60}}
tile.func @f attributes {dtype = bf16, head_dim = 60 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{expected a dimension (batch, heads_q, heads_kv, seqlen_q, seqlen_k, key_offset, split_begin, split_end, kv_step, batch_index, head_index, kv_tile, q_offset, k_offset, seqlen_q_global, seqlen_k_global, key_offset_global, head_offset, heads_q_global, heads_kv_global), got 'seqlen'}}
  %x = tile.dim seqlen
// MLIR's note on the failed attribute points at the token after the word.
// expected-error @+1 {{failed to parse Tile_DimAttr parameter 'value'}}
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap", params = ["cap"]} {
  // expected-error @+1 {{'tile.param' op 'slope' is not a parameter of @f (declared: ["cap"])}}
  %x = tile.param "slope"
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op element type 'f16' differs from the program's dtype 'bf16'}}
  %q = tile.load q : tensor<?x64xf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op the k tile needs a tile index: k[%j]}}
  %k = tile.load k : tensor<?x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+2 {{expected an input operand (q, k, v, o, do, lse, delta, dq_accum), got 'x'}}
  // expected-error @+1 {{failed to parse Tile_OperandAttr parameter 'value'}}
  %k = tile.load x : tensor<?x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<128x64xbf16>
  %k = tile.load q : tensor<64x64xbf16>
  // expected-error @+1 {{'tile.qk' op result must be 128x64 (Q rows x K rows), got 128x32}}
  %s = tile.qk %q, %k : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x32xf32>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<128x64xbf16>
  %k = tile.load q : tensor<128x64xbf16>
  %s = tile.qk %q, %k : tensor<128x64xbf16>, tensor<128x64xbf16> -> tensor<128x128xf32>
  // expected-error @+1 {{'tile.mask' op mask region must yield (i1)}}
  %m = tile.mask %s : tensor<128x128xf32> {
  ^bb0(%b: i32, %h: i32, %qi: i32, %kv: i32):
    tile.yield %kv : i32
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+2 {{expected a KV-range kind (may, full), got 'some'}}
  // expected-error @+1 {{failed to parse Tile_RangeKindAttr parameter 'value'}}
  %lo, %hi = tile.kv_range some {
  ^bb0(%a: i32, %b: i32, %c: i32, %d: i32):
    tile.yield %a, %b : i32, i32
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.kv_range' op kv_range region must take (i32, i32, i32, i32)}}
  %lo, %hi = tile.kv_range may {
  ^bb0(%first: i32, %last: i32):
    tile.yield %first, %last : i32, i32
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  // expected-error @+1 {{'tile.kv_loop' op segment interior needs bounds (from %lo to %hi)}}
  %st_m, %st_acc = tile.kv_loop segment interior iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    tile.yield %s_m, %s_acc : !tile.stats<?>, !tile.acc<?x64>
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %s0 = arith.constant dense<0.0> : tensor<128x64xf32>
  // expected-error @+1 {{'tile.kv_loop' op carried results must have the types of the carried operands}}
  %st_m, %st_acc, %s = tile.kv_loop iter_args(%st0_m, %st0_acc, %s0) : !tile.stats<?>, !tile.acc<?x64>, tensor<128x64xf32> -> !tile.stats<?>, !tile.acc<?x64>, tensor<128x32xf32> {
  ^bb0(%j: i32, %a_m: !tile.stats<?>, %a_acc: !tile.acc<?x64>, %b: tensor<128x64xf32>):
    tile.yield %a_m, %a_acc, %b : !tile.stats<?>, !tile.acc<?x64>, tensor<128x64xf32>
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %t = arith.constant true
  // expected-error @+1 {{'tile.load' op a predicate only applies to a K/V tile index (tile.load k[%j] if %valid)}}
  %q = tile.load q if %t : tensor<?x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{accumulator columns (head_dim_v) must be static and positive, got 0}}
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x0>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{row statistics rows must be positive or '?', got 0}}
  %m, %acc = tile.init_state : !tile.stats<0>, !tile.acc<?x64>
}

// -----

// The row statistics and the accumulator are separate values, but of the same Q rows.
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.init_state' op row statistics of 64 rows with an accumulator of 32 rows: they must belong to the same Q rows}}
  %m, %acc = tile.init_state : !tile.stats<64>, !tile.acc<32x64>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %m, %acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %m2, %acc2 = tile.init_state : !tile.stats<32>, !tile.acc<32x64>
  // expected-error @+1 {{'tile.finalize' op row statistics of 32 rows with an accumulator of 64 rows: they must belong to the same Q rows}}
  %o, %lse = tile.finalize %m2, %acc : !tile.stats<32>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %m, %acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  // expected-error @+1 {{'tile.kv_loop' op results must have the types of the state it starts from (row statistics, accumulator)}}
  %m1, %acc1 = tile.kv_loop iter_args(%m, %acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64, tensor> {
  ^bb0(%j: i32, %mj: !tile.stats<64>, %aj: !tile.acc<64x64>):
    tile.yield %mj, %aj : !tile.stats<64>, !tile.acc<64x64>
  }
}

// -----

// A softmax step updates the statistics of its score tile's rows.
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %m, %acc = tile.init_state : !tile.stats<32>, !tile.acc<32x64>
  %s = arith.constant dense<0.0> : tensor<64x64xf32>
  // expected-error @+1 {{'tile.softmax_update' op alpha and the row statistics must have one entry per score row}}
  %p, %alpha, %m1 = tile.softmax_update %s, %m : tensor<64x64xf32>, !tile.stats<32> -> tensor<64x64xbf16>, tensor<64xf32>
}

// -----

// tile.rescale and tile.pv write the accumulator; the row statistics are not theirs.
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %m, %acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %alpha = arith.constant dense<1.0> : tensor<64xf32>
  // expected-error @+1 {{'tile.rescale' op operand #0 must be the unnormalized output accumulator of a Q tile, in a memory space, but got '!tile.stats<64>'}}
  %r = tile.rescale %m, %alpha : !tile.stats<64>, tensor<64xf32>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "alibi", params = [],
                         inputs = [#tile.input<"slopes" : f32>]} {
  %h = arith.constant 0 : i32
  // expected-error @+1 {{'tile.input' op 'sinks' is not an input of @f (declared: [#tile.input<"slopes" : f32>])}}
  %x = tile.input "sinks"[%h] : f32
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "document_mask",
                         params = [], inputs = [#tile.input<"doc_ids" : i32>]} {
  %j = arith.constant 0 : i32
  // expected-error @+1 {{'tile.input' op 'doc_ids' is declared with 'i32' elements but read as 'f32'}}
  %x = tile.input "doc_ids"[%j] : f32
}

// -----

// expected-error @+1 {{'tile.func' op input 'slopes' is declared twice}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "alibi", params = [],
                         inputs = [#tile.input<"slopes" : f32>, #tile.input<"slopes" : f32>]} {
}

// -----

// A name is printed into the generated kernel: one that could end a comment there is refused.
// expected-error @+1 {{'tile.func' op variant name "ca\22usal\0Aint injected_line = 1;\0A//" is not accepted: [A-Za-z_] then [A-Za-z0-9_.-], at most 128 characters}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64,
                         variant = "ca\"usal\nint injected_line = 1;\n//", params = []} {
}

// -----

// expected-error @+1 {{'tile.func' op variant name "" is not accepted: [A-Za-z_] then [A-Za-z0-9_.-], at most 128 characters}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "", params = []} {
}

// -----

// expected-error @+1 {{'tile.func' op parameter name "cap\\" is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters)}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap",
                         params = ["cap\\"]} {
}

// -----

// expected-error @+1 {{'tile.func' op input name "1slopes" is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters)}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "alibi", params = [],
                         inputs = [#tile.input<"1slopes" : f32>]} {
}

// -----

// expected-error @+1 {{'tile.func' op input 'scales' must have f32 or i32 elements, got 'f16'}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "v", params = [],
                         inputs = [#tile.input<"scales" : f16>]} {
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "sinks", params = [],
                         inputs = [#tile.input<"sinks" : f32>]} {
  %st_m, %st_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  // expected-error @+1 {{'tile.finalize' op sink region must take (i32, i32)}}
  %o, %lse = tile.finalize %st_m, %st_acc sink {
  ^bb0(%h: i32):
    %s = tile.input "sinks"[%h] : f32
    tile.yield %s : f32
  } : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %st_m, %st_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %q = tile.load q : tensor<?x64xbf16>
  %j = arith.constant 0 : i32
  %k = tile.load k[%j] : tensor<?x64xbf16>
  %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
  // expected-error @+1 {{'tile.softmax_update' op rescale_threshold = 16 is not supported; accepted: 1 to 15 (log2 units; omit it to rescale every tile)}}
  %p, %alpha, %st1_m = tile.softmax_update %s, %st_m {rescale_threshold = 16 : i64} : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
}

// -----

// expected-error @+2 {{schedule lptGroupBlocks = -5 is not supported; accepted: 0 to 1048576}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 1, lptGroupBlocks = -5>} {
}

// -----

// expected-error @+3 {{expected a shape class (default, short), got 'long'}}
// expected-error @+2 {{failed to parse Tile_ScheduleAttr parameter 'shapeClass'}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 1, shapeClass = long>} {
}

// -----

// expected-error @+2 {{schedule rescaleThreshold = 16 is not supported; accepted: 0 to 15}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 1, rescaleThreshold = 16>} {
}

// -----

// The warp layout is the schedule's: its own arithmetic is checked here, the MMA rows by the target (lower-to-target).
// expected-error @+2 {{schedule warpRows = 48 must divide blockM (128)}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 48, stages = 1>} {
}

// -----

// expected-error @+2 {{schedule warp layout split_q: blockM / warpRows = 8 computing warps, but the block has 4}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
}

// -----

// expected-error @+2 {{schedule warp layout split_keys: every warp holds all blockM (16) rows, got warpRows = 8}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "decode", blockM = 16, blockN = 64, warps = 4, warpLayout = split_keys, warpRows = 8, stages = 1>} {
}

// -----

// expected-error @+3 {{expected a warp layout (split_q, split_keys), got 'split_m'}}
// expected-error @+2 {{failed to parse Tile_ScheduleAttr parameter 'warpLayout'}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_m, warpRows = 32, stages = 1>} {
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %o = arith.constant dense<0.0> : tensor<64x64xf32>
  // expected-error @+2 {{expected an output (o, lse, delta, dq, dk, dv), got 'q'}}
  // expected-error @+1 {{failed to parse Tile_OutputAttr parameter 'value'}}
  tile.store q %o : tensor<64x64xf32>
}

// -----

// The outputs a program writes are its kind's.
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %o = arith.constant dense<0.0> : tensor<64x64xf32>
  // expected-error @+1 {{'tile.store' op a forward program writes o, lse, not dq}}
  tile.store dq %o : tensor<64x64xf32>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  // expected-error @+2 {{expected a K/V loop segment (all, tail_boundary, interior, head_boundary), got 'middle'}}
  // expected-error @+1 {{failed to parse Tile_SegmentAttr parameter 'value'}}
  %st_m, %st_acc = tile.kv_loop from %c0 to %c0 segment middle iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    tile.yield %s_m, %s_acc : !tile.stats<?>, !tile.acc<?x64>
  }
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  // expected-error @+2 {{expected a K/V walk order (ascending, descending), got 'backwards'}}
  // expected-error @+1 {{failed to parse Tile_KvOrderAttr parameter 'value'}}
  %st_m, %st_acc = tile.kv_loop from %c0 to %c0 order backwards iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    tile.yield %s_m, %s_acc : !tile.stats<?>, !tile.acc<?x64>
  }
}

// -----

// The instruction families are plug-ins: #tile.target's isa is checked against the registry, which names them.
// expected-error @+2 {{target isa 'sm120' is not a registered instruction family; registered: sm100, sm80, sm90}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
                         target = #tile.target<arch = "sm_100a", isa = "sm120">} {
}

// -----

// A rule region that ends without tile.yield (found by fuzz-ir: the verifier read a terminator that was not there).
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.kv_range' op kv_range region must yield (i32, i32)}}
  %lo, %hi = tile.kv_range may {
  ^bb0(%a: i32, %b: i32, %c: i32, %d: i32):
  }
}

// -----

// A role without its warps (misspelled) is named by its own verifier; its siblings' count skips it.
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  tile.role "a" attributes {warps = 16 : i64, regs = 24 : i64} {
    tile.yield
  }
  // expected-error @+1 {{'tile.role' op requires attribute 'warps'}}
  tile.role "b" attributes {warxps = 20 : i64, regs = 24 : i64} {
    tile.yield
  }
}
