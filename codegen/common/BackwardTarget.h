//===- BackwardTarget.h - what a family prints for the backward's GEMMs ---===//
//
// The backward printer (BackwardEmitter.cpp) walks the three scheduled backward programs and prints their loops,
// the variant's math (FragmentTiles), the deterministic mode's turns and the input gradients; it asks a
// BackwardTarget for every instruction-level piece: the shared-memory layout of the 16-bit tiles, the copies into
// it, the five GEMMs (S = Q·Kᵀ, dP = dO·Vᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K), the staging of P and dS and the
// fp32 reductions into global memory. A family that prints backward programs returns one from
// TargetFamily::createBackwardPrinter (TargetRegistry.h); codegen/sm80 (mma.sync, ldmatrix, cp.async,
// red.global.add) and codegen/sm90 (wgmma from shared-memory descriptors) do. MLIR-free, as TileTarget.h.
//
// Register tiles are the split-Q C fragments of the forward (FragmentTiles.h): a score tile is
// `float s[kMTiles][kSTiles][4]`, warp w holding query rows [w·kWarpRows, ...) of the Q tile; an accumulator of dK or
// dV is `float acc[kKvMTiles][width / 8 / kKvColSplit][4]`, warp w holding key rows [kvRowGroup·kKvWarpRows, ...) of
// the K/V tile and column part kvColPart; transposed (KernelShape::swapKv) it is `float acc[width / kKvColRows]
// [kKvKeyTiles][4]`, warp w holding columns [16·kvRowGroup, ...) of each m-tile of kKvColRows columns and keys
// [kvColPart·kBlockN / kKeyWarps, ...). The printer declares those constants, `warp`, `lane`, `fragRow`,
// `fragCol`, `qt` (the Q tile) and `warpRow0` before a family's code runs.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_BACKWARDTARGET_H
#define FLASHTILE_CODEGEN_COMMON_BACKWARDTARGET_H

#include "codegen/common/CudaWriter.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::codegen {

/// A 16-bit tile in shared memory: its buffer (a C expression of an `unsigned char *`), its rows (a C constant) and
/// its width in elements.
struct SharedTile {
  std::string name;
  const char *rows;
  int64_t width;
};

class BackwardTarget {
public:
  virtual ~BackwardTarget() = default;

  /// The device primitives of a backward module: the family's, the backward's generic ones (BackwardPrelude.h) and
  /// the family's copies and reductions.
  virtual std::string prelude() const = 0;
  /// The namespace the fragment primitives (FragmentPrelude.h) and the backward's generic ones are printed in.
  virtual std::string_view primitivesNamespace() const = 0;
  /// Identifiers the family's code declares in kernel scope.
  virtual std::vector<std::string> reservedNames() const = 0;
  /// Whether the family prints KernelShape::keyWarps > 1 (tile.key_warps): S, dP and dQ split by rows and by keys
  /// (dQ: by columns), warp w in row group warpM of kWarpRows rows and holding kSTiles n8 tiles of keys from
  /// warpCol0, both declared by the printer.
  virtual bool splitsKeys() const { return false; }
  /// The statement declaring `warpM` (the warp's row group) and `warpCol0` (its first key of S and dP) when the keys
  /// are split (KernelShape::keyWarps > 1), from `warp`, kKeyWarps and kBlockN: by default a row group's kKeyWarps
  /// warps are consecutive.
  virtual std::string keySplitLayout() const {
    return "const int warpM = warp / kKeyWarps, warpCol0 = warp % kKeyWarps * (kBlockN / kKeyWarps);  // S: rows, keys";
  }
  /// The statement declaring `kvRowGroup` (the warp's row group of the K/V tile's keys in dK and dV) and `kvColPart`
  /// (its column part), from `warp` and kKvColSplit: by default a row group's kKvColSplit warps are consecutive.
  virtual std::string kvSplitLayout() const {
    return "const int kvRowGroup = warp / kKvColSplit, kvColPart = warp % kKvColSplit;  // dK, dV: rows, column part";
  }
  /// Why the family cannot print the main program of this shape (its GEMMs, registers, shared memory), or empty.
  virtual std::string checkMainShape() const { return {}; }

  // ---- shared memory ----
  /// Bytes of a tile of `rows` × `width` 16-bit elements in the family's layout, and the same as a C expression of
  /// the C constants `rows` and `width`.
  virtual int64_t tileBytes(int64_t rows, int64_t width) const = 0;
  virtual std::string tileBytesExpr(const std::string &rows, const std::string &width) const = 0;
  /// The layout's name in the kernel's comments ("sm80::rowPitch").
  virtual std::string tileLayoutWords() const = 0;
  /// Declares `unsigned char *smem` (or an array of that name): the dynamic shared memory, aligned as the family's
  /// tiles need; sharedMemoryReserve() bytes more than the tiles are asked for that.
  virtual void declareSharedMemory(CudaWriter &w) const = 0;
  virtual int sharedMemoryReserve() const { return 0; }

  // ---- copies into shared memory (asynchronous: they land at waitCopies) ----
  /// The instruction the comments name for them ("cp.async").
  virtual std::string copyWords() const = 0;
  /// A statement copying the 16-byte chunk `col` (8 elements) of row `row` of `tile` from `src` (a global address),
  /// zero-filled unless `valid` (the printer's loops give every thread of the block its chunks of a tile).
  virtual std::string copyChunk(const SharedTile &tile, const std::string &row, const std::string &col,
                                const std::string &src, const std::string &valid) const = 0;
  /// Whether a Q tile's LSE and D rows go through shared memory, copied one tile ahead with its Q and dO (copyFloat);
  /// else each thread reads its rows from global memory where the program loads them (no shared memory for them).
  virtual bool stagesRows() const { return true; }
  /// One fp32 element: *`dst` (shared) = *`src` (global), 0 unless `valid` (only when stagesRows()).
  virtual void copyFloat(CudaWriter &, const std::string & /*dst*/, const std::string & /*src*/,
                         const std::string & /*valid*/) {}
  /// Closes the copies issued so far into a group; waits until every group of this thread landed (the printer puts
  /// a block-wide barrier after it).
  virtual void commitCopies(CudaWriter &w) = 0;
  virtual void waitCopies(CudaWriter &w) = 0;

  // ---- GEMMs ----
  /// `acc` (declared here, a score tile) = A·Bᵀ of the Q-tile-row tile `a` (Q or dO) and the K/V tile `b` (K or V).
  virtual void scoreGemm(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) = 0;
  /// The score tile `from` rounded to 16 bits into the staging buffer `buffer` (this warp's rows), for dotTn and
  /// dq; stagedBarrier after the last one (every warp's rows in place before any GEMM reads them).
  virtual void stage(CudaWriter &w, const std::string &buffer, const std::string &from) = 0;
  virtual void stagedBarrier(CudaWriter &w) = 0;
  /// Whether dq reads A from registers (the score tile) rather than from its staging buffer (then only dotTn's
  /// operands are staged).
  virtual bool dqReadsRegisters() const { return false; }
  /// Whether the family prints dK and dV transposed (KernelShape::swapKv): dotTn accumulates accᵀ += Bᵀ·A, the
  /// accumulator's rows the head dim's columns and its columns the keys of the warp's key group (kvSplitLayout).
  virtual bool swapsKv() const { return false; }
  /// Whether dotTn reads A from registers (the score tile, transposed: KernelShape::swapScores) rather than from its
  /// staging buffer.
  virtual bool dotReadsRegisters() const { return false; }
  /// `acc` (a dK or dV accumulator, `warpCols` columns a warp) += Aᵀ·B, A staged in `a` (or, when
  /// dotReadsRegisters(), the score tile `a` in registers, which holds Aᵀ), B the Q-tile-row tile `b` (dO or Q).
  virtual void dotTn(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
                     int64_t warpCols) = 0;
  /// A tile.dot_tn marked tile.issue_early (dV's, under tile.early_dv): its operand is staged alone, before dS exists,
  /// behind earlyStagedBarrier, and dotTnEarly issues its GEMM where it stands. By default the staging barrier and
  /// dotTn.
  virtual void earlyStagedBarrier(CudaWriter &w) { stagedBarrier(w); }
  virtual void dotTnEarly(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
                          int64_t warpCols) {
    dotTn(w, acc, a, b, warpCols);
  }
  /// dQ += A·K into the fp32 accumulator gDqAccum (rows of the Q tile qt, `k.width` columns a row): dqOperand
  /// prepares A (`staged`: its staging buffer, `regs`: its score tile; a family whose GEMMs run asynchronously may
  /// issue the product there), then the printer may wait for the deterministic mode's turn, then dqProduct
  /// multiplies and adds (reduceAdd2) rows below p.seqlenQ.
  virtual void dqOperand(CudaWriter &w, const std::string &staged, const std::string &regs) = 0;
  virtual void dqProduct(CudaWriter &w, const SharedTile &k) = 0;
  /// A statement adding `x` and `y` into the fp32 pair at `dst` (8-byte aligned) in global memory.
  virtual std::string reduceAdd2(const std::string &dst, const std::string &x, const std::string &y) const = 0;
  /// The column at which the fp32 dQ accumulator holds column `col` (even) of row `row`, as the main kernel wrote it:
  /// `col` itself unless the family permutes a row's 16-byte chunks (KernelShape::dqSwizzle).
  virtual std::string dqAccumColumn(const std::string & /*row*/, const std::string &col) const { return col; }
  /// Where a whole Q tile of the fp32 dQ accumulator holds (row, col) of the tile, as a float offset from the tile's
  /// first, when the family keeps whole tiles in its fragments' order (KernelShape::dqFragments); empty: in rows.
  virtual std::string dqFragmentIndex(const std::string & /*row*/, const std::string & /*col*/) const { return {}; }

  /// KernelShape::stagedKv: dK and dV stored through shared memory, a bulk copy a row. The statement that copies
  /// `bytes` (a multiple of 16) from shared `src` to global `dst` (both 16-byte aligned) asynchronously, after
  /// bulkStoreFence (and __syncwarp) orders the warp's shared-memory writes before it; bulkStoreCommit closes the
  /// thread's copies, bulkStoreDrain returns once their shared-memory reads are done (before the block exits). Only
  /// where storesInBulk().
  virtual bool storesInBulk() const { return false; }
  virtual std::string bulkStoreRow(const std::string & /*dst*/, const std::string & /*src*/,
                                   const std::string & /*bytes*/) const {
    return {};
  }
  virtual std::string bulkStoreFence() const { return {}; }
  virtual std::string bulkStoreCommit() const { return {}; }
  virtual std::string bulkStoreDrain() const { return {}; }

  // ---- roles of the main kernel (a family that hands work to warps that do not compute) ----
  /// Threads the main kernel has beyond its computing warps (kThreads): a role's warpgroup after them.
  virtual int roleThreads() const { return 0; }
  /// The statement that synchronizes the computing warps of the main kernel (all of its threads when it has no
  /// roles).
  virtual std::string computeBarrier() const { return "__syncthreads();"; }
  /// Shared-memory bytes the family's roles need after the printer's tiles, and their declarations at `at` (a C
  /// expression of an `unsigned char *`, aligned to 1024 bytes).
  virtual int64_t roleSharedBytes() const { return 0; }
  virtual void declareRoleShared(CudaWriter &, const std::string & /*at*/) const {}
  /// Printed after the main kernel's declarations, before its program: the roles' set-up, and the code of the warps
  /// that do not compute, which leave the kernel at endRoles. `dqCounter` is the deterministic mode's turn counter of
  /// Q tile `tile` (a C expression of `tile`), `dqTurn` this block's turn on it. Between the two, when loadsInRole(),
  /// the printer prints the load role: beginLoadRole, then the program's load slice (the scalars its Q-tile walk's
  /// bounds need, loadOwnTile at tile.load k and v, loadQTile in each Q-tile loop), then endLoadRole.
  virtual void beginRoles(CudaWriter &, const std::string & /*dqCounter*/, const std::string & /*dqTurn*/) {}
  virtual void endRoles(CudaWriter &) {}
  /// Printed once the Q-tile walk is over, before dK and dV are stored: the roles are told.
  virtual void endWalk(CudaWriter &) {}
  /// Whether a role loads K, V and each Q tile's Q, dO, LSE and D (all four, in a ring of two Q-tile buffers): then
  /// the computing warps copy nothing; they wait for K and V (waitOwnTiles) and take each Q tile from the ring
  /// (acquireQTile, declaring sQ, sDO, sLse and sDelta, then releaseQTile once its GEMMs landed).
  virtual bool loadsInRole() const { return false; }
  /// Whether the rows of LSE that the load role stages hold LSE·log2(e), +inf for a row without keys (the exp2 operand
  /// of tile.probs as it is), rather than LSE; only with loadsInRole().
  virtual bool stagesLseLog2() const { return false; }
  /// Whether dO has one buffer (sDO0) while Q has the ring's two (KernelShape::singleDo, with loadsInRole()).
  virtual bool singleDoBuffer() const { return false; }
  /// The main kernel's parameters after `params` (", const __grid_constant__ ..."), or empty.
  virtual std::string mainExtraParams() const { return {}; }
  /// The swizzle span in bytes of the TMA boxes the load role reads (the plan's tensor maps), when loadsInRole().
  virtual int tensorMapSwizzleBytes() const { return 0; }
  virtual void beginLoadRole(CudaWriter &) {}
  virtual void endLoadRole(CudaWriter &) {}
  /// The load role's copy of the block's K (`k`) or V tile into `tile`.
  virtual void loadOwnTile(CudaWriter &, const SharedTile & /*tile*/, bool /*k*/) {}
  /// The load role's copies of Q tile `qt` (a C expression) into the ring's next buffer.
  virtual void loadQTile(CudaWriter &, const std::string & /*qt*/) {}
  virtual void waitOwnTiles(CudaWriter &) {}
  virtual void acquireQTile(CudaWriter &) {}
  virtual void releaseQTile(CudaWriter &) {}
  /// Whether dQ's adds leave the computing warps (dqProduct hands them to a role that takes the deterministic mode's
  /// turns itself): then the printer prints no turns around dqProduct.
  virtual bool dqTurnsInRole() const { return false; }

  // ---- GEMMs in flight (a family whose GEMMs run behind the threads that issue them) ----
  /// Whether the iteration's two score GEMMs are issued together: at the first tile.qk (S = Q·Kᵀ) the printer calls
  /// scoreGemms with the second's operands too (dP = dO·Vᵀ: a later tile.qk of the iteration whose tiles are loaded
  /// at its top), and where the second tile.qk stands, scoreWait.
  virtual bool issuesScoresTogether() const { return false; }
  virtual void scoreGemms(CudaWriter &w, const std::string &first, const SharedTile &a, const SharedTile &b,
                          const std::string &second, const SharedTile &a2, const SharedTile &b2) {
    scoreGemm(w, first, a, b);
    scoreGemm(w, second, a2, b2);
  }
  virtual void scoreWait(CudaWriter &, const std::string & /*acc*/) {}
  /// The end of a Q-tile iteration, before the next one's barrier hands its buffers on: waits for the GEMMs dotTn
  /// and dqProduct left in flight.
  virtual void endIteration(CudaWriter &) {}
};

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_BACKWARDTARGET_H
