//===- Fa2Config.cpp - defaults and validation of the FA2 schedule --------===//
#include "schedules/fa2/Fa2Config.h"

namespace flashtile::fa2 {

Fa2Config Fa2Config::defaultsFor(int headDim, int headDimV) {
  Fa2Config c;
  // Each warp owns 16 query rows (one m16 tile): the accumulator (16 x headDimV fp32 per warp) stays in
  // registers without spilling at head dim 128.
  c.blockM = 128;
  c.warps = 8;
  c.blockN = (headDim > 128 || headDimV > 128) ? 32 : 64;
  return c;
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
  if (stages != kSupportedStages)
    return bad("stages", stages, "2 (one K and one V buffer, overlapped as in FA2)");
  if (headDim % kMmaK != 0 || headDim > 256)
    return bad("head_dim", headDim, "a multiple of 16 up to 256");
  if (headDimV % 8 != 0 || headDimV > 256)
    return bad("head_dim_v", headDimV, "a multiple of 8 up to 256");
  return std::nullopt;
}

int Fa2Config::smemBytes(int headDim, int headDimV) const {
  constexpr int kElementBytes = 2;
  return (blockM * headDim + blockN * headDim + blockN * headDimV) * kElementBytes;
}

} // namespace flashtile::fa2
