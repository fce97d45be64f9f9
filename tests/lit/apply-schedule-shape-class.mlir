// The "short" shape class (sequences of at most 1024 query and key rows on average). At head dim 128 a causal program's
// short kernel runs 64-row blocks of 4 warps with one K/V buffer; the class is recorded (and names the kernel).
// RUN: sed -e 's/= 64 :/= 128 :/g' -e 's/x64/x128/g' %inputs/causal.mlir | flashtile-opt --tile-apply-schedule="shape-class=short" | FileCheck %s --check-prefix=SHORT128
// SHORT128: schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1, lptGroupBlocks = 512, shapeClass = short>
// SHORT128: tile.load q : tensor<64x128xbf16>

// Knobs override the class's defaults too; the class stays while its configuration differs from the default's.
// RUN: sed -e 's/= 64 :/= 128 :/g' -e 's/x64/x128/g' %inputs/causal.mlir | flashtile-opt --tile-apply-schedule="shape-class=short options=block-m=128" | FileCheck %s --check-prefix=KNOB
// KNOB: schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 1, lptGroupBlocks = 512, shapeClass = short>

// At head dim 64 the short class runs 64-row blocks of 2 warps (two m16 tiles each, as the default's).
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="shape-class=short" | FileCheck %s --check-prefix=SHORT64
// SHORT64: schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 2, warpLayout = split_q, warpRows = 32, stages = 1, lptGroupBlocks = 512, shapeClass = short>

// A short class whose knobs make its configuration the default class's is the default class (no kernel of its
// own), and so is one at head dim 96, where the short defaults are the default's.
// RUN: sed -e 's/= 64 :/= 128 :/g' -e 's/x64/x128/g' %inputs/causal.mlir | flashtile-opt --tile-apply-schedule="shape-class=short options=block-m=64,warps=4,stages=1" | FileCheck %s --check-prefix=SAME
// RUN: sed -e 's/= 64 :/= 96 :/g' -e 's/x64/x96/g' %inputs/causal.mlir | flashtile-opt --tile-apply-schedule="shape-class=short" | FileCheck %s --check-prefix=SAME
// SAME: schedule = #tile.schedule<name = "fa2", blockM = {{[0-9]+}}, blockN = 64, warps = 4, warpLayout = split_q, warpRows = {{[0-9]+}}, stages = 1, lptGroupBlocks = 512>
// SAME-NOT: shapeClass

// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="shape-class=long" 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: 'tile.func' op unknown shape class 'long'; accepted: default, short
