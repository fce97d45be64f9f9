//===- Fa4Config.cpp - the FA4 schedule's configuration -------------------===//
#include "schedules/fa4/Fa4Config.h"

#include <algorithm>

namespace flashtile::fa4 {
namespace {

int64_t knob(const Fa4Knobs &knobs, const char *name, int64_t fallback) {
  auto it = knobs.find(name);
  return it == knobs.end() ? fallback : it->second;
}

int64_t smemBytes(const Fa4Config &c, int64_t headDim, int64_t headDimV) {
  return 2 * (c.blockM * headDim + c.stages * c.blockN * (headDim + headDimV));
}

} // namespace

std::optional<Fa4Config> configure(int64_t headDim, int64_t headDimV, const Fa4Knobs &knobs, std::string &error) {
  Fa4Config c;
  // 64 keys a tile: the softmax warps hold S in C fragments (a warp's 32 rows x block-n fp32: 64 registers a
  // thread at 64 keys), and 128 keys (FA4's) spill under the registers two softmax warpgroups get (ptxas for
  // sm_100a, causal hd 128: 80 bytes of spill stores at 168 registers; 32 bytes at 255 with one warpgroup).
  c.blockN = knob(knobs, kBlockN, kDefaultBlockN);
  // Two Q tiles a block while both S and O of each fit tensor memory's 512 columns beside the other's.
  c.softmaxWarpgroups = knob(knobs, kSoftmaxWarpgroups, 2 * (c.blockN + headDimV) <= kTmemColumns ? 2 : 1);
  c.blockM = kRowsPerWarpgroup * c.softmaxWarpgroups;
  c.stages = knob(knobs, kStages, 2);
  c.rescaleThreshold = knob(knobs, kRescaleThreshold, kDefaultRescaleThreshold);
  c.exp2PolyShare = knob(knobs, kExp2PolyShare, 0);
  c.roles = knob(knobs, kRoles, 1);
  c.twoCta = knob(knobs, kTwoCta, 0);

  if (c.softmaxWarpgroups < 1 || c.softmaxWarpgroups > 2) {
    error = "fa4: softmax-warpgroups = " + std::to_string(c.softmaxWarpgroups) + " must be 1 or 2";
    return std::nullopt;
  }
  if (c.roles != 0 && c.roles != 1) {
    error = "fa4: roles = " + std::to_string(c.roles) + " must be 0 (the first form) or 1 (FA4's own roles)";
    return std::nullopt;
  }
  if (c.twoCta != 0 && c.twoCta != 1) {
    error = "fa4: two-cta = " + std::to_string(c.twoCta) + " must be 0 (one CTA a block) or 1 (a cluster pair, "
            "tcgen05.mma.cta_group::2)";
    return std::nullopt;
  }
  if (c.twoCta == 1 && c.roles != 1) {
    error = "fa4: two-cta = 1 needs roles = 1 (FA4's own roles: one MMA warp issues the pair's MMAs); accepted with "
            "roles = 0: two-cta = 0";
    return std::nullopt;
  }
  if (c.twoCta == 1 && (headDim < kTwoCtaMinHeadDim || headDimV < kTwoCtaMinHeadDim)) {
    error = "fa4: two-cta = 1 needs head dims >= 128 (each CTA of the pair holds half of V's columns, whole 64-column "
            "blocks; FA4 pairs CTAs from head dim 128 on), got " + std::to_string(headDim) + "/" +
            std::to_string(headDimV) + "; accepted at these head dims: two-cta = 0";
    return std::nullopt;
  }
  if (c.exp2PolyShare < 0 || c.exp2PolyShare > 8) {
    error = "fa4: exp2-poly-share = " + std::to_string(c.exp2PolyShare) + " must be 0 to 8 (eighths of S's n8 tiles)";
    return std::nullopt;
  }
  if (c.blockN < 16 || c.blockN > 256 || (c.blockN & (c.blockN - 1)) != 0) {
    error = "fa4: block-n = " + std::to_string(c.blockN) + " must be a power of two in [16, 256]";
    return std::nullopt;
  }
  if (c.twoCta == 1 && c.blockN < kTwoCtaMinBlockN) {
    error = "fa4: two-cta = 1 needs block-n >= 32 (each CTA of the pair holds half of a K/V tile's keys, at least one "
            "k16 step), got " + std::to_string(c.blockN);
    return std::nullopt;
  }
  if (c.softmaxWarpgroups * (c.blockN + headDimV) > kTmemColumns) {
    error = "fa4: " + std::to_string(c.softmaxWarpgroups) + " softmax warpgroup(s) x (block-n " +
            std::to_string(c.blockN) + " + head dim v " + std::to_string(headDimV) +
            ") columns of S and O exceed tensor memory's 512";
    return std::nullopt;
  }
  const int64_t budget =
      kSmemBudget - (c.roles == 1 ? kRolesSmemBytes + kRolesSmemBytesPerTile * c.softmaxWarpgroups : 0);
  if (int64_t bytes = smemBytes(c, headDim, headDimV); bytes > budget) {
    error = "fa4: Q and " + std::to_string(c.stages) + " K/V slots of block-n " + std::to_string(c.blockN) +
            " take " + std::to_string(bytes) + " bytes of shared memory; " + std::to_string(budget) +
            " are available";
    return std::nullopt;
  }
  return c;
}

} // namespace flashtile::fa4
