// RUN: flashtile-opt %s --split-input-file --tile-verify-program --verify-diagnostics

// Planted invalid backward programs: each kind's tensors, its verifier's structure and the new ops' checks.

tile.func @f attributes {kind = "backward_preprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op a backward_preprocess program reads o, do, lse, not q}}
  %q = tile.load q : tensor<?x64xbf16>
}

// -----

// expected-error @+1 {{'tile.func' op must store D (delta) exactly once, found 0}}
tile.func @f attributes {kind = "backward_preprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %o = tile.load o : tensor<?x64xbf16>
  %do = tile.load do : tensor<?x64xbf16>
  %d = tile.row_dot %o, %do : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?xf32>
}

// -----

tile.func @f attributes {kind = "backward_preprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %o = tile.load o : tensor<?x64xbf16>
  %do = tile.load do : tensor<?x64xbf16>
  %d = tile.row_dot %o, %do : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?xf32>
  // expected-error @+1 {{'tile.store' op a backward_preprocess program writes delta, not lse}}
  tile.store lse %d : tensor<?xf32>
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op the k tile takes no tile index}}
  %k = tile.load k[%c] : tensor<?x64xbf16>
  %c = arith.constant 0 : i32
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op lse is read as fp32 rows (tensor<?xf32>), got 'tensor<?x64xf32>'}}
  %lse = tile.load lse[%c] : tensor<?x64xf32>
  %c = arith.constant 0 : i32
}

// -----

// expected-error @+1 {{'tile.func' op has no tile.q_loop}}
tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %k = tile.load k : tensor<?x64xbf16>
  %v = tile.load v : tensor<?x64xbf16>
  %dk = tile.zero_acc : !tile.acc<?x64>
  %dv = tile.zero_acc : !tile.acc<?x64>
  tile.store dk %dk : !tile.acc<?x64>
  tile.store dv %dv : !tile.acc<?x64>
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %k = tile.load k : tensor<?x64xbf16>
  %v = tile.load v : tensor<?x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<?x64>
  %dv0 = tile.zero_acc : !tile.acc<?x64>
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.q_loop' op must accumulate into dq_accum exactly once, found 0}}
  %dk, %dv = tile.q_loop iter_args(%dk0, %dv0) : !tile.acc<?x64>, !tile.acc<?x64> -> !tile.acc<?x64>, !tile.acc<?x64> {
  ^bb0(%i: i32, %dka: !tile.acc<?x64>, %dva: !tile.acc<?x64>):
    %q = tile.load q[%i] : tensor<?x64xbf16>
    %do = tile.load do[%i] : tensor<?x64xbf16>
    %lse = tile.load lse[%i] : tensor<?xf32>
    // expected-error @+1 {{'tile.load' op must name the loop's own Q tile (the loop's first block argument)}}
    %delta = tile.load delta[%c0] : tensor<?xf32>
    tile.yield %dka, %dva : !tile.acc<?x64>, !tile.acc<?x64>
  }
  tile.store dk %dk : !tile.acc<?x64>
  tile.store dv %dv : !tile.acc<?x64>
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 32 : i64, variant = "none", params = []} {
  %dk = tile.zero_acc : !tile.acc<?x64>
  // expected-error @+1 {{'tile.store' op dv must have 32 columns (head dim), got 64}}
  tile.store dv %dk : !tile.acc<?x64>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %p = arith.constant dense<0.0> : tensor<64x32xf32>
  %do = arith.constant dense<0.0> : tensor<64x64xbf16>
  %acc = tile.zero_acc : !tile.acc<64x64>
  // expected-error @+1 {{'tile.dot_tn' op the accumulator must be (A columns) x (B columns)}}
  %r = tile.dot_tn %p, %do, %acc : tensor<64x32xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %p = arith.constant dense<0.0> : tensor<64x32xf32>
  %lse = arith.constant dense<0.0> : tensor<32xf32>
  // expected-error @+1 {{'tile.probs' op LSE must be one value per row (64), got 'tensor<32xf32>'}}
  %r = tile.probs %p, %lse : tensor<64x32xf32>, tensor<32xf32> -> tensor<64x32xf32>
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %ds = arith.constant dense<0.0> : tensor<64x32xf32>
  %k = arith.constant dense<0.0> : tensor<64x64xbf16>
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.accumulate' op A's columns (32) must equal B's rows (64)}}
  tile.accumulate dq_accum[%c0], %ds, %k : tensor<64x32xf32>, tensor<64x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %ds = arith.constant dense<0.0> : tensor<64x32xf32>
  %k = arith.constant dense<0.0> : tensor<32x64xbf16>
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.accumulate' op a forward program writes o, lse, not dq_accum}}
  tile.accumulate dq_accum[%c0], %ds, %k : tensor<64x32xf32>, tensor<32x64xbf16>
}

// -----

tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %ds = arith.constant dense<0.0> : tensor<64x32xf32>
  // expected-error @+1 {{'tile.score_grad' op region #0 ('body') failed to verify constraint: region with 1 blocks}}
  %r = "tile.score_grad"(%ds, %ds) ({}) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
}

// -----

// The index of an input gradient's read may depend on (b, h) only: one read a program instance.
tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "key_bias", params = [], inputs = [#tile.input<"bias" : f32>]} {
  %ds = arith.constant dense<0.0> : tensor<64x32xf32>
  // expected-error @+1 {{'tile.input_grad' op cannot take the gradient of input 'bias' of variant 'key_bias': the score hook reads it at an index that depends on the score, the query or the key}}
  tile.input_grad "bias", %ds, %ds : tensor<64x32xf32>, tensor<64x32xf32> {
  ^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32):
    %one = arith.constant 1.0 : f32
    tile.yield %kv, %one : i32, f32
  }
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "starts", params = [], inputs = [#tile.input<"starts" : i32>]} {
  %ds = arith.constant dense<0.0> : tensor<64x32xf32>
  // expected-error @+1 {{'tile.input_grad' op 'starts' is not an f32 input of @f}}
  tile.input_grad "starts", %ds, %ds : tensor<64x32xf32>, tensor<64x32xf32> {
  ^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32):
    %one = arith.constant 1.0 : f32
    tile.yield %h, %one : i32, f32
  }
}

// -----

tile.func @f attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "sinks", params = [], inputs = [#tile.input<"sinks" : f32>]} {
  %d = arith.constant dense<0.0> : tensor<64xf32>
  // expected-error @+1 {{'tile.sink_grad' op belongs in a backward_preprocess program}}
  tile.sink_grad "sinks", %d, %d : tensor<64xf32>, tensor<64xf32> {
  ^bb0(%b: i32, %h: i32):
    %one = arith.constant 1.0 : f32
    tile.yield %one, %h, %one : f32, i32, f32
  }
}
