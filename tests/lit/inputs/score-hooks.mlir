// Score hooks as the DSL records them, each in a minimal program: inputs of test-differentiate-score.mlir.

// softcap: cap·tanh(s·(1/cap)).
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = ["cap"], variant = "softcap"} {
  %q = tile.load q : tensor<?x64xbf16>
  %s = tile.qk %q, %q : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
  %s1 = tile.score_mod %s : tensor<?x?xf32> {
  ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
    %cap = tile.param "cap"
    %one = arith.constant 1.0 : f32
    %inv = arith.divf %one, %cap : f32
    %x = arith.mulf %score, %inv : f32
    %t = math.tanh %x : f32
    %y = arith.mulf %cap, %t : f32
    tile.yield %y : f32
  }
}

// -----

// ALiBi after canonicalization moved the scale into the hook: s − slopes[h]·(1/scale)·|q − kv|.
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, inputs = [#tile.input<"slopes" : f32>], params = [], variant = "alibi"} {
  %q = tile.load q : tensor<?x64xbf16>
  %s = tile.qk %q, %q : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
  %s1 = tile.score_mod %s : tensor<?x?xf32> {
  ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
    %inv = tile.softmax_scale inverse : f32
    %slope = tile.input "slopes"[%h] : f32
    %d = arith.subi %qi, %kv : i32
    %a = math.absi %d : i32
    %f = arith.sitofp %a : i32 to f32
    %over = arith.mulf %slope, %inv : f32
    %bias = arith.mulf %over, %f : f32
    %y = arith.subf %score, %bias : f32
    tile.yield %y : f32
  }
}

// -----

// A user's hook: select(s > 0, s, exp2(s) − 1) / max(|bias[kv]|, 1), plus a sink read from an input.
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, inputs = [#tile.input<"bias" : f32>, #tile.input<"sinks" : f32>], params = [], variant = "mine"} {
  %q = tile.load q : tensor<?x64xbf16>
  %s = tile.qk %q, %q : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
  %s1 = tile.score_mod %s : tensor<?x?xf32> {
  ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %pos = arith.cmpf ogt, %score, %zero : f32
    %e = math.exp2 %score : f32
    %em1 = arith.subf %e, %one : f32
    %act = arith.select %pos, %score, %em1 : f32
    %bias = tile.input "bias"[%kv] : f32
    %mag = math.absf %bias : f32
    %den = arith.maximumf %mag, %one : f32
    %y = arith.divf %act, %den : f32
    tile.yield %y : f32
  }
  %m, %acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %o, %lse = tile.finalize %m, %acc sink {
  ^bb0(%b: i32, %h: i32):
    %sk = tile.input "sinks"[%h] : f32
    %two = arith.constant 2.0 : f32
    %y = arith.mulf %sk, %two : f32
    tile.yield %y : f32
  } : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
}
