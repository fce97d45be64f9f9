//===- DecodeConfig.h - the decode (split-KV) schedule's knobs ------------===//
//
// Decode: a few query rows over a long key range (serving). FA2's split-Q thread blocks would each walk the
// whole key range of one (batch, head) with one useful row, so a long sequence runs on a handful of SMs. The
// decode schedule keeps FA2's tile orchestration (split-Q warps, the K/V walk last to first, cp.async buffers,
// tile-fa2-pipeline) and splits the key range of every Q tile across thread blocks (flash-decoding): the grid
// gets numSplits blocks per Q tile, each walks whole K/V tiles [split_begin, split_end) and writes a partial O
// and LSE, and a combine kernel merges each row's partials exactly. The number of splits is the runtime's (from
// the shape and the SM count, runtime/SplitKv.h), a kernel argument: one kernel serves every split count.
//
// This header has no MLIR dependency.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_SCHEDULES_DECODE_DECODECONFIG_H
#define FLASHTILE_SCHEDULES_DECODE_DECODECONFIG_H

#include <optional>
#include <string>

namespace flashtile::decode {

inline constexpr const char *kName = "decode";
/// The knobs' names: FA2's, for the knobs the two share.
inline constexpr const char *kBlockM = "block-m", *kBlockN = "block-n", *kWarps = "warps", *kStages = "stages",
                            *kMinBlocksPerSm = "min-blocks-per-sm", *kPackGqa = "pack-gqa", *kKvCache = "kv-cache";
inline constexpr int kMaxBlockM = 256, kMaxBlockN = 256, kMaxWarps = 16, kMinStages = 1, kMaxStages = 2;
inline constexpr int kWarpSize = 32, kMaxThreadsPerSm = 2048;

struct DecodeConfig {
  int blockM = 64;        ///< query rows of a thread block (a decode call has 1-16 per head)
  int blockN = 128;       ///< keys per K/V tile: splits are whole tiles
  int warps = 4;          ///< each warp owns blockM / warps query rows (split-Q)
  int stages = 1;         ///< shared-memory buffers per K/V operand (tile-fa2-pipeline)
  int minBlocksPerSm = 0; ///< `__launch_bounds__` minimum blocks per SM (0: no request)

  /// The configuration used when the caller sets no knob: FlashAttention-2's split-KV kernel's tiles (64 query
  /// rows of 4 warps; 128 keys a tile up to head dim 128, 64 above, where a 16 x 256 fp32 accumulator a warp leaves
  /// no registers for larger score tiles) and one K/V buffer each (the walks of a split are a few tiles long, and
  /// the second buffer would halve the blocks an SM holds at head dim 128). A sweep on the H200 (bench/NOTES.md
  /// v19) kept it: 32 rows on 2 warps gains 1.5-3% on long packed GQA calls but loses 3-14% on wide unsplit grids.
  static DecodeConfig defaultsFor(int headDim, int headDimV);
  /// An error naming the offending knob and the accepted values, or nothing when valid.
  std::optional<std::string> validate(int headDim, int headDimV) const;
  int threads() const { return warps * kWarpSize; }
  bool operator==(const DecodeConfig &) const = default;
};

} // namespace flashtile::decode

#endif // FLASHTILE_SCHEDULES_DECODE_DECODECONFIG_H
