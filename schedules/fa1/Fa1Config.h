//===- Fa1Config.h - the FA1 teaching schedule's knobs --------------------===//
//
// FlashAttention-1 (Dao et al. 2022, Algorithm 1): the K/V loop outside, the Q loop inside. For each K/V tile j, for
// each Q tile i: load Q_i and the row statistics m_i, l_i and the running output O_i from global memory,
// S = Q_i K_jᵀ, mask, online-softmax update, rescale O_i, add P V_j, write O_i, m_i, l_i back. Here the K/V loop is
// the sequence of launches (one per K/V tile, `tile.dim kv_step`) and the Q loop the thread blocks of each
// launch; the state between steps lives in a global-memory workspace (tile.state_load / tile.state_store). Its
// speed is not a target: it is the smallest worked example of a schedule plug-in (docs/architecture.md).
//
// This header has no MLIR dependency.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_SCHEDULES_FA1_FA1CONFIG_H
#define FLASHTILE_SCHEDULES_FA1_FA1CONFIG_H

#include <optional>
#include <string>

namespace flashtile::fa1 {

inline constexpr const char *kName = "fa1";
/// The knobs' names, as fa2 spells the knobs the two share.
inline constexpr const char *kBlockM = "block-m", *kBlockN = "block-n", *kWarps = "warps";
inline constexpr int kMaxBlockM = 256, kMaxBlockN = 256, kMaxWarps = 16;
/// The MMA tile's rows: every warp owns whole m16 tiles of the block's query rows.
inline constexpr int kMmaRows = 16;

struct Fa1Config {
  int blockM = 64; ///< query rows of a thread block (one Q tile of the inner loop)
  int blockN = 64; ///< keys of a K/V tile: one launch (one step of the outer loop) each
  int warps = 4;   ///< each warp owns blockM / warps query rows

  /// The configuration used when the caller sets no knob: 64 x 64 tiles of 4 warps (one m16 tile a warp) up to head
  /// dim 128, 64 x 32 above, where a warp's fp32 accumulator of 16 x 256 leaves few registers for the scores.
  static Fa1Config defaultsFor(int headDim, int headDimV);
  /// An error naming the offending knob and the accepted values, or nothing when valid.
  std::optional<std::string> validate(int headDim, int headDimV) const;
  bool operator==(const Fa1Config &) const = default;
};

} // namespace flashtile::fa1

#endif // FLASHTILE_SCHEDULES_FA1_FA1CONFIG_H
