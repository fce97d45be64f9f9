//===- Fa4Config.h - the FA4 schedule's configuration ---------------------===//
//
// FlashAttention-4's knobs with their defaults and checks, plain C++ (no MLIR): unit-tested on their own. FA4 runs on
// sm_100a only (tcgen05.mma, tensor memory), and no SM100 GPU exists here: every default below comes from FA4's
// published configuration and the limits of tensor memory and shared memory, none from a measurement.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_SCHEDULES_FA4_FA4CONFIG_H
#define FLASHTILE_SCHEDULES_FA4_FA4CONFIG_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace flashtile::fa4 {

inline constexpr const char *kName = "fa4";
/// Knob names (the CLI's flags without dashes, tile-apply-schedule's option items).
inline constexpr const char *kBlockN = "block-n", *kStages = "stages", *kSoftmaxWarpgroups = "softmax-warpgroups",
                            *kRescaleThreshold = "rescale-threshold", *kExp2PolyShare = "exp2-poly-share",
                            *kTwoCta = "two-cta", *kRoles = "roles";

/// The smallest head dims (Q/K and V/O) two-cta = 1 accepts: each CTA of the pair holds half of V's columns for P·V,
/// whole 64-column (128-byte swizzled) blocks; FA4 pairs CTAs only from head dim 128 on.
inline constexpr int64_t kTwoCtaMinHeadDim = 128;
/// The smallest block-n two-cta = 1 accepts: each CTA holds half of a K/V tile's keys, at least 16 (one k16 step).
inline constexpr int64_t kTwoCtaMinBlockN = 32;

/// The largest rescale threshold (log2 units): P may reach 2^threshold, finite in f16 up to 15.
inline constexpr int64_t kMaxRescaleThreshold = 15;
/// FA4's threshold: a row's max moves only when it grew by more than 8 (x256).
inline constexpr int64_t kDefaultRescaleThreshold = 8;
/// Keys a K/V tile by default (Fa4Config.cpp says why not FA4's 128).
inline constexpr int64_t kDefaultBlockN = 64;
/// Rows a softmax warpgroup owns: the M of one tcgen05.mma (row i of its accumulators in tensor-memory lane i).
inline constexpr int64_t kRowsPerWarpgroup = 128;
inline constexpr int64_t kWarpgroupWarps = 4;
/// Tensor memory: 512 columns of 32 bits per CTA, shared by S and O of every softmax warpgroup.
inline constexpr int64_t kTmemColumns = 512;
/// Dynamic shared memory an sm_100a block may use, less what the kernel keeps past its tiles (alignment, barriers).
inline constexpr int64_t kSmemBudget = 227 * 1024 - 2 * 1024;
/// What FA4's own roles keep past that: the channels' barriers, and per Q tile its rescale factors and final m, l.
inline constexpr int64_t kRolesSmemBytes = 2 * 1024, kRolesSmemBytesPerTile = kRowsPerWarpgroup * 3 * 4;

/// A resolved configuration (every knob given or defaulted).
struct Fa4Config {
  int64_t blockM = 256;          ///< query rows of a block: 128 per softmax warpgroup
  int64_t blockN = kDefaultBlockN; ///< keys of a K/V tile (the N of S = Q·Kᵀ)
  int64_t stages = 2;            ///< slots of the K and V rings
  int64_t softmaxWarpgroups = 2; ///< Q tiles of 128 rows a block runs side by side, each with its own S and O
  int64_t rescaleThreshold = kDefaultRescaleThreshold; ///< 0: O is rescaled every tile
  /// Of every 8 n8 tiles of a score row, how many take their exponentials from the software exp2 (FMA pipe) instead
  /// of MUFU. 0 by default: FA4 moves 12-19% there to relieve MUFU, a trade no SM100 GPU here could measure.
  int64_t exp2PolyShare = 0;
  /// Which role IR: 1 (the default), FA4's own roles (tile-fa4-roles: the load and MMA warps, a softmax warpgroup
  /// per Q tile, a correction warpgroup, on the memory layer); 0, the first form (the ring roles of
  /// the generic tile-role-pipeline, each softmax warpgroup issuing its own MMAs). The sm100 family prints both.
  int64_t roles = 1;
  /// 1: every block is one CTA of a cluster pair along the Q-tile axis, and the MMA warp of the pair's first CTA
  /// issues tcgen05.mma.cta_group::2 (M = 256: each CTA its 128 rows of a Q tile, half of K's rows for Q·Kᵀ and half
  /// of V's columns for P·V). FA4 uses it for non-causal head dims >= 128 on long sequences; here it needs FA4's own
  /// roles, head dims >= 128, block-n >= 32 and a key range that does not depend on the Q tile (Fa4Schedule.cpp).
  int64_t twoCta = 0;
  /// The first form: a load warpgroup and the softmax warpgroups. FA4's own roles: the softmax warpgroups, a
  /// correction warpgroup and a warpgroup of one-warp roles (the MMA warp, the load warp; two warps idle).
  int64_t warps() const { return kWarpgroupWarps * (softmaxWarpgroups + (roles == 1 ? 2 : 1)); }
};

/// The knobs a caller set, by name.
using Fa4Knobs = std::map<std::string, int64_t>;

/// FA4's configuration for head dims (`headDim`, `headDimV`) and `knobs`, or why there is none (a message that names
/// the knob). Defaults: 64 keys a tile, two softmax warpgroups while their S and O fit tensor memory (head dim V up to
/// 192), else one, two slots.
std::optional<Fa4Config> configure(int64_t headDim, int64_t headDimV, const Fa4Knobs &knobs, std::string &error);

} // namespace flashtile::fa4

#endif // FLASHTILE_SCHEDULES_FA4_FA4CONFIG_H
