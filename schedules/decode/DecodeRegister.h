//===- DecodeRegister.h - registers the decode schedule -------------------===//
#ifndef FLASHTILE_SCHEDULES_DECODE_DECODEREGISTER_H
#define FLASHTILE_SCHEDULES_DECODE_DECODEREGISTER_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace flashtile::decode {
/// Adds the decode schedule to the schedule registry and its passes (tile-decode-split-kv, tile-decode-stage-o) to
/// MLIR's pass registry (schedules/Registry.cpp calls it once).
void registerSchedule();
/// tile-decode-split-kv (DecodeSplitKvPass.cpp); `packQueryHeads`: GQA packing where the program allows it;
/// `kvCache`: the kernel can read a KV cache (tile.kv_cache).
std::unique_ptr<mlir::Pass> createSplitKvPass(bool packQueryHeads = true, bool kvCache = true);
/// tile-decode-stage-o (DecodeStageOPass.cpp): each split's O leaves through Q's dead slot, after tile-pipeline-copies.
std::unique_ptr<mlir::Pass> createStageOPass();
} // namespace flashtile::decode

#endif // FLASHTILE_SCHEDULES_DECODE_DECODEREGISTER_H
