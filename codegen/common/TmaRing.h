//===- TmaRing.h - the text of TMA rings behind full/empty mbarriers ------===//
//
// What the families with the asynchronous protocol (sm90: wgmma; sm100: tcgen05) print alike: the shared-memory
// tiles a TMA ring lands in, the tile's TMA coordinates, the waits and releases of ring slots and the copies into
// them. Each family prints the device primitives under the same names in its own namespace (`ns`: "sm90",
// "sm100"): Mbarrier, smemAddress, mbarrier::{wait, arrive, arriveExpectTx}, tma::load5d (their text shared through
// codegen/ptx/AsyncPrelude.h); the text here names them through `ns` and never includes a family. MLIR-free.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_TMARING_H
#define FLASHTILE_CODEGEN_COMMON_TMARING_H

#include "codegen/common/CudaWriter.h"
#include "codegen/common/TileTarget.h"

#include <cstdint>
#include <string>

namespace flashtile::codegen {

/// "Q", "K" or "V".
const char *operandName(Operand operand);
/// What a barrier's slots hold, for comments: the operand, or "the work unit" (tile.work_queue).
std::string ringHolds(const BarrierInfo &barrier);
/// The slot of ring position `position` of a buffer of `slots` slots, as C.
std::string ringSlot(const std::string &position, int slots);

/// The shared memory of a ring kernel: sQ, then kStages K and V tiles (1024-byte aligned TMA boxes), then the
/// barriers (`barriers`). The family prints the comment on the tiles' layout before it. `elementBytes`: 2 (bf16,
/// f16) or 1 (e4m3).
void printRingTiles(CudaWriter &w, const std::string &ns, int stages, int elementBytes = 2);
/// Its bytes: one Q tile and `stages` K and V tiles of the dtype's elements (1 byte for e4m3, else 2), plus `reserve` (alignment, barriers).
int64_t ringSmemBytes(const KernelShape &shape, int64_t reserve);
/// The block's tile (b, h, hKv, m0) and the TMA coordinates of its tiles (qRow0, kRow0, tmaBatch), and warpRow0.
void printRingTileCoordinates(CudaWriter &w);
/// The declarations of `barriers` (one per ring slot, from `barriers`); returns the slots they take.
int printRingBarrierDeclarations(CudaWriter &w, const std::string &ns, const std::vector<BarrierInfo> &barriers);
/// Their initialization, inside the one thread that initializes: a full barrier takes one arrival, an empty one
/// `arrivals` × `consumerWarps` (one per computing warp).
void printRingBarrierInits(CudaWriter &w, const std::string &ns, const std::vector<BarrierInfo> &barriers,
                           int consumerWarps);
/// `tile.barrier_wait` on ring position `position`: a full barrier's phase of its round, an empty barrier's
/// previous round's (a fresh barrier passes the first round).
void printRingWait(CudaWriter &w, const std::string &ns, const BarrierInfo &barrier, const std::string &position);
/// `tile.barrier_arrive`: one arrival per warp once all its lanes are done (`why` says what made the slot free).
void printRingRelease(CudaWriter &w, const std::string &ns, const BarrierInfo &barrier, const std::string &position,
                      const std::string &why);
/// `tile.copy_async ... arrive`: one TMA box of `operand`'s tile `tile` into the slot, its bytes on `barrier`.
void printRingCopy(CudaWriter &w, const std::string &ns, Operand operand, const std::string &tile,
                   const std::string &position, const BarrierInfo &barrier);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_TMARING_H
