// The warp layout is a decision of the schedule, stated in #tile.schedule (warpLayout, warpRows) and read by the
// printers, which reject a layout they do not print, naming the ones they do.

// Each schedule states its layout: split_q, blockM / warps rows a warp (fa3: over its consumer warps only).
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule | FileCheck %s --check-prefix=FA2
// FA2: #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32,
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" | FileCheck %s --check-prefix=DECODE
// DECODE: #tile.schedule<name = "decode", blockM = 32, blockN = 64, warps = 2, warpLayout = split_q, warpRows = 16,
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa1" | FileCheck %s --check-prefix=FA1
// FA1: #tile.schedule<name = "fa1", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16,
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=block-m=192" | FileCheck %s --check-prefix=FA3
// FA3: #tile.schedule<name = "fa3", blockM = 192, blockN = {{[0-9]+}}, warps = 16, warpLayout = split_q, warpRows = 16,

// A layout the target does not print (split_keys, reserved for decode) is refused in tile-lower-to-target and by the
// CUDA printer, on both families.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies \
// RUN:   | sed 's/warpLayout = split_q, warpRows = 32/warpLayout = split_keys, warpRows = 128/' \
// RUN:   | not flashtile-opt --tile-lower-to-target=arch=sm_80 2>&1 | FileCheck %s --check-prefix=LOWER80
// LOWER80: error: 'tile.func' op sm80: warp layout split_keys is not printed; accepted: split_q
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_80 \
// RUN:   | sed 's/warpLayout = split_q, warpRows = 32/warpLayout = split_keys, warpRows = 128/' \
// RUN:   | not flashtile-opt --tile-emit-cuda -o /dev/null 2>&1 | FileCheck %s --check-prefix=PRINT80
// PRINT80: error: 'tile.func' op sm80: warp layout split_keys is not printed; accepted: split_q
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=block-m=128" --tile-split-boundary --tile-role-pipeline --tile-lower-to-target=arch=sm_90a \
// RUN:   | sed 's/warpLayout = split_q, warpRows = 16/warpLayout = split_keys, warpRows = 128/' \
// RUN:   | not flashtile-opt --tile-emit-cuda -o /dev/null 2>&1 | FileCheck %s --check-prefix=PRINT90
// PRINT90: error: 'tile.func' op sm90: warp layout split_keys is not printed; accepted: split_q

// split_q rows the target's MMAs cannot hold: sm80 wants every warp to own a multiple of its m16 tiles, sm90 a
// quarter of an m64 wgmma (16 rows) a consumer warp.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies \
// RUN:   | sed 's/warps = 4, warpLayout = split_q, warpRows = 32/warps = 16, warpLayout = split_q, warpRows = 8/' \
// RUN:   | not flashtile-opt --tile-lower-to-target=arch=sm_80 2>&1 | FileCheck %s --check-prefix=ROWS80
// ROWS80: error: 'tile.func' op sm80: block-m (128) must give every one of the 16 warps a multiple of 16 rows
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies \
// RUN:   | sed 's/warps = 4, warpLayout = split_q, warpRows = 32/warps = 8, warpLayout = split_q, warpRows = 32/' \
// RUN:   | not flashtile-opt --tile-lower-to-target=arch=sm_80 2>&1 | FileCheck %s --check-prefix=IDLE80
// IDLE80: error: 'tile.func' op sm80: split_q needs every one of the 8 warps to own warpRows (32) rows of block-m (128)
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa3 options=block-m=128" --tile-split-boundary --tile-role-pipeline \
// RUN:   | sed 's/warps = 12, warpLayout = split_q, warpRows = 16/warps = 12, warpLayout = split_q, warpRows = 32/' \
// RUN:   | not flashtile-opt --tile-lower-to-target=arch=sm_90a 2>&1 | FileCheck %s --check-prefix=ROWS90
// ROWS90: error: 'tile.func' op sm90: split_q warpRows (32) must be 16: a consumer warp holds its quarter of an m64 wgmma's rows
