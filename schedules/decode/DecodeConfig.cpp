//===- DecodeConfig.cpp - defaults and validation of the decode schedule ---===//
#include "schedules/decode/DecodeConfig.h"

#include <algorithm>
#include <cstdint>

namespace flashtile::decode {

DecodeConfig DecodeConfig::defaultsFor(int headDim, int headDimV) {
  (void)headDim, (void)headDimV; // one tiling serves every head dim (measured at 64, 128 and 256)
  return DecodeConfig{};
}

std::optional<std::string> DecodeConfig::validate(int headDim, int headDimV) const {
  auto bad = [](const std::string &knob, int value, const std::string &accepted) {
    return "decode: " + knob + " = " + std::to_string(value) + " is not supported; accepted: " + accepted;
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
               "1 (one K and one V buffer) or 2 (two each; Q·Kᵀ of the next tile overlaps the "
               "softmax)");
  if (minBlocksPerSm < 0 || int64_t(minBlocksPerSm) * threads() > kMaxThreadsPerSm)
    return bad(kMinBlocksPerSm, minBlocksPerSm,
               "0 (no occupancy request) to " + std::to_string(kMaxThreadsPerSm / threads()) + " (" +
                   std::to_string(kMaxThreadsPerSm) + " threads per SM at " + std::to_string(threads()) + " a block)");
  if (kvConvert < 0 || kvConvert > 1)
    return bad(kKvConvert, kvConvert,
               "0 (e4m3 K/V widened into 16-bit shared-memory tiles) or 1 (converted in registers)");
  if (kvF16Mma < 0 || kvF16Mma > 1)
    return bad(kKvF16Mma, kvF16Mma, "0 (bf16 MMAs) or 1 (f16 MMAs over the e4m3 fragments)");
  if (headDim < 1 || headDim > 256)
    return bad("head_dim", headDim, "1 to 256");
  if (headDimV < 1 || headDimV > 256)
    return bad("head_dim_v", headDimV, "1 to 256");
  return std::nullopt;
}

} // namespace flashtile::decode
