//===- FragmentTiles.h - register-tile math in the C-fragment layout ------===//
//
// The math every family prints on register tiles whose warps hold rows in the C-fragment layout of an m16n8 MMA
// (mma.sync's; a wgmma accumulator has it per warp): scale, score_mod, mask, the online softmax, rescaling,
// finalize and the stores of O from the registers and of LSE. The families print the orchestration (copies, MMAs,
// roles) and hand these ops here, parameterized by the layout. Register tiles of one warp (the names are the CUDA
// printer's, after the IR's values, passed with each op):
//   score[kMTiles][kSTiles][4]      S in the C layout, updated in place by scale, score_mod, mask
//   prob[kMTiles][kBlockN/16][4]    P packed to 16-bit pairs: the C layout of n8 tiles 2k, 2k+1 is the A layout
//                                   of k16 step k, so P·V needs no data exchange between lanes
//   acc[kMTiles][kOTiles][4], rowMax[kMTiles][2], rowSum[kMTiles][2]   the online-softmax state (StateNames)
// Every index into these arrays is a constant once the `#pragma unroll` loops are unrolled: nothing spills to
// local memory for indexing.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_FRAGMENTTILES_H
#define FLASHTILE_CODEGEN_COMMON_FRAGMENTTILES_H

#include "codegen/common/Concat.h"
#include "codegen/common/TileTarget.h"

#include <functional>
#include <string>
#include <vector>

namespace flashtile::codegen {

/// The layout of a family's register tiles, as the printed code names it. The family declares, before any of these
/// ops: kMTiles (a warp's m16 tiles), kSTiles and kOTiles (n8 tiles of a score and an output row), warp, lane,
/// fragRow and fragCol (lane l holds rows fragRow and fragRow + 8 of each m16 tile, columns fragCol and fragCol + 1
/// of each n8 tile), warpRow0 (the warp's first block row), b and h; with packed query heads, rowQuery, rowHead and
/// packedRows instead of h (and the rows' own heads).
struct FragmentLayout {
  /// The namespace the kernel's fragment primitives (FragmentPrelude.h) are printed in.
  std::string primitives;
  /// P's and O's 16-bit type: "bf16" or "f16".
  std::string dtype;
  /// Rows are the query rows of a K/V head's query heads (GQA packing, KernelShape::packQueryHeads).
  bool packQueryHeads = false;
  /// A C expression added to a score's key (the backward's warps that split a tile's keys: the warp's first key in
  /// the tile, `warpCol0`); empty: a warp's score columns are the tile's from key 0.
  std::string keyOffset = {};
  /// Score tiles transposed (the backward's swapped score GEMMs, KernelShape::swapScores): the m16 rows of a warp's
  /// tiles are keys (from the K/V tile's key kTile·kBlockN + keyOffset) and the n8 columns are query rows (from
  /// queryOffset, the Q tile's first row), so a per-row value is indexed by the column: [kSTiles][2]. Only the
  /// elementwise ops (scale, score_mod, mask) and the coordinate helpers below serve this layout.
  bool transposed = false;
  std::string queryOffset = {};
};

/// Prints the register-tile ops of `layout`'s tiles (TileTarget's, named alike).
class FragmentTiles {
public:
  explicit FragmentTiles(FragmentLayout layout);

  /// Identifiers the printed code declares or reads in kernel scope.
  std::vector<std::string> reservedNames() const;

  void initState(CudaWriter &w, const StateNames &st) const;
  void carryScores(CudaWriter &w, const std::string &to, const std::string &from) const;
  void scale(CudaWriter &w, const std::string &s) const;
  void scoreMod(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn, KeyArg key) const;
  void mask(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn, KeyArg key,
            bool readsInputs) const;
  /// `tile.softmax_update` leaving P in fp32 in the scores `s` (packProbabilities rounds it).
  /// `softExp2` (a device function void(float &, float &): both values' exp2 in place) computes the exponentials of
  /// the n8 tiles nt with nt % 8 < `softShare` (KernelShape::exp2PolyShare), a pair at a time; the primitives' exp2
  /// the others.
  /// `maxChains` (KernelShape::maxChains, 1, 2 or 4): the row maxima in that many chains of n8 tiles, combined at the
  /// end (the same values: fmaxf is exact). `laneVote` (KernelShape::laneVote, with `rescaleThreshold` > 0): the
  /// conditional rescale's vote from each lane's own max, the quad maxima only where a warp's maxes moved.
  void softmaxUpdate(CudaWriter &w, const StateNames &st, const std::string &s, bool foldScale, int rescaleThreshold,
                     const std::string &softExp2 = {}, int softShare = 0, int maxChains = 1,
                     bool laneVote = false) const;
  /// Rounds the scores `s` into `p`, the A fragments of P·V (declaring `p` when `declare`).
  void packProbabilities(CudaWriter &w, const std::string &s, const std::string &p, bool declare) const;
  void rescale(CudaWriter &w, const StateNames &st, bool onlyWhenMoved) const;
  /// FP8 (e4m3 V): O *= v_descale of the tile's (batch, K/V head), after finalize (`vDescale`, set up by the family).
  void scaleByVDescale(CudaWriter &w, const StateNames &st) const;
  /// O = acc / l and LSE; `scaleAcc` false leaves acc alone and declares invL[kMTiles][2] (1 / l of each row) for a
  /// family whose accumulator is not in registers (sm100: tensor memory), which scales O where it reads it.
  void finalize(CudaWriter &w, const StateNames &st, const std::string &sinkFn, bool scaleAcc = true) const;
  /// `tile.store o` from the registers: two adjacent columns (4 bytes) a store, rows < seqlen_q.
  void storeODirect(CudaWriter &w, const StateNames &st) const;
  void storeLse(CudaWriter &w) const;

  /// Loops over this thread's query rows, around `body`: m16 tile `mt` of the warp's rows, then fragment half `r`
  /// (the C fragment's rows fragRow and fragRow + 8), the row's block-wide index threadRow(). Every per-row step
  /// (state, softmax statistics, finalize, stores) walks the rows through here.
  void forEachRow(CudaWriter &w, const std::function<void()> &body) const;
  /// Loops over every element [mt][nt][i] of a register tile of `nTiles` n8 tiles (kSTiles: scores, kOTiles: acc),
  /// around `body`.
  void forEachElement(CudaWriter &w, const char *nTiles, const std::vector<std::string> &body) const {
    forEachElement(w, nTiles, {}, body);
  }
  /// The same, with `perTile` printed at the top of each nt iteration (before the elements' loop).
  void forEachElement(CudaWriter &w, const char *nTiles, const std::vector<std::string> &perTile,
                      const std::vector<std::string> &body) const;
  /// The block row (a C expression) of fragment half `half` ("r" inside forEachRow, "(i / 2)" over a tile's elements
  /// [mt][nt][i]) of this thread's m16 tile mt: the warp's rows start at warpRow0.
  static std::string threadRow(const char *half = "r") { return cat("warpRow0 + 16 * mt + fragRow + 8 * ", half); }
  /// The query row and the key (C expressions) of element [mt][nt][i] of a score tile of the K/V tile `kTile`.
  std::string scoreQuery() const;
  std::string scoreKey(const std::string &kTile) const;
  /// Values of one query row each (LSE, D): their array's dimensions (C declarator suffix), the index of the value of
  /// score element [mt][nt][i], and a loop over this thread's values around `body`, inside which rowValue() is the
  /// value's index and rowValueQuery() its query row.
  std::string rowValueDims() const { return layout.transposed ? "[kSTiles][2]" : "[kMTiles][2]"; }
  std::string rowValueOfScore() const { return layout.transposed ? "[nt][i % 2]" : "[mt][i / 2]"; }
  void forEachRowValue(CudaWriter &w, const std::function<void()> &body) const;
  std::string rowValue() const { return layout.transposed ? "[nt][r]" : "[mt][r]"; }
  std::string rowValueQuery() const {
    return layout.transposed ? cat(layout.queryOffset, " + 8 * nt + fragCol + r") : threadRow();
  }

  /// O's columns 8·nt + fragCol and + 1 of fragment half r (inside forEachRow and a loop over nt), converted and
  /// packed into one 32-bit word: what every store of O writes.
  std::string packedPair(const StateNames &st) const {
    return cat(pack, "(", st.acc, "[mt][nt][2 * r], ", st.acc, "[mt][nt][2 * r + 1])");
  }

private:
  /// The C name of a score's query head in forEachScore: h, or the row's own head under GQA packing.
  const char *head() const { return layout.packQueryHeads ? "hRow" : "h"; }
  /// Loops over every score of this thread with its query row `q` and key `kv`, around `body`.
  void forEachScore(CudaWriter &w, const std::string &kTile, const std::vector<std::string> &body) const;

  FragmentLayout layout;
  /// The primitives the printed code calls, qualified: `primitives::kNegInf`, ...
  std::string negInf, log2e, ln2, exp2, quadMax, quadSum, pack;
};

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_FRAGMENTTILES_H
