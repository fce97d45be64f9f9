// RUN: flashtile-opt %inputs/score-hooks.mlir --split-input-file --tile-test-differentiate-score | FileCheck %s --check-prefix=SCORE
// RUN: flashtile-opt %inputs/score-hooks.mlir --split-input-file --tile-test-differentiate-score=wrt=param:cap | FileCheck %s --check-prefix=DCAP
// RUN: flashtile-opt %inputs/score-hooks.mlir --split-input-file --tile-test-differentiate-score=wrt=input:slopes | FileCheck %s --check-prefix=SLOPES
// RUN: flashtile-opt %inputs/score-hooks.mlir --split-input-file --tile-test-differentiate-score=wrt=input:bias | FileCheck %s --check-prefix=BIAS
// RUN: flashtile-opt %inputs/score-hooks.mlir --split-input-file --tile-test-differentiate-score=wrt=input:sinks | FileCheck %s --check-prefix=SINKS
// RUN: not flashtile-opt %inputs/score-hooks.mlir --split-input-file --tile-test-differentiate-score=wrt=cap 2>&1 | FileCheck %s --check-prefix=WRT
// RUN: flashtile-opt %s --tile-test-differentiate-score --verify-diagnostics

// Each score hook is replaced by the derivative the backward embeds (passes/Transforms/DifferentiateScore.h).

// softcap, d/ds cap·tanh(s·(1/cap)) = cap·(1 − t²)·(1/cap); the recomputed result itself is dropped.
// SCORE-LABEL: variant = "softcap"
// SCORE: ^bb0(%[[S:.*]]: f32,
// SCORE: %[[PCAP:.*]] = tile.param "cap"
// SCORE: %[[INV:.*]] = arith.divf %{{.*}}, %[[PCAP]] : f32
// SCORE: %[[X:.*]] = arith.mulf %[[S]], %[[INV]] : f32
// SCORE: %[[T:.*]] = math.tanh %[[X]] : f32
// SCORE: %[[T2:.*]] = arith.mulf %[[T]], %[[T]] : f32
// SCORE: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// SCORE: %[[SECH2:.*]] = arith.subf %[[ONE]], %[[T2]] : f32
// SCORE: %[[D:.*]] = arith.mulf %[[PCAP]], %[[SECH2]] : f32
// SCORE: %[[DS:.*]] = arith.mulf %[[D]], %[[INV]] : f32
// SCORE: tile.yield %[[DS]] : f32
// d/dcap = tanh(s/cap) + cap·(1 − t²)·s·d(1/cap)/dcap.
// DCAP-LABEL: variant = "softcap"
// DCAP: %[[T:.*]] = math.tanh
// DCAP: %[[QUOT:.*]] = arith.divf %{{.*}}, %{{.*}} : f32
// DCAP: %[[NEG:.*]] = arith.negf %[[QUOT]] : f32
// DCAP: %[[SUM:.*]] = arith.addf %[[T]], %[[NEG]] : f32
// DCAP: tile.yield %[[SUM]] : f32

// ALiBi (scale moved into the hook): ds'/ds = 1; ds'/dslopes[h] = −|q − kv|·(1/scale).
// SCORE-LABEL: variant = "alibi"
// SCORE: tile.score_mod
// SCORE-NEXT: ^bb0
// SCORE-NEXT: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// SCORE-NEXT: tile.yield %[[ONE]] : f32
// SLOPES-LABEL: variant = "alibi"
// SLOPES: %[[INV:.*]] = tile.softmax_scale inverse : f32
// SLOPES: %[[DIST:.*]] = arith.sitofp %{{.*}} : i32 to f32
// SLOPES: %[[MINUS:.*]] = arith.constant -1.000000e+00 : f32
// SLOPES: %[[NEG:.*]] = arith.mulf %[[DIST]], %[[MINUS]] : f32
// SLOPES: %[[D:.*]] = arith.mulf %[[NEG]], %[[INV]] : f32
// SLOPES: tile.yield %[[D]] : f32

// A user's hook, select(s > 0, s, exp2(s) − 1) / max(|bias[kv]|, 1): the select routes the adjoint by the same
// predicate; exp2 brings ln 2.
// SCORE-LABEL: variant = "mine"
// SCORE: %[[POS:.*]] = arith.cmpf ogt
// SCORE: %[[E:.*]] = math.exp2
// SCORE: %[[RECIP:.*]] = arith.divf %{{.*}}, %{{.*}} : f32
// SCORE: %[[ONTRUE:.*]] = arith.select %[[POS]], %[[RECIP]], %{{.*}} : f32
// SCORE: %[[ONFALSE:.*]] = arith.select %[[POS]], %{{.*}}, %[[RECIP]] : f32
// SCORE: %[[LN2:.*]] = arith.constant 0.693147182 : f32
// SCORE: %[[A:.*]] = arith.mulf %[[ONFALSE]], %[[E]] : f32
// SCORE: %[[B:.*]] = arith.mulf %[[A]], %[[LN2]] : f32
// SCORE: %[[SUM:.*]] = arith.addf %[[ONTRUE]], %[[B]] : f32
// SCORE: tile.yield %[[SUM]] : f32
// The score hook leaves the sink alone.
// SCORE: tile.finalize
// SCORE: tile.input "sinks"
// d/dbias[kv]: through the division, max (the first operand wins when it is larger) and abs (the sign).
// BIAS-LABEL: variant = "mine"
// BIAS: %[[BIAS:.*]] = tile.input "bias"
// BIAS: %[[MAG:.*]] = math.absf %[[BIAS]] : f32
// BIAS: %[[DEN:.*]] = arith.maximumf %[[MAG]], %{{.*}} : f32
// BIAS: %[[Q:.*]] = arith.divf %{{.*}}, %[[DEN]] : f32
// BIAS: %[[Q2:.*]] = arith.divf %[[Q]], %[[DEN]] : f32
// BIAS: %[[NEG:.*]] = arith.negf %[[Q2]] : f32
// BIAS: %[[WINS:.*]] = arith.cmpf oge, %[[MAG]], %{{.*}} : f32
// BIAS: %[[ROUTED:.*]] = arith.select %[[WINS]], %[[NEG]], %{{.*}} : f32
// BIAS: %[[SIGN:.*]] = arith.cmpf oge, %[[BIAS]], %{{.*}} : f32
// BIAS: %[[FLIP:.*]] = arith.negf %[[ROUTED]] : f32
// BIAS: %[[D:.*]] = arith.select %[[SIGN]], %[[ROUTED]], %[[FLIP]] : f32
// BIAS: tile.yield %[[D]] : f32
// The sink 2·sinks[h]: d/dsinks[h] = 2; the score hook does not read sinks.
// SINKS-LABEL: variant = "mine"
// SINKS: tile.score_mod
// SINKS: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// SINKS-NEXT: tile.yield %[[ZERO]] : f32
// SINKS: tile.finalize
// SINKS: %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// SINKS-NEXT: tile.yield %[[TWO]] : f32

// WRT: error: 'tile.func' op cannot differentiate with respect to 'cap': expected score, input:NAME or param:NAME

// An op without a derivative rule is named.
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], variant = "wavy"} {
  %q = tile.load q : tensor<?x64xbf16>
  %s = tile.qk %q, %q : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
  %s1 = tile.score_mod %s : tensor<?x?xf32> {
  ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
    // expected-error @+1 {{cannot differentiate 'math.sin' in variant 'wavy''s score hook}}
    %y = math.sin %score : f32
    tile.yield %y : f32
  }
}
