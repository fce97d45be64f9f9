//===- TargetFamily.h - the target interface the passes consume -----------===//
//
// A target is an instruction family (mma.sync, ldmatrix and cp.async; wgmma, TMA and mbarriers; ...) that
// codegen/<family>/ implements and registers. What the generic passes need of it lives here, apart from the printer:
// its name, the canonical architectures it runs on with their limits, its MMA shape, whether a scheduled tile shape
// fits it and how much shared memory that shape takes. tile-lower-to-target and the dialect's verifiers look families
// up by name here; codegen/common/TargetRegistry.h adds the printer of a family's tile ops. MLIR-free.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TARGET_TARGETFAMILY_H
#define FLASHTILE_PASSES_TARGET_TARGETFAMILY_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::target {

/// How a block's query rows are spread over the warps that compute them: #tile.schedule's warpLayout (the IR's
/// WarpLayout, passes/IR/TileEnums.td, named alike), the schedule's decision. A target prints the layouts it knows
/// and its family's checkShape rejects the others.
enum class WarpLayout {
  SplitQ,    ///< each computing warp owns warpRows query rows of its own (FA2's split-Q)
  SplitKeys, ///< every computing warp holds all blockM rows and takes its share of each K/V tile's keys
};

/// The IR's keyword of `layout` ("split_q"), for messages.
inline const char *warpLayoutName(WarpLayout layout) {
  switch (layout) {
  case WarpLayout::SplitQ:
    return "split_q";
  case WarpLayout::SplitKeys:
    return "split_keys";
  }
  return "?";
}

/// The scheduled tile shape of one kernel, from the tile.func and its #tile.schedule.
struct KernelShape {
  std::string dtype;                          ///< "bf16", "f16" or "e4m3"
  int headDim = 0;                            ///< Q/K head dim
  int headDimV = 0;                           ///< V/O head dim
  int blockM = 0;                             ///< query rows of a thread block
  int blockN = 0;                             ///< keys of a K/V tile
  int warps = 0;                              ///< warps of a thread block
  int stages = 1;                             ///< shared-memory buffers per K/V operand: tile j in buffer j % stages
  int minBlocksPerSm = 0;                     ///< occupancy request to the register allocator (0: none)
  WarpLayout warpLayout = WarpLayout::SplitQ; ///< how the rows are spread over the computing warps
  int warpRows = 0;                           ///< query rows a computing warp holds (blockM / warpRows warps compute)
  /// GQA packing (the func's `tile.pack_query_heads`): row r of a block is query row r / G of query head
  /// hKv·G + r % G, G = headsQ / headsKv, for the block's K/V head hKv (blockKvHead); the printer declares
  /// `headsPerKv` (G) and `blockKvHead`, and the rows of a block's sequence are p.seqlenQ·G.
  bool packQueryHeads = false;
  /// The program reads a KV cache (`tile.kv_cache`, passes/IR/TileKvCache.h): the kernel parameters' kvCache 2 makes
  /// K/V tile copies find each key row through the sequence's block-table row p.blockTable (KernelAbi.h).
  bool kvCache = false;
  /// K and V's element type where it is not dtype (`tile.kv_dtype`, passes/IR/TileKvDtype.h): "e4m3", an e4m3 KV
  /// cache read by a bf16 or f16 program; empty: K and V are of dtype.
  std::string kvDtype;
  /// With an e4m3 kvDtype (`tile.kv_convert_registers`, passes/IR/TileKvDtype.h): K and V fragments are read from the
  /// 8-bit tiles and converted in registers; false: each tile is widened into a 16-bit shared-memory tile first.
  bool kvConvertRegisters = false;
  /// With kvConvertRegisters in a bf16 program (`tile.kv_f16_mma`, passes/IR/TileKvDtype.h): the MMAs run in f16.
  bool kvF16Mma = false;
  /// Software exp2 (`tile.exp2_poly_share`, passes/IR/TileExp2Poly.h): of every 8 n8 tiles of a score row, this many
  /// take their softmax exponentials from a polynomial on the FMA pipe. 0: all from the MUFU unit; a family without a
  /// software exp2 refuses any other value.
  int exp2PolyShare = 0;
  /// `tile.desc_advance` (passes/Transforms/Passes.h): the forward's wgmma descriptors made once a GEMM and advanced
  /// by a 64-bit add a k16 step.
  bool descAdvance = false;
  /// `tile.max_chains` (passes/Transforms/Passes.h): the softmax's row maxima in this many independent chains.
  int maxChains = 1;
  /// `tile.lane_vote` (passes/Transforms/Passes.h): the conditional rescale's vote from each lane's own max.
  bool laneVote = false;
  /// `tile.late_pv_wait` (passes/Transforms/Passes.h): a kept branch before each wait for P·V.
  bool latePvWait = false;
  /// `tile.dq_fragments` (passes/Transforms/Passes.h): whole Q tiles of dq_accum in the fragments' order.
  bool dqFragments = false;
  /// `tile.dkv_staged` (passes/Transforms/Passes.h): dK and dV stored through shared memory, a bulk copy a row.
  bool stagedKv = false;
  /// `tile.dq_reads_only` (passes/Transforms/Passes.h): the dQ writer's last wait is for its adds' reads only.
  bool dqReadsOnly = false;
  /// `tile.dq_add_v4` (passes/Transforms/Passes.h): the computing warps' dQ adds four floats of one row a lane.
  bool dqAddV4 = false;
  /// `tile.late_v` (passes/Transforms/Passes.h): V loaded after the walk's first Q tile, on its own barrier.
  bool lateV = false;
  /// `tile.dq_sliced` (passes/Transforms/Passes.h): dQ's product in 64-column slices a warpgroup (column split).
  bool dqSliced = false;
  /// The backward's split of S's keys (`tile.key_warps`, passes/Transforms/Passes.h): the main program's warps form
  /// warps / keyWarps row groups, and a row group's keyWarps warps take blockN / keyWarps keys of S and dP each (and
  /// headDim / keyWarps columns of dQ). 1: split-Q.
  int keyWarps = 1;
  /// The block is one CTA of a cluster pair (`tile.cta_pair`, passes/IR/TileCtaPair.h): the pair's MMAs span both
  /// CTAs (tcgen05.mma.cta_group::2), the launch has clusters of two along x.
  bool ctaPair = false;
  /// Asynchronous GEMMs overlapped (`tile.gemm_overlap`, passes/Transforms/Passes.h): a backward printer keeps a Q
  /// tile's GEMMs in flight together and waits for each where its result is first read.
  bool gemmOverlap = false;
  /// The backward's dQ writer (`tile.dq_writer`, passes/Transforms/Passes.h): the computing warpgroups leave each Q
  /// tile's dQ terms in shared memory and a warp of a producer warpgroup adds them into the fp32 accumulator.
  bool dqWriter = false;
  /// The warps that share the dQ writer's adds (`tile.dq_writer_warps`, passes/Transforms/Passes.h; 1 without it).
  int dqWriterWarps = 1;
  /// dq_accum's rows chunk-permuted (`tile.dq_swizzle`, passes/Transforms/Passes.h).
  bool dqSwizzle = false;
  /// The backward's load warp (`tile.load_warp`, passes/Transforms/Passes.h): a warp of the producer warpgroup (which
  /// dqWriter makes) loads K, V and each Q tile's Q, dO, LSE and D into shared memory for the computing warpgroups.
  bool loadWarp = false;
  /// The backward's score tiles transposed (`tile.swap_scores`, passes/Transforms/Passes.h): a warp's register tiles
  /// of S, dP, P and dS hold keys on their rows and query rows on their columns, and dV's and dK's GEMMs read Pᵀ and dSᵀ
  /// from registers.
  bool swapScores = false;
  /// The backward's dK and dV accumulated transposed (`tile.swap_kv`, passes/Transforms/Passes.h): a warp's register
  /// tiles of them hold head-dim columns on their rows and its warpgroup's keys on their columns.
  bool swapKv = false;
  /// The backward's dO in one buffer of its own (`tile.single_do`, passes/Transforms/Passes.h), beside a ring of two Q
  /// tiles.
  bool singleDo = false;
  /// The warpgroups' rows of the load warp's ring broadcast once before the walk (`tile.ring_rows`).
  bool ringRows = false;
  /// The backward's staged tile (dS under tile.swap_scores) in two buffers, one a ring stage (`tile.staging_ring`):
  /// no barrier at the start of a Q-tile iteration.
  bool stagingRing = false;
  /// Registers a thread of the producer warpgroup and of a computing warpgroup holds after setmaxnreg
  /// (`tile.role_registers`); 0: the family's launch default.
  int producerRegs = 0, consumerRegs = 0;
};

/// An architecture a family runs on, with the per-block (opt-in) dynamic shared memory limit.
struct ArchLimits {
  std::string_view arch; ///< canonical name: what NVRTC compiles for and the runtime dispatches on
  int64_t maxSmemBytes = 0;
  /// Programmatic dependent launch (griddepcontrol; sm_90 and later): a launch may start while the one before it
  /// finishes, its kernel waiting for that grid where it reads its results.
  bool dependentLaunch = false;
};

/// The MMA instruction shape a family computes tiles with.
struct MmaShape {
  int m = 0, n = 0, k = 0;
};

/// An instruction family as the passes see it; codegen::TargetFamily (codegen/common/TargetRegistry.h) adds its
/// printer.
class TargetFamily {
public:
  virtual ~TargetFamily() = default;
  /// `#tile.target`'s isa.
  virtual std::string_view name() const = 0;
  /// One line: the instructions it uses.
  virtual std::string_view summary() const = 0;
  /// The canonical architectures it runs on.
  virtual const std::vector<ArchLimits> &archs() const = 0;
  virtual MmaShape mmaShape() const = 0;
  /// Why `shape` cannot be printed with this family, or nothing when it can (MMA granularity, dtype, stages).
  virtual std::optional<std::string> checkShape(const KernelShape &shape) const = 0;
  /// Dynamic shared memory of `shape`'s buffers in this family's layout (row padding, swizzle), in 64 bits.
  virtual int64_t smemBytes(const KernelShape &shape) const = 0;
  /// Whether its printer runs the asynchronous protocol: roles, barriers, copies into ring slots that arrive on
  /// barriers, and asynchronous MMAs (TileTarget's openRole ... mmaWait). Families that do not get programs with
  /// cp.async-style waits only.
  virtual bool asyncProtocol() const { return false; }
};

/// The limits of `arch` in `family`, or null when the family does not run on it.
const ArchLimits *archLimits(const TargetFamily &family, std::string_view arch);

/// Registers `family` under its name (codegen::registerTarget does, with its printer); a second family with the same
/// name is an internal error (asserted).
void registerTarget(std::unique_ptr<TargetFamily> family);
/// Removes the family named `name` (tests that register one of their own take it out again).
void unregisterTarget(std::string_view name);
/// The family named `name`, or null.
const TargetFamily *lookupTarget(std::string_view name);
/// Registered family names, sorted.
std::vector<std::string> targetNames();

/// The canonical name of `arch` (runtime/ArchNames.h: sm_86 builds sm_80 kernels, sm_90 is sm_90a, ...), or nothing
/// when it is not an accepted name.
std::optional<std::string> canonicalArch(std::string_view arch);
/// "unknown arch 'x' (did you mean 'sm_90a'?); accepted: sm_80, sm_86, ..."
std::string unknownArchMessage(std::string_view arch);
/// The shared-memory limit of `family` on canonical `arch`, or nothing when the family does not run there.
std::optional<int64_t> maxSmemBytes(const TargetFamily &family, std::string_view arch);

} // namespace flashtile::target

#endif // FLASHTILE_PASSES_TARGET_TARGETFAMILY_H
