//===- Fa2Config.h - the FlashAttention-2 schedule's knobs ----------------===//
//
// FA2 (Dao, 2023): split-Q — a thread block owns blockM query rows and walks the K/V tiles; each warp owns
// blockM / warps of those rows, so the online softmax needs no cross-warp communication; the division by the
// softmax sum is deferred to the end; tiles are walked from the last to the first, so the masked (diagonal)
// tiles come first and the mask is applied only there.
//
// This header has no MLIR dependency: the passes and the runtime's tests both use it.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_SCHEDULES_FA2_FA2CONFIG_H
#define FLASHTILE_SCHEDULES_FA2_FA2CONFIG_H

#include <optional>
#include <string>

namespace flashtile::fa2 {

inline constexpr const char *kName = "fa2";
/// The knobs' names (CLI flags, tile-apply-schedule's options items).
inline constexpr const char *kBlockM = "block-m", *kBlockN = "block-n", *kWarps = "warps", *kStages = "stages",
                            *kRescaleThreshold = "rescale-threshold", *kMinBlocksPerSm = "min-blocks-per-sm",
                            *kLptGroupBlocks = "lpt-group-blocks", *kKeyWarps = "key-warps";
/// Bounds of the tile sizes: the target checks its own granularity (MMA shape) and shared memory on top.
inline constexpr int kMaxBlockM = 256, kMaxBlockN = 256, kMaxWarps = 16;
inline constexpr int kWarpSize = 32;
/// Resident threads per SM on sm_80 to sm_100 (the bound of an occupancy request).
inline constexpr int kMaxThreadsPerSm = 2048;
/// Shared-memory buffers per K/V operand ("stages"):
///  1 — FA2 as published: one K and one V buffer; K(next) is in flight during softmax + P·V, V(j) during Q·Kᵀ;
///      two barriers per tile.
///  2 — two buffers each, and S = Q·K(next)ᵀ is issued in the same straight-line code as this tile's softmax, so
///      the tensor cores and the FP32/MUFU pipes of a warp overlap (FA3's intra-warpgroup overlap, on mma.sync);
///      one barrier per tile. Costs a second score tile of registers and a second K and V buffer: the default
///      at head dims 97-128 (H200, head dim 128: +4-8%, bench/NOTES.md).
inline constexpr int kMinStages = 1;
inline constexpr int kMaxStages = 2;
/// Block order (`lptGroupBlocks`): thread blocks take Q tiles from the last to the first, since under a causal
/// mask later Q tiles walk more K/V tiles and launching them first leaves light blocks for the last wave
/// (longest-processing-time-first scheduling). Blocks start in about linear order (x fastest), so:
///  0 — the order holds within each (batch, head) pair only; pairs follow each other, and the blocks that run
///      together share few pairs' K/V (best when every walk has the same length);
///  N > 0 — the pairs go in groups of at least N blocks, and a group's blocks take its Q tiles heaviest first,
///      pair by pair: the last wave of the whole grid is light. N keeps the K/V that run together few enough for
///      L2 (512: about two waves of the H200's 132 SMs at 2 blocks each; at 2k tokens 32 heads, 32 MB at head dim
///      128). Measured on causal programs: +5-7% at head dim 128, 1k-16k; on programs with equal walks: -1 to -4%.
inline constexpr int kDefaultLptGroupBlocks = 512;
inline constexpr int kMaxLptGroupBlocks = 1 << 20;
/// The backward keeps a warp's rows of dK and dV in registers (fp32): the warps split the K/V tile's rows in m16 tiles
/// and, with more warps than m16 tiles, each tile's columns (head dims above 128: two warps a tile, half the columns
/// each). Head dims up to this.
inline constexpr int kMaxBackwardHeadDim = 256;
/// Rows of an mma.sync tile: the backward's warps split both the Q and the K/V tile in whole m16 tiles.
inline constexpr int kBackwardRowGranule = 16;

/// The tile a thread block computes: block `linear` (x fastest) of a grid of `qTiles` Q tiles by `pairs` (batch,
/// head) pairs, under block order `lptGroupBlocks`. The generated kernels compute exactly this (printSequence in
/// the CUDA printer).
struct GridTile {
  int qTile = 0, pair = 0;
};
GridTile gridTile(int linear, int qTiles, int pairs, int lptGroupBlocks);

/// Rescale policy (`rescaleThreshold`, log2 units):
///  0 — FA2 as published: every tile, each row's running max m moves to max(m, rowmax(S)·c) and acc is
///      multiplied by alpha = exp2(m_old − m).
///  τ > 0 — FA4's conditional rescaling: a row's max moves only when the tile's scores exceed it by more than τ,
///      so P = exp2(S·c − m) may reach 2^τ; on the GPU the rows of a warp decide together (one moves, all move)
///      and a warp whose maxes all stay skips the acc *= alpha multiply. O and LSE are the same up to rounding:
///      P and l use the same m. τ is at most 15 so P stays finite in fp16.
inline constexpr int kMaxRescaleThreshold = 15;

/// What the default configuration needs to know about the program (no MLIR here: ApplySchedule fills it in).
struct ProgramTraits {
  /// The variant changes scores (tile.score_mod: softcap, ALiBi, ...).
  bool scoreMod = false;
  /// Walks grow with the Q tile: a kv_range rule bounds the keys from above by the rows (causal-like) and none
  /// from below, so later Q tiles walk more K/V tiles.
  bool growingWalks = false;
  /// The walk has a masked head segment (a kv_range rule starts after key 0: sliding windows, documents), so
  /// more tiles are masked and the mask predicate is heavier than causal's.
  bool headBoundary = false;
};

struct Fa2Config {
  int blockM = 128;         ///< query rows a thread block owns (split-Q)
  int blockN = 64;          ///< keys per K/V tile
  int warps = 4;            ///< each warp owns blockM / warps query rows
  int stages = 1;           ///< shared-memory buffers per K/V operand (see kMaxStages)
  int rescaleThreshold = 0; ///< 0: rescale every tile; τ > 0: only when a max grows by more than τ (see above)
  /// Occupancy asked of the register allocator (`__launch_bounds__` minimum blocks per SM, registers capped at
  /// 65536 / (n · threads)); 0: no request, ptxas takes up to 255 registers a thread.
  int minBlocksPerSm = 0;
  int lptGroupBlocks = 0; ///< block order: 0 within each (batch, head); N > 0 across groups of >= N blocks
  /// The backward only: the warps that split a K/V tile's keys for S = Q·Kᵀ and dP = dO·Vᵀ (and dQ's columns). The
  /// warps form warps / keyWarps row groups of blockM · keyWarps / warps query rows, each row group's warps
  /// blockN / keyWarps keys each (FlashAttention 2's 2 × 4 layout of a 64 × 128 tile over 8 warps: keyWarps 4);
  /// 1: every warp its own query rows against every key (split-Q, as the forward).
  int keyWarps = 1;

  /// The configuration used when the caller sets no knob, tuned per head dim, program and shape class
  /// (`shortSequences`: the runtime's "short" class, KernelInfo.h: a block's fixed cost — its Q tile, the first
  /// K/V tile's latency, the epilogue — weighs more there, and 64-row blocks halve it per block).
  static Fa2Config defaultsFor(int headDim, int headDimV, const ProgramTraits &traits = {},
                               bool shortSequences = false);
  /// The stages used when the caller does not choose them: 2 for head dims in (64, 128], else 1 (measured on
  /// the H200, bench/NOTES.md: elsewhere the second score tile costs more registers than the overlap gains).
  static int defaultStages(int headDim, int headDimV);
  /// The backward's configuration when the caller sets no knob (docs/backward.md): a backward_main block owns
  /// blockN keys and walks Q tiles of blockM rows; its warps split the Q tile's rows for S = Q·Kᵀ and dP = dO·Vᵀ
  /// (blockM / warps each) and the K/V tile's rows for dV and dK in m16 tiles (with more warps than m16 tiles, each
  /// tile's columns too: backwardKvColumnSplit); stages = 2 copies each Q tile one tile ahead.
  static Fa2Config backwardDefaultsFor(int headDim, int headDimV);
  /// The warps that share an m16 tile of keys for dK and dV, each a part of its columns: 1 when the K/V tile has a
  /// multiple of warps m16 tiles, else warps / (blockN / 16).
  int backwardKvColumnSplit() const;
  /// The query rows of a warp in S, dP and dQ: blockM / (warps / keyWarps).
  int backwardWarpRows() const { return blockM * keyWarps / warps; }
  /// validate() and the backward's own rules: both splits in whole m16 tiles (the K/V tile's columns in whole n16
  /// tiles), head dims the printer keeps in registers (dK and dV of a warp's rows).
  std::optional<std::string> validateBackward(int headDim, int headDimV) const;
  /// An error message naming the offending knob and the accepted values, or nothing when valid. The target
  /// checks what depends on its instructions (MMA granularity, shared memory) at tile-lower-to-target.
  std::optional<std::string> validate(int headDim, int headDimV) const;
  int threads() const { return warps * kWarpSize; }
  bool operator==(const Fa2Config &) const = default;
};

} // namespace flashtile::fa2

#endif // FLASHTILE_SCHEDULES_FA2_FA2CONFIG_H
