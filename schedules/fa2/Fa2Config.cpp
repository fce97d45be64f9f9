//===- Fa2Config.cpp - defaults and validation of the FA2 schedule --------===//
#include "schedules/fa2/Fa2Config.h"

#include <algorithm>

namespace flashtile::fa2 {

Fa2Config Fa2Config::defaultsFor(int headDim, int headDimV, const ProgramTraits &traits, bool shortSequences) {
  // Measured on the H200 (bench/RESULTS.md, bench/NOTES.md v2-v6), bf16, 2k and 8k, causal and not.
  Fa2Config c;
  c.blockM = 128;
  c.blockN = 64;
  bool lightScores = !traits.scoreMod && !traits.headBoundary;
  if (headDim <= 64 && headDimV <= 64) {
    // Two m16 tiles per warp halve the shared-memory reads of K and V per MMA (the FA2 kernels are bound by
    // them): 1.02-1.10x torch FA2 at head dim 64.
    c.warps = 4;
  } else if (headDim <= 128 && headDimV <= 128) {
    // The same at head dims 96-128 for programs whose only per-score work is a causal-like mask: 0.95-1.02x
    // torch FA2 at 128. A score_mod or a heavier mask (a masked head segment) spills at 255 registers with two
    // m16 tiles per warp (ptxas: 300-1800 bytes), so those keep one m16 tile per warp (softcap causal 0.94 vs
    // 0.86x, document_mask 0.49 vs 0.24x of the plain kernel).
    c.warps = lightScores ? 4 : 8;
    if (traits.headBoundary) {
      // Windows and documents: each row block attends a band of keys, and every key tile the band's edges cut
      // is wasted work in part; 64-row blocks cut less (4 warps, one m16 tile each): sliding windows 0.41 ->
      // 0.53x and 0.72 -> 0.79x, document_mask 0.45 -> 0.54x of the plain kernel.
      c.blockM = 64;
      c.warps = 4;
    }
  } else {
    // One m16 tile per warp: a 16 x 256 fp32 accumulator per warp is all the registers allow. 64-row blocks of
    // 4 warps (two blocks per SM) beat 128 rows of 8 warps at every length (H200, bf16, 512-16k; NOTES v13):
    // head dim 192 +4-8% non-causal, +4-23% causal; 256 +3-4% non-causal, causal +17% at 512 to -2% at 16k.
    // 64-key tiles then beat 32-key ones by a further 2-18% (ptxas spills a few bytes at 255 registers).
    c.blockM = 64;
    c.warps = 4;
    c.blockN = 64;
  }
  c.stages = defaultStages(headDim, headDimV);
  if (traits.headBoundary && c.blockM == 64) {
    // Band walks are short (a 257-key window: 5 tiles per 64-row block), and Q·Kᵀ one tile ahead gains little
    // there: one K/V buffer each (48 KB at head dim 128, no spills) measured faster (H200, 8k: sliding windows
    // +6% / +3%, document_mask +1%; NOTES v10). Capping registers for 3 blocks per SM (minBlocksPerSm) gained
    // a further 1-7% with nvcc's cubins but nothing with NVRTC's, which spill 3x more under the cap.
    c.stages = kMinStages;
  }
  int widest = std::max(headDim, headDimV);
  if (shortSequences && traits.growingWalks && !traits.headBoundary && (widest <= 64 || widest > 96) && widest <= 128) {
    // Causal-like walks of short sequences (at most 1024 rows on average) are a few tiles long, and a block's
    // fixed cost weighs most there: 64-row blocks, measured on the H200 (bf16, same run, NOTES v13) at 512 /
    // 1024 / 2048 rows. Head dim 128, 4 warps and one K/V buffer: causal +14 / +7 / 0%, softcap_causal
    // +17 / +7 / -2%, alibi_causal +20 / +12 / +3%, sinks_causal +14 / +4 / 0% (at 4096 -5%). Head dim 64, 2 warps
    // of two m16 tiles as in its default: causal +7 / +3 / -7%, softcap_causal +7 / +2 / -4%, alibi_causal
    // +5 / -1 / -5%; head dim 32 (unswept, final run) causal +11 / +8%. Non-causal walks lose 6-14%, and head dim
    // 96 loses at every length: they keep the default.
    c.blockM = 64;
    c.warps = widest <= 64 ? 2 : 4;
    c.stages = kMinStages;
  }
  // Heaviest first across the grid pays where walks grow with the Q tile (causal: +5-7% at head dim 128), and
  // costs 1-4% where they do not (the blocks running together then span more heads' K/V).
  c.lptGroupBlocks = traits.growingWalks && !traits.headBoundary ? kDefaultLptGroupBlocks : 0;
  // FA2's rescale policy (every tile): conditional rescaling at threshold 8 measured 1-4% slower at head dims
  // 64 and 128 and on every variant (the warp's vote serializes the row maxes ahead of the exp2s, and the extra
  // registers spill at 128; bench/NOTES.md v9), so it is a knob here, not a default.
  c.rescaleThreshold = 0;
  return c;
}

int Fa2Config::defaultStages(int headDim, int headDimV) {
  // Q·Kᵀ one tile ahead pays at head dims 97-128 (+4-8% at 128), not at 64 (-1 to -4%: the extra score tile
  // crowds the two m16 tiles' registers), 96 (-6% since its shared-memory rows are padded: it had gained 30%
  // while its ldmatrix reads were bank-conflicted) nor above 128 (-4%).
  int widest = headDim > headDimV ? headDim : headDimV;
  return widest > 96 && widest <= 128 ? kMaxStages : kMinStages;
}

std::optional<std::string> Fa2Config::validate(int headDim, int headDimV) const {
  auto bad = [](const std::string &knob, int value, const std::string &accepted) {
    return "fa2: " + knob + " = " + std::to_string(value) + " is not supported; accepted: " + accepted;
  };
  if (warps < 1 || warps > kMaxWarps)
    return bad(kWarps, warps, "1 to " + std::to_string(kMaxWarps));
  if (blockM < warps || blockM > kMaxBlockM || blockM % warps != 0)
    return bad(kBlockM, blockM,
               "a multiple of warps (" + std::to_string(warps) + ") up to " + std::to_string(kMaxBlockM) +
                   ": every warp owns block-m / warps query rows");
  if (blockN < 1 || blockN > kMaxBlockN)
    return bad(kBlockN, blockN, "1 to " + std::to_string(kMaxBlockN));
  if (stages < kMinStages || stages > kMaxStages)
    return bad(kStages, stages,
               "1 (one K and one V buffer, as in FA2) or 2 (two each; Q·Kᵀ of the next tile overlaps the softmax)");
  if (rescaleThreshold < 0 || rescaleThreshold > kMaxRescaleThreshold)
    return bad(kRescaleThreshold, rescaleThreshold,
               "0 (rescale every tile, as in FA2) to " + std::to_string(kMaxRescaleThreshold) +
                   " (rescale only when a row max grows by more than that, in log2 units, as in FA4)");
  if (minBlocksPerSm < 0 || int64_t(minBlocksPerSm) * threads() > kMaxThreadsPerSm)
    return bad(kMinBlocksPerSm, minBlocksPerSm,
               "0 (no occupancy request) to " + std::to_string(kMaxThreadsPerSm / threads()) + " (" +
                   std::to_string(kMaxThreadsPerSm) + " threads per SM at " + std::to_string(threads()) + " a block)");
  if (lptGroupBlocks < 0 || lptGroupBlocks > kMaxLptGroupBlocks)
    return bad(kLptGroupBlocks, lptGroupBlocks,
               "0 (Q tiles heaviest first within each batch entry and head) to " + std::to_string(kMaxLptGroupBlocks) +
                   " (heaviest first across groups of at least that many blocks)");
  if (headDim < 1 || headDim > 256)
    return bad("head_dim", headDim, "1 to 256");
  if (headDimV < 1 || headDimV > 256)
    return bad("head_dim_v", headDimV, "1 to 256");
  return std::nullopt;
}

Fa2Config Fa2Config::backwardDefaultsFor(int headDim, int headDimV) {
  // Measured on the H200 (bf16, 16k tokens, seqlen 8k, causal and not; bench/NOTES.md "Tuning the backward"), TFLOP/s
  // non-causal / causal, blockM:blockN:warps:stages.
  Fa2Config c;
  int widest = std::max(headDim, headDimV);
  // Two Q-tile buffers: tile i + 1's Q, dO, LSE and D copied while tile i computes (tile-pipeline-q-loop): +14% / +4%
  // at head dim 64, +15% / +7% at 128 over one.
  c.stages = kMaxStages;
  if (widest <= 64) {
    // 128-row Q tiles and 128-key K/V tiles, 8 warps (FlashAttention 2's tiles at this head dim): a warp's dK and dV
    // are 16 x 64 fp32 each, its S and dP 16 x 128; half the dQ reductions per FLOP of 64-key tiles. 223 / 212 against
    // 198 / 185 for 64:64:4:2 and 171 / 160 for 128:64:4:2.
    c.blockM = 128;
    c.blockN = 128;
    c.warps = 8;
    // FlashAttention 2's own 2 x 4 layout here (key-warps 4: a warp 64 rows x 32 keys of S and dP, 64 rows x 16 columns
    // of dQ) measured no faster: 214 / 197 against 220 / 209 at 8k; key-warps 2 218 / 205 (bench/NOTES.md v27).
  } else if (widest <= 128) {
    // One m16 tile of Q rows and one of K/V rows a warp: 2 x 16 x 128 fp32 of dK and dV and 2 x 16 x 64 of S and dP,
    // what 255 registers hold (ptxas spills 28 bytes). 227 / 203; 8 warps on 128-row Q tiles (two warps a key tile,
    // 64 columns each, 128:64:8:2) 200 / 190.
    // FlashAttention 2's tiles, 64:128:8:2 with its 2 x 4 warp layout (key-warps 4: a warp 32 query rows x 32 keys of S
    // and dP, 32 rows x 32 columns of dQ; ptxas spills 152 bytes), measured 219 / 207 against 218 / 209 here; key-warps
    // 2 (16 rows x 64 keys, 36 bytes of spills) 232 / 202: +6% non-causal, -3% causal, -8% causal at 2k (NOTES v27).
    c.blockM = 64;
    c.blockN = 64;
    c.warps = 4;
  } else {
    // Above 128, 32-key tiles: two warps share each m16 tile of keys, half of dK's and dV's columns each (16 x 128
    // fp32 each at head dim 256), and S and dP are 16 x 32 a warp. One Q-tile buffer: at 256 two (64 KB each) leave
    // one block an SM, 131 / 129 against 150 / 141; at 192 (10 heads) two give 127 / 122 against 134 / 128.
    c.blockM = 64;
    c.blockN = 32;
    c.warps = 4;
    c.stages = kMinStages;
  }
  return c;
}

int Fa2Config::backwardKvColumnSplit() const {
  int rowTiles = blockN / kBackwardRowGranule;
  return rowTiles % warps == 0 || rowTiles == 0 ? 1 : warps / rowTiles;
}

std::optional<std::string> Fa2Config::validateBackward(int headDim, int headDimV) const {
  if (std::optional<std::string> error = validate(headDim, headDimV))
    return error;
  auto bad = [](const std::string &knob, int value, const std::string &accepted) {
    return "fa2 backward: " + knob + " = " + std::to_string(value) + " is not supported; accepted: " + accepted;
  };
  if (keyWarps < 1 || warps % keyWarps != 0)
    return bad(kKeyWarps, keyWarps,
               "a divisor of warps (" + std::to_string(warps) + "): the warps form warps / key-warps row groups");
  const int rowGroups = warps / keyWarps;
  const int granule = kBackwardRowGranule * rowGroups;
  if (blockM % granule != 0)
    return bad(kBlockM, blockM,
               "a multiple of 16 x warps / key-warps (" + std::to_string(granule) +
                   "): the warps' row groups split a Q tile in m16 tiles");
  if (keyWarps > 1 && (blockN % (kBackwardRowGranule * keyWarps) != 0 || headDim % (16 * keyWarps) != 0))
    return bad(kKeyWarps, keyWarps,
               "1, or a divisor of warps whose n16 parts split block-n (" + std::to_string(blockN) +
                   ") and head_dim (" + std::to_string(headDim) + ") evenly: a warp's keys of S and dP and its columns of dQ");
  const int rowTiles = blockN / kBackwardRowGranule;
  if (blockN % kBackwardRowGranule != 0 || (rowTiles % warps != 0 && warps % rowTiles != 0))
    return bad(kBlockN, blockN,
               "a multiple of 16 x warps (" + std::to_string(granule) +
                   "), or 16 x a divisor of warps: the warps split a K/V tile in m16 tiles (and then their columns)");
  const int split = backwardKvColumnSplit();
  const int columnGranule = 16 * split;
  if (headDim % columnGranule != 0 || headDim > kMaxBackwardHeadDim)
    return bad("head_dim", headDim,
               "multiples of " + std::to_string(columnGranule) + " up to " + std::to_string(kMaxBackwardHeadDim) +
                   (split > 1 ? " (" + std::to_string(split) + " warps share an m16 tile of keys)" : std::string()));
  if (headDimV % columnGranule != 0 || headDimV > kMaxBackwardHeadDim)
    return bad("head_dim_v", headDimV,
               "multiples of " + std::to_string(columnGranule) + " up to " + std::to_string(kMaxBackwardHeadDim) +
                   (split > 1 ? " (" + std::to_string(split) + " warps share an m16 tile of keys)" : std::string()));
  return std::nullopt;
}

GridTile gridTile(int linear, int qTiles, int pairs, int lptGroupBlocks) {
  if (lptGroupBlocks == 0)
    return GridTile{qTiles - 1 - linear % qTiles, linear / qTiles};
  int groupPairs = std::min(pairs, (lptGroupBlocks + qTiles - 1) / qTiles);
  int groupFirst = linear / (groupPairs * qTiles) * groupPairs;
  int groupSize = std::min(groupPairs, pairs - groupFirst);
  int inGroup = linear - groupFirst * qTiles;
  return GridTile{qTiles - 1 - inGroup / groupSize, groupFirst + inGroup % groupSize};
}

} // namespace flashtile::fa2
