// tile-decode-stage-o: after tile-pipeline-copies, each split's O leaves through Q's dead slot, unless rows pack query
// heads (each row is stored to its own head from the registers).
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv="pack-query-heads=false" --tile-split-boundary --tile-pipeline-copies --tile-decode-stage-o | FileCheck %s
// CHECK: %[[QB:.*]] = tile.buffer q : <tensor<32x64xbf16>, slots = 1>
// CHECK: %[[QS:.*]] = tile.slot %[[QB]] :
// CHECK: tile.store_split %o, %lse through %[[QS]] : tensor<32x64xf32>, tensor<32xf32>, !tile.slot<tensor<32x64xbf16>>

// GQA packing (the pass's default where the rules do not read the head, as causal's): no staging.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv --tile-split-boundary --tile-pipeline-copies --tile-decode-stage-o | FileCheck %s --check-prefix=PACKED
// PACKED: tile.pack_query_heads
// PACKED: tile.store_split %o, %lse : tensor<32x64xf32>, tensor<32xf32>{{$}}

// Before tile-pipeline-copies Q has no slot; without tile-decode-split-kv there is no split to store.
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv --tile-decode-stage-o 2>&1 | FileCheck %s --check-prefix=UNPIPELINED
// UNPIPELINED: error: 'tile.func' op must read Q from its shared-memory slot (run tile-pipeline-copies first)
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-split-boundary --tile-pipeline-copies --tile-decode-stage-o 2>&1 | FileCheck %s --check-prefix=UNSPLIT
// UNSPLIT: error: 'tile.func' op must store one tile.store_split (run tile-decode-split-kv first)
