//===- Fa2Config.cpp - defaults and validation of the FA2 schedule --------===//
#include "schedules/fa2/Fa2Config.h"

namespace flashtile::fa2 {

Fa2Config Fa2Config::defaultsFor(int headDim, int headDimV) {
  Fa2Config c;
  c.blockM = 128;
  c.blockN = 64;
  if (headDim <= 64 && headDimV <= 64) {
    // Two m16 tiles per warp halve the shared-memory reads of K and V per MMA; at head dim 64 the state and
    // scores still fit in registers (measured on the H200: 1.02-1.07x torch FA2, bench/RESULTS.md).
    c.warps = 4;
  } else {
    // One m16 tile per warp: at head dim 128 the 16 x 128 fp32 accumulator per warp and the scores stay in
    // registers without spilling (two tiles per warp spill).
    c.warps = 8;
    if (headDim > 128 || headDimV > 128)
      c.blockN = 32;
  }
  c.stages = defaultStages(c.blockM, c.warps, headDim, headDimV);
  return c;
}

int Fa2Config::defaultStages(int blockM, int warps, int headDim, int headDimV) {
  bool oneTilePerWarp = blockM == kMmaM * warps;
  return oneTilePerWarp && headDim <= 128 && headDimV <= 128 ? kMaxStages : kMinStages;
}

std::optional<std::string> Fa2Config::validate(int headDim, int headDimV) const {
  auto bad = [](const std::string &knob, int value, const std::string &accepted) {
    return "fa2: " + knob + " = " + std::to_string(value) + " is not supported; accepted: " + accepted;
  };
  if (warps < 1 || warps > 16)
    return bad("warps", warps, "1 to 16");
  if (blockM < kMmaM * warps || blockM % (kMmaM * warps) != 0)
    return bad("block-m", blockM, "a multiple of 16 * warps (= " + std::to_string(kMmaM * warps) + ")");
  if (blockN < kMmaK || blockN % kMmaK != 0 || blockN > 256)
    return bad("block-n", blockN, "a multiple of 16 up to 256");
  if (stages < kMinStages || stages > kMaxStages)
    return bad("stages", stages,
               "1 (one K and one V buffer, as in FA2) or 2 (two each; Q·Kᵀ of the next tile overlaps the softmax)");
  if (headDim % kMmaK != 0 || headDim > 256)
    return bad("head_dim", headDim, "a multiple of 16 up to 256");
  if (headDimV % 8 != 0 || headDimV > 256)
    return bad("head_dim_v", headDimV, "a multiple of 8 up to 256");
  return std::nullopt;
}

int Fa2Config::smemBytes(int headDim, int headDimV) const {
  constexpr int kElementBytes = 2;
  return (blockM * headDim + stages * blockN * (headDim + headDimV)) * kElementBytes;
}

} // namespace flashtile::fa2
