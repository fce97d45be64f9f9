//===- KvRing.h - Q's slot and the K/V rings of a warp-specialized program --===//
//
// The shared-memory side that role pipelines (fa3's, fa4's) share: Q's one-slot buffer and the K and V rings of
// `stages` slots, each with a full barrier (a tile's bytes landed) and the K/V rings with an empty one (one consumer
// arrival frees a slot), and the producer's copy of K/V tile j into ring position i; and what such a pipeline starts
// from (splitProgram), and its roles' empty shells (makeRole). Header-only.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_KVRING_H
#define FLASHTILE_PASSES_TRANSFORMS_KVRING_H

#include "passes/IR/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

#include <tuple>

namespace flashtile::tile {

/// A program after tile-apply-schedule and tile-split-boundary, before a role pipeline: its schedule, its one Q load
/// and its K/V loop segments (bounded, descending, carrying only the state), in walk order.
struct SplitProgram {
  ScheduleAttr schedule;
  LoadOp loadQ;
  llvm::SmallVector<KvLoopOp> loops;
};

/// `func` as a SplitProgram, or a diagnostic saying which pass it still needs (`pass` names the caller).
inline mlir::FailureOr<SplitProgram> splitProgram(FuncOp func, llvm::StringRef pass) {
  SplitProgram p{func.getScheduleAttr(), LoadOp(), {}};
  if (!p.schedule)
    return func.emitOpError() << "must be scheduled before " << pass << " (run tile-apply-schedule)";
  if (!func.getBody().getOps<BufferOp>().empty() || !func.getBody().getOps<RoleOp>().empty())
    return func.emitOpError() << "is already pipelined";
  p.loops = llvm::to_vector(func.getBody().getOps<KvLoopOp>());
  auto qLoads = llvm::to_vector(func.getBody().getOps<LoadOp>());
  if (p.loops.empty() || qLoads.size() != 1 || qLoads.front().getOperand() != Operand::Q)
    return func.emitOpError() << "needs one Q load and at least one K/V loop at top level";
  p.loadQ = qLoads.front();
  for (KvLoopOp loop : p.loops)
    if (!loop.isBounded() || loop.getOrder() != KvOrder::Descending || !loop.getCarried().empty())
      return loop.emitOpError() << "must be a bounded, descending segment carrying only the state (run "
                                   "tile-split-boundary first)";
  return p;
}

struct KvRing {
  mlir::Value qBuffer, kBuffer, vBuffer, qFull, kFull, kEmpty, vFull, vEmpty;
};

/// The full barrier of `buffer`'s slots: a phase completes when one tile's bytes landed.
inline mlir::Value fullBarrier(mlir::OpBuilder &b, mlir::Location loc, mlir::Value buffer) {
  mlir::RankedTensorType tile = mlir::cast<BufferType>(buffer.getType()).getTile();
  int64_t bytes = tile.getNumElements() * (tile.getElementTypeBitWidth() / 8);
  return BarrierOp::create(b, loc, buffer, b.getI64IntegerAttr(bytes), mlir::IntegerAttr()).getResult();
}

/// The empty barrier of `buffer`'s slots: the consumer role releases each slot once.
inline mlir::Value emptyBarrier(mlir::OpBuilder &b, mlir::Location loc, mlir::Value buffer) {
  return BarrierOp::create(b, loc, buffer, mlir::IntegerAttr(), b.getI64IntegerAttr(1)).getResult();
}

/// Buffers first (Q, K, V), then their barriers (Q full, K full and empty, V full and empty), at `b`.
inline KvRing createKvRing(mlir::OpBuilder &b, mlir::Location loc, mlir::RankedTensorType q, mlir::RankedTensorType k,
                           mlir::RankedTensorType v, int64_t stages) {
  auto bufferOf = [&](Operand operand, mlir::RankedTensorType tile, int64_t slots) {
    return BufferOp::create(b, loc, BufferType::get(b.getContext(), tile, slots), operand).getResult();
  };
  KvRing r;
  r.qBuffer = bufferOf(Operand::Q, q, 1);
  r.kBuffer = bufferOf(Operand::K, k, stages);
  r.vBuffer = bufferOf(Operand::V, v, stages);
  r.qFull = fullBarrier(b, loc, r.qBuffer);
  r.kFull = fullBarrier(b, loc, r.kBuffer);
  r.kEmpty = emptyBarrier(b, loc, r.kBuffer);
  r.vFull = fullBarrier(b, loc, r.vBuffer);
  r.vEmpty = emptyBarrier(b, loc, r.vBuffer);
  return r;
}

/// The producer's copies of K and V tile `j` into ring position `position`, each after its slot's empty barrier.
inline void copyKvTile(mlir::OpBuilder &b, mlir::Location loc, const KvRing &ring, mlir::Value j,
                       mlir::Value position) {
  for (auto [operand, buffer, full, empty] : {std::tuple{Operand::K, ring.kBuffer, ring.kFull, ring.kEmpty},
                                              {Operand::V, ring.vBuffer, ring.vFull, ring.vEmpty}}) {
    mlir::Value slot = SlotOp::create(b, loc, buffer, position).getResult();
    BarrierWaitOp::create(b, loc, empty, position);
    CopyAsyncOp::create(b, loc, operand, j, slot, full, position, mlir::Value());
  }
}

/// A role with an empty body (a yield), at `b`.
inline RoleOp makeRole(mlir::OpBuilder &b, mlir::Location loc, llvm::StringRef name, int64_t warps, int64_t regs) {
  auto role = RoleOp::create(b, loc, name, static_cast<uint64_t>(warps), static_cast<uint64_t>(regs));
  mlir::Block *body = new mlir::Block();
  role.getBody().push_back(body);
  mlir::OpBuilder rb(body, body->end());
  YieldOp::create(rb, loc);
  return role;
}

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_KVRING_H
