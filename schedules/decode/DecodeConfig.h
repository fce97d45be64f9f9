//===- DecodeConfig.h - the decode (split-KV) schedule's knobs ------------===//
//
// Decode: a few query rows over a long key range (serving). FA2's split-Q thread blocks would each walk the
// whole key range of one (batch, head) with one useful row, so a long sequence runs on a handful of SMs. The
// decode schedule keeps FA2's tile orchestration (split-Q warps, the K/V walk last to first, cp.async buffers,
// tile-pipeline-copies) and splits the key range of every Q tile across thread blocks (flash-decoding): the grid
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
                            *kMinBlocksPerSm = "min-blocks-per-sm", *kPackGqa = "pack-gqa", *kKvCache = "kv-cache",
                            *kKvConvert = "kv-convert", *kKvF16Mma = "kv-f16-mma";
inline constexpr int kMaxBlockM = 256, kMaxBlockN = 256, kMaxWarps = 16, kMinStages = 1, kMaxStages = 2;
inline constexpr int kWarpSize = 32, kMaxThreadsPerSm = 2048;

struct DecodeConfig {
  int blockM = 32;        ///< query rows of a thread block (a decode call has 1-16 per head)
  int blockN = 64;        ///< keys per K/V tile: splits are whole tiles
  int warps = 2;          ///< each warp owns blockM / warps query rows (split-Q)
  int stages = 1;         ///< shared-memory buffers per K/V operand (tile-pipeline-copies)
  int minBlocksPerSm = 0; ///< `__launch_bounds__` minimum blocks per SM (0: no request)
  /// How an e4m3 KV cache's tiles reach the 16-bit MMAs (KV-cache kernels over an e4m3 cache only; 16-bit K/V
  /// ignore it): 0 widens each 8-bit tile into a 16-bit shared-memory tile after its copy (every thread a share,
  /// then a barrier); 1 reads MMA fragments of the 8-bit tiles with ldmatrix and converts them in registers (no
  /// 16-bit tiles: a third of the shared memory, no widening barrier; each warp converts every value it reads).
  /// The schedule makes 1 (with 16 rows on one warp) the default over an e4m3 cache (DecodeSchedule.cpp).
  int kvConvert = 0;
  /// With kvConvert 1 in a bf16 program: 1 runs the MMAs in f16 (each e4m3 pair one conversion instead of four, Q's
  /// fragments converted once with a power-of-two scale a warp, P rounded to f16); 0 in bf16.
  int kvF16Mma = 0;

  /// The configuration used when the caller sets no knob, measured on the H200 at head dims 64, 128 and 256
  /// (bench/NOTES.md v21): 32 query rows on 2 warps, 64 keys a tile, one K and one V buffer. A decode call's rows
  /// fill few of a block's rows, so small blocks: at head dim 128, 40 KB of shared memory and four blocks an SM,
  /// and the split heuristic spreads four times the blocks of FlashAttention-2's split-KV tiles (64 rows of 4
  /// warps, 128 keys), which it beats by 0-3% at head dim 128 and 5-15% at 64 and 256. Not at 16 query rows of a
  /// 4-head group (64 packed rows: two Q tiles read the K/V tiles twice): 13% slower there.
  static DecodeConfig defaultsFor(int headDim, int headDimV);
  /// An error naming the offending knob and the accepted values, or nothing when valid.
  std::optional<std::string> validate(int headDim, int headDimV) const;
  int threads() const { return warps * kWarpSize; }
  bool operator==(const DecodeConfig &) const = default;
};

} // namespace flashtile::decode

#endif // FLASHTILE_SCHEDULES_DECODE_DECODECONFIG_H
