//===- TileOpsSm80.h - the sm80 instruction family ------------------------===//
//
// mma.sync, ldmatrix and cp.async: sm_80, and sm_90a/sm_100a, which run them too. Register layout of a warp's
// rows: the schedule's warp layout (#tile.schedule's warpLayout, KernelShape::warpLayout), of which this family
// prints split_q: each warp owns warpRows query rows, in m16 tiles; each lane holds two rows of every m16 tile
// (lane / 4 and lane / 4 + 8), the layout of an mma.sync C fragment. Shared memory holds one Q tile and `stages`
// K and V tiles.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H
#define FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H

#include "codegen/common/TargetRegistry.h"

#include <cstdint>
#include <memory>

namespace flashtile::codegen::sm80 {

/// The sm80 family, for codegen/Registry.cpp.
std::unique_ptr<TargetFamily> createFamily();

/// The sm80 printer of register tiles, with its softmax in two halves for targets that round P later.
class RegisterTiles : public TileTarget {
public:
  /// `tile.softmax_update` leaving P in fp32 in the scores `s` (softmaxUpdate = this + packProbabilities).
  virtual void softmaxUpdateInScores(CudaWriter &w, const StateNames &st, const std::string &s, bool foldScale,
                                     int rescaleThreshold) = 0;
  /// Rounds the scores `s` into `p`, the A fragments of P·V (declaring `p` when `declare`).
  virtual void packProbabilities(CudaWriter &w, const std::string &s, const std::string &p, bool declare) = 0;
  /// `tile.store o` from the registers: two adjacent columns (4 bytes) a store, rows < seqlen_q.
  virtual void storeODirect(CudaWriter &w, const StateNames &st) = 0;
};

/// The sm80 printer of `shape` without the family's checks. The sm90 family prints its register-tile math (scale,
/// score_mod, mask, softmax, rescale, finalize, LSE) with it: a wgmma accumulator holds each warp's 16 rows in the
/// layout of mma.sync's C fragment, so with `shape.warps` = the consumer warps (`shape.warpRows` = 16 rows each) the
/// register tiles are the same arrays.
std::unique_ptr<RegisterTiles> createPrinter(const KernelShape &shape);

/// Bytes of one shared-memory row of `width` 16-bit elements: 16-byte chunks, padded to an odd number of chunks
/// unless a multiple of 8 (the prelude's sm80::rowPitch: bank-conflict-free ldmatrix without a swizzle; head dim
/// 96: 208 bytes).
int64_t rowBytes(int64_t width);

} // namespace flashtile::codegen::sm80

#endif // FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H
