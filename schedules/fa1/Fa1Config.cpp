//===- Fa1Config.cpp - defaults and validation of the FA1 schedule --------===//
#include "schedules/fa1/Fa1Config.h"

#include <algorithm>

namespace flashtile::fa1 {

Fa1Config Fa1Config::defaultsFor(int headDim, int headDimV) {
  Fa1Config c;
  c.blockN = std::max(headDim, headDimV) <= 128 ? 64 : 32;
  return c;
}

std::optional<std::string> Fa1Config::validate(int headDim, int headDimV) const {
  auto bad = [](const std::string &knob, int value, const std::string &accepted) {
    return std::string(kName) + ": " + knob + " = " + std::to_string(value) +
           " is not supported; accepted: " + accepted;
  };
  if (warps < 1 || warps > kMaxWarps)
    return bad(kWarps, warps, "1 to " + std::to_string(kMaxWarps));
  if (blockM < kMmaRows * warps || blockM > kMaxBlockM || blockM % (kMmaRows * warps) != 0)
    return bad(kBlockM, blockM,
               "a multiple of 16 x warps (" + std::to_string(kMmaRows * warps) + ") up to " +
                   std::to_string(kMaxBlockM) + ": every warp owns whole 16-row MMA tiles of the block's query rows");
  if (blockN < 16 || blockN > kMaxBlockN || blockN % 16 != 0)
    return bad(kBlockN, blockN, "a multiple of 16 from 16 to " + std::to_string(kMaxBlockN));
  if (headDim < 1 || headDim > 256)
    return bad("head_dim", headDim, "1 to 256");
  if (headDimV < 1 || headDimV > 256)
    return bad("head_dim_v", headDimV, "1 to 256");
  return std::nullopt;
}

} // namespace flashtile::fa1
