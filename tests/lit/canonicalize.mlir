// RUN: flashtile-opt %inputs/causal.mlir --canonicalize | FileCheck %s

// The scale only feeds masks on its way to the softmax: it joins log2(e) in the softmax's exp2 multiplier.
// CHECK-NOT: tile.scale
// CHECK: tile.softmax_update %{{.*}}, %{{.*}} {fold_scale}
