//===- TileTarget.h - what a target prints for each tile op ---------------===//
//
// The generic printer (CudaEmitter.cpp) walks scheduled tile IR: it prints the scalar code, the KV-range rules,
// the K/V loops and the variant's functions, and asks a TileTarget for every tile op. A target is the only code
// that knows an instruction set (codegen/sm80: mma.sync, ldmatrix, cp.async). This header has no MLIR
// dependency: what a target needs from the IR arrives as plain values and C expressions.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_TILETARGET_H
#define FLASHTILE_CODEGEN_COMMON_TILETARGET_H

#include "codegen/common/CudaWriter.h"
#include "passes/Target/TargetFamily.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::codegen {

/// The scheduled tile shape and the warp layout are the target interface's (passes/Target/TargetFamily.h).
using target::KernelShape;
using target::WarpLayout;
using target::warpLayoutName;

/// The tiles `tile.buffer`, `tile.copy_async` and `tile.load` name.
enum class Operand { Q, K, V };

/// A `tile.barrier`: one phase ring per slot of `operand`'s buffer. A barrier with `bytes` > 0 completes a phase
/// when that many bytes of a copy landed in the slot (a full barrier: it starts pending); one with `arrivals` > 0
/// when that many roles arrived (an empty barrier: it starts released, so the first round of waits passes).
struct BarrierInfo {
  std::string name; ///< C name the target declares ("fullK", "emptyV", ...)
  Operand operand = Operand::K;
  int slots = 1;
  int64_t bytes = 0;
  int64_t arrivals = 0;
  /// A barrier of the `tile.work_queue` cell (one work unit, not a tile of `operand`): the full one completes a
  /// phase at the taking role's one arrival (bytes is the unit's 4), the empty one as an empty barrier does.
  bool workUnit = false;
};

/// A `tile.role`: `warps` warps of the block running its region with `regs` registers a thread; `computes`: the
/// region holds the tile math (a consumer), else it only moves tiles (a producer).
struct RoleInfo {
  std::string name;
  int warps = 0;
  int regs = 0;
  bool computes = false;
  /// Its warpgroups take turns issuing their asynchronous MMAs (tile.role's pingpong).
  bool pingpong = false;
};

/// The result of an asynchronous MMA that `tile.mma_wait` retires: the score tile of tile.qk or the accumulator of
/// tile.pv.
enum class MmaResult { Scores, Acc };

/// Register tiles are named by the CUDA printer after the IR's values (KernelPrinter::nameRegisters) and handed to
/// the target with each op: a score tile (`s` below: S from tile.qk through scale, score_mod and mask into the
/// softmax, which may leave P there in fp32), a probability tile (`p`: P rounded to the MMA's type, the A operand of
/// P·V) and a state.
/// The registers of an online-softmax state, named by the CUDA printer after the IR's values: the !tile.stats
/// values of one chain (tile.init_state or tile.state_load, then the softmax steps, the loops that carry them, the
/// state store) are the arrays `rowMax` and `rowSum`, the !tile.acc values of the same state the array `acc`, which
/// tile.finalize turns into O in place. The printer checks that each value is used once (the op that consumes it
/// takes over its registers), so one array stands for a whole chain.
struct StateNames {
  std::string acc;    ///< the accumulator, then O
  std::string rowMax; ///< the running max m of each row (log2 domain)
  std::string rowSum; ///< the running sum l of each row (this lane's part)
};

/// How the K/V loops pass a score's key coordinate to a variant function (scoreMod, mask).
enum class KeyArg { Kv, Clamped, Split };

/// Why a target cannot lay out a program's roles: what `role` (an index into the list, -1: the roles together) has,
/// and what the family needs instead. The generic printer reports it on that tile.role (or the tile.func).
struct RoleProblem {
  int role = -1;
  std::string has;   ///< "has 6 warps"
  std::string needs; ///< "lays roles out as whole warpgroups (setmaxnreg)"
};

// ==== The memory layer (passes/IR/TileMemoryOps.td), as TileTarget's memory-layer methods take it ====

/// Where a buffer of the memory layer lives.
enum class MemSpace { Tensor, Shared, Registers };
/// What it holds: a score tile (fp32), P (16-bit), an accumulator (fp32), a value a row, or row statistics.
enum class MemTile { Scores, Probabilities, Acc, Rows, Stats };
/// A `tile.tmem_buffer` (`column` in tensor memory) or `tile.smem_buffer` (`name`).
struct MemBufferInfo {
  std::string name;
  MemSpace space = MemSpace::Shared;
  MemTile tile = MemTile::Rows;
  int rows = 0, cols = 0;
  int column = 0;
};
/// A `tile.channel`: a full and an empty barrier of one slot, completed by these many arrivals (a role's or a
/// commit's).
struct ChannelInfo {
  std::string name;
  int64_t fullArrivals = 1, emptyArrivals = 1;
  /// `tile.pair_empty` (passes/IR/TileCtaPair.h): the empty barrier counts both CTAs' arrivals of a cluster pair, at
  /// the leader CTA's.
  bool pairEmpty = false;
};
/// What a role does with the memory layer: allocates (and frees) tensor memory, issues MMAs on buffers, moves
/// buffers with its threads (warp-collective tensor-memory accesses).
struct RoleMemoryInfo {
  bool allocates = false, issuesMma = false, accessesBuffers = false;
};
// ==== end of the memory layer's types ====

/// Names the generic printer declares in the kernel before any target code: the schedule's constants
/// (kBlockM, kBlockN, kHeadDim, kHeadDimV, kWarps, kThreads), the parameters `p` and the K/V tile index of
/// each loop. A target must not redeclare them.
///
/// A tile op a target does not print is an error of the generic printer, never text in the kernel: the methods that
/// return bool print nothing and return false for what their family does not do, and the printer then reports the op,
/// the schedule and the family (an MLIR diagnostic).
class TileTarget {
public:
  virtual ~TileTarget() = default;

  /// The device primitives printed ahead of the kernel.
  virtual std::string_view prelude() const = 0;
  /// The namespace the prelude's primitives live in ("sm80"); no generated name may take it.
  virtual std::string_view preludeNamespace() const = 0;
  // The prelude also defines the scalar functions the variant regions call where the target has a faster
  // instruction than the CUDA math library: `float tileTanh(float)` (math.tanh).
  /// Identifiers the target declares in kernel scope; SSA values are never named like them.
  virtual std::vector<std::string> reservedNames() const = 0;

  /// Kernel setup, after the schedule's constants: thread coordinates, shared-memory buffers and the copy
  /// routines of the operands in `copied` (the ones the IR copies with tile.copy_async).
  virtual void setup(CudaWriter &w, const std::vector<Operand> &copied) = 0;
  /// What depends on the block's tile (qTile, blockBatch, blockHead and the sequence view `p` are declared): after
  /// setup and setupRoles in a kernel whose blocks run one tile, at the start of each tile in a persistent one
  /// (tile.work_loop). Targets that declare everything in setup print nothing here.
  virtual void setupTile(CudaWriter &) {}

  /// `tile.copy_async` arriving on no barrier (cp.async groups): `tile` is the K/V tile index (empty for Q), `pred` a
  /// C condition (empty: always). False when the family copies only into ring slots that arrive on barriers.
  virtual bool copyAsync(CudaWriter &w, Operand operand, const std::string &tile, const std::string &pred) = 0;
  /// `tile.wait` on the tokens of copies of `operands` (sorted, distinct): copies complete in the order they
  /// started, and the waited ones have landed once at most `newerCopies` copies stay in flight (the fewest started
  /// after the newest waited copy on any path to the wait); then a block-wide barrier. False when the family waits on
  /// barriers only.
  virtual bool wait(CudaWriter &w, const std::vector<Operand> &operands, int64_t newerCopies) = 0;
  /// `tile.load`: the tile is in its shared-memory slot (tile j in slot j % stages); `tile` is its index (empty for
  /// Q).
  virtual void load(CudaWriter &w, Operand operand, const std::string &tile) = 0;

  /// `tile.load q` with `tile.rotary` (passes/IR/TileRotary.h), printed before `load`: rotates the Q tile where
  /// the wait left it, visible to every thread afterwards, with the kernel's rotaryOut (printRotaryFunctions,
  /// KvCacheCuda.h). Returns false when the target does not (the printer then refuses the program).
  virtual bool rotateQ(CudaWriter &, bool /*interleaved*/, bool /*perRow*/) { return false; }
  /// `tile.init_state`: declares the state `st` (m = -inf, l = 0, acc = 0).
  virtual void initState(CudaWriter &w, const StateNames &st) = 0;
  /// `tile.state_load` (a K/V-step program, KernelAbi.h's kvStep and state workspace): declares the state as
  /// initState does and, at p.kvStep > 0, reads its rows' m, l and acc that the previous step stored. Returns false
  /// when the target does not (the printer then refuses the program).
  virtual bool stateLoad(CudaWriter &, const StateNames &) { return false; }
  /// `tile.state_store`: writes the state's rows (< seqlen_q) to the workspace for the next step; the registers
  /// stay the state. Returns false when the target does not.
  virtual bool stateStore(CudaWriter &, const StateNames &) { return false; }
  /// `tile.qk` of Q and the K tile in slot `kSlot` into the score tile `scores`, which it declares in the current
  /// scope. `kSlot` is the index of the K tile's tile.slot: the tile index j in a pipeline that keeps tile j in slot
  /// j mod stages (fa2), the ring position in one whose roles walk a ring (fa3). The score tile is updated in place
  /// until the softmax.
  virtual void qk(CudaWriter &w, const std::string &kSlot, const std::string &scores) = 0;
  /// End of a K/V iteration whose loop carries scores: the next tile's scores `from` move into `to`, the loop's.
  virtual void carryScores(CudaWriter &w, const std::string &to, const std::string &from) = 0;
  /// `tile.scale`: the scores `s` times softmax_scale.
  virtual void scale(CudaWriter &w, const std::string &s) = 0;
  /// `tile.score_mod` with the variant's function `fn(score, b, h, q, kv, p)`; `kTile` locates the keys.
  /// `key`: how fn takes the key, kv = kvTile + kvStep (kvTile = kTile·kBlockN + the lane's first column, kvStep
  /// a constant once unrolled): KeyArg::Kv; KeyArg::Clamped, min(kv, seqlen_k - 1) (fn reads per-key inputs: a
  /// tile's padding keys, masked later, index inside the arrays); KeyArg::Split, kvTile and kvStep.
  virtual void scoreMod(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn,
                        KeyArg key) = 0;
  /// `tile.mask` with the variant's predicate `fn(b, h, q, key..., p)`, plus the seqlen_k bound; `key` as for
  /// scoreMod. `readsInputs`: fn reads variant inputs, so both tests are evaluated for every score (no branch).
  virtual void mask(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn, KeyArg key,
                    bool readsInputs) = 0;
  /// `tile.softmax_update`; `foldScale`: the exp2 multiplier is softmax_scale·log2(e), else log2(e);
  /// `rescaleThreshold` τ > 0: maxes move only when a row needs more than 2^τ of headroom (0: every tile).
  /// The scores are `s`, P goes to `p` (or stays in `s` until roundProbabilities), the row statistics are st.rowMax
  /// and st.rowSum.
  virtual void softmaxUpdate(CudaWriter &w, const StateNames &st, const std::string &s, const std::string &p,
                             bool foldScale, int rescaleThreshold) = 0;
  /// `tile.rescale`: st.acc *= alpha; `onlyWhenMoved`: its alpha comes from a softmax_update with a rescale
  /// threshold, and the multiply is skipped where that step kept every max.
  virtual void rescale(CudaWriter &w, const StateNames &st, bool onlyWhenMoved) = 0;
  /// `tile.pv`: st.acc += `p`·V of the V tile in slot `vSlot` (as qk's kSlot).
  virtual void pv(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vSlot) = 0;
  /// `tile.finalize`: O = acc / l in st.acc and the LSE rows; `sinkFn` is the variant's sink `fn(b, h, p)`, a
  /// logit that joins every row's softmax denominator (empty: no sink).
  virtual void finalize(CudaWriter &w, const StateNames &st, const std::string &sinkFn) = 0;
  /// `tile.store o` and `tile.store lse`. `stagedInQ`: `tile.store o ... through` the slot of Q's buffer (the
  /// schedule decided that Q's tile is dead here): O goes through that shared memory, each warp its own rows, and
  /// leaves in whole rows; else each thread stores its fragments directly.
  virtual void storeO(CudaWriter &w, const StateNames &st, bool stagedInQ) = 0;
  virtual void storeLse(CudaWriter &w) = 0;
  /// `tile.store_split` (split-KV, after `finalize` without a sink): with p.numSplits == 1 the sink `sinkFn(b, h,
  /// p)` (empty: none) joins O and LSE and both are stored as storeO/storeLse store them; else this split's fp32
  /// O and its LSE go to the workspace (p.oAccum, p.lseAccum at split `split`, KernelAbi.h). False when the family
  /// does not split key ranges.
  virtual bool storeSplit(CudaWriter &w, const StateNames &st, const std::string &sinkFn, bool stagedInQ) = 0;
  /// The body of the combine kernel of a split-KV program: query row `q` (< p.seqlenQ) of head h in batch entry b
  /// (names declared by the printer, with `p` the sequence's view and `warp`/`lane` the thread's place) is merged
  /// from its p.numSplits partials, the sink `sinkFn` (empty: none) joined once, and written to O and LSE. One
  /// row a block: its `kWarps` warps share the row's splits. False when the family does not split key ranges.
  virtual bool combineRow(CudaWriter &w, const std::string &sinkFn) = 0;

  // ---- The asynchronous protocol (roles, barriers, copies into ring slots, asynchronous MMAs). Only targets whose
  // family says asyncProtocol() get these calls; the generic printer refuses such IR for the others, so the
  // defaults are never reached.

  /// Extra kernel parameters after `params` (e.g. TMA descriptors), as C text starting with ", "; empty: none.
  virtual std::string extraKernelParams() const { return {}; }
  /// A kernel the module launches before the attention kernel to lay an operand out for it (the sm90 family's e4m3
  /// Vᵀ images, Fp8Abi.h): prints it as `entry` (taking `const FlashtileFwdParams params, const FlashtileFp8Params
  /// fp8`; one block per (key tile, K/V head, sequence)) and returns its threads a block; 0, printing nothing, when the
  /// kernel needs none.
  virtual int printOperandPrepass(CudaWriter &, const std::string &) { return 0; }
  /// Whether the kernel's second parameter is the TMA descriptors of Q, K and V (boxes of a Q tile's and a K/V
  /// tile's rows, the whole head dim, swizzled over tensorMapSwizzleBytes()), which the launch plan then asks the
  /// runtime for.
  virtual bool takesTensorMaps() const { return false; }
  /// The swizzle span (32, 64 or 128 bytes) of those descriptors' boxes: the layout the kernel reads its tiles in.
  virtual int tensorMapSwizzleBytes() const { return 128; }
  /// Why the target cannot lay out `roles` (in IR order), or nothing when it can; asked before printing.
  virtual std::optional<RoleProblem> checkRoles(const std::vector<RoleInfo> &) const { return std::nullopt; }
  /// After setup, for a program with roles: declares and initializes `barriers` and lays out `roles` (in IR order)
  /// over the block's warps; checkRoles(roles) passed.
  virtual void setupRoles(CudaWriter &, const std::vector<RoleInfo> &, const std::vector<BarrierInfo> &) {}
  /// Opens and closes role `role` (an index into setupRoles' list): the threads of other roles skip its region.
  virtual void openRole(CudaWriter &, int) {}
  virtual void closeRole(CudaWriter &, int) {}
  /// `tile.barrier_wait` / `tile.barrier_arrive` on ring position `position` (slot position mod slots, round
  /// position div slots) of barrier `barrier` (an index into setupRoles' list).
  virtual void barrierWait(CudaWriter &, int, const std::string &) {}
  virtual void barrierArrive(CudaWriter &, int, const std::string &) {}
  /// `tile.copy_async ... arrive %full[position]`: copies `operand`'s tile `tile` (empty for Q) into the slot of
  /// ring position `position`; its bytes complete the phase of barrier `barrier`.
  virtual void copyToSlot(CudaWriter &, Operand, const std::string &, const std::string &, int) {}
  /// A dynamic `tile.work_loop`: the taking role (its one thread) writes work unit `unit` (an int expression) to the
  /// work queue's cell and arrives on its full barrier `barrier`; the other roles wait for ring position
  /// `position` of that barrier and declare `const int <unit> = ` the cell. The taking role waited for the queue's
  /// empty barrier (barrierWait) before. False (the default) when the family has no work queue.
  virtual bool publishWorkUnit(CudaWriter &, int, const std::string &) { return false; }
  virtual bool receiveWorkUnit(CudaWriter &, int, const std::string &, const std::string &) { return false; }
  /// Around the asynchronous MMAs one iteration of a pingpong role issues (`begin`: before the first, else after
  /// the last): the warpgroup waits for its turn, then hands the turn to the next one.
  virtual void mmaTurn(CudaWriter &, bool) {}
  /// `tile.mma_wait` of the asynchronous MMA whose result is `result`, in the registers `tile` (the scores, or the
  /// accumulator of a P·V whose register operand was `operand`); MMAs complete in the order they were issued, and
  /// `newerInFlight` issued after it may stay in flight. `afterUnmaskedSoftmax`: the wait follows a softmax update in
  /// a loop body without a mask (an interior segment's P·V wait).
  virtual void mmaWait(CudaWriter &, MmaResult /*result*/, const std::string & /*tile*/,
                       const std::string & /*operand*/, int /*newerInFlight*/, bool /*afterUnmaskedSoftmax*/) {}
  /// Targets whose softmaxUpdate leaves P unrounded in the score registers round it here: right before the tile.pv
  /// of the same iteration (`carried` false: into registers declared here), or at the end of the iteration that
  /// computed it when a loop carries P to the next iteration's tile.pv (`carried` true: into the registers
  /// declareCarriedProbabilities declared before the loops). The default: nothing (softmaxUpdate rounded P).
  /// The scores `s` are rounded into `p`.
  virtual void roundProbabilities(CudaWriter &, const std::string & /*s*/, const std::string & /*p*/, bool) {}
  /// The registers `p` of a P that K/V loops carry (its initial value, a constant tile, is never read). False (the
  /// default) when the family keeps P in the registers of the iteration that computed it.
  virtual bool declareCarriedProbabilities(CudaWriter &, const std::string & /*p*/) { return false; }
  // ==== The memory layer (passes/IR/TileMemoryOps.td): tensor memory, buffers of named tiles, channels between
  // roles, MMAs on buffers completed by commits. Every method prints nothing and returns false where the family does
  // not print the layer (the generic printer then reports the op). ====

  /// Before checkRoles and setupRoles, for a program written with the memory layer: the tensor memory it declares
  /// (`tmemColumns`, 0: none), its buffers and channels (IR order; the indices the calls below take) and what each
  /// role (setupRoles' order) does with them.
  virtual bool memoryLayer(int /*tmemColumns*/, const std::vector<MemBufferInfo> &, const std::vector<ChannelInfo> &,
                           const std::vector<RoleMemoryInfo> &) {
    return false;
  }
  /// `tile.tmem_alloc` / `tile.tmem_free` in the calling role.
  virtual bool tmemAlloc(CudaWriter &) { return false; }
  virtual bool tmemFree(CudaWriter &) { return false; }
  /// `tile.barrier_wait` / `tile.barrier_arrive` on channel `channel`'s full (`full`) or empty barrier at position
  /// `position` (a full wait at n: phase n completed; an empty wait at n: phase n - 1 completed, position 0 passes).
  /// The calling role arrives once.
  virtual bool channelWait(CudaWriter &, int /*channel*/, bool /*full*/, const std::string & /*position*/) {
    return false;
  }
  virtual bool channelArrive(CudaWriter &, int /*channel*/, bool /*full*/, const std::string & /*position*/) {
    return false;
  }
  /// `tile.mma_commit`: one arrival on channel `channel`'s full barrier (when `ringBarrier` < 0), or on ring barrier
  /// `ringBarrier` (setupRoles' list) at `position`, once every MMA the calling thread issued completed.
  virtual bool mmaCommit(CudaWriter &, int /*channel*/, int /*ringBarrier*/, const std::string & /*position*/) {
    return false;
  }
  /// `tile.mma_qk`: S (tensor buffer `s`) = Q's rows [qRowOffset, + rows of S) · Kᵀ of the K tile in slot `kSlot`.
  virtual bool mmaQk(CudaWriter &, const std::string & /*kSlot*/, int /*s*/, int64_t /*qRowOffset*/) { return false; }
  /// `tile.mma_pv`: O (tensor buffer `o`) += P (tensor buffer `p`) · V of the V tile in slot `vSlot`.
  virtual bool mmaPv(CudaWriter &, int /*p*/, const std::string & /*vSlot*/, int /*o*/) { return false; }
  /// `tile.mem_load` of a score tile from buffer `buffer` into the registers `scores`, which it declares.
  virtual bool loadScores(CudaWriter &, int /*buffer*/, const std::string & /*scores*/) { return false; }
  /// `tile.init_stats`: declares the registers of row statistics st.rowMax and st.rowSum (m = -inf, l = 0).
  virtual bool initStats(CudaWriter &, const StateNames &) { return false; }
  /// `tile.mem_store` of the rescale factors of the softmax step just printed (softmaxUpdate's alpha) into `buffer`.
  virtual bool storeAlpha(CudaWriter &, int /*buffer*/) { return false; }
  /// `tile.mem_store` of P: the scores `s` the softmax step left P in, rounded into `p` and written to `buffer`.
  virtual bool storeProbabilities(CudaWriter &, int /*buffer*/, const std::string & /*s*/, const std::string & /*p*/) {
    return false;
  }
  /// `tile.mem_store` of row statistics st into `buffer` / `tile.mem_load` of them from it into st, declared there.
  virtual bool storeStats(CudaWriter &, int /*buffer*/, const StateNames &) { return false; }
  virtual bool loadStats(CudaWriter &, int /*buffer*/, const StateNames &) { return false; }
  /// `tile.mem_store` of `tile.init_acc` into `buffer`: the accumulator zeroed where it lives.
  virtual bool zeroAcc(CudaWriter &, int /*buffer*/) { return false; }
  /// `tile.mem_load` of a row vector (a rescale factor a row) from `buffer` into `rows`, which it declares.
  virtual bool loadRows(CudaWriter &, int /*buffer*/, const std::string & /*rows*/) { return false; }
  /// `tile.rescale` of the accumulator in buffer `acc` by the rows `alpha` (loadRows'), written back in place
  /// (`tile.mem_load`, `tile.rescale`, `tile.mem_store` into the same buffer); `onlyWhenMoved`: a rescale threshold
  /// made alpha exactly 1 where a row's max did not move.
  virtual bool rescaleInPlace(CudaWriter &, int /*acc*/, const std::string & /*alpha*/, bool /*onlyWhenMoved*/) {
    return false;
  }
  /// `tile.finalize` of the statistics st (loadStats') and the accumulator in buffer `acc`, with the variant's sink
  /// `sinkFn` (empty: none); then the stores of its O and LSE, the block's query rows [rowOffset, + the
  /// accumulator's rows).
  virtual bool finalizeBuffer(CudaWriter &, const StateNames &, int /*acc*/, const std::string & /*sinkFn*/) {
    return false;
  }
  virtual bool storeOFromBuffer(CudaWriter &, int /*acc*/, int64_t /*rowOffset*/) { return false; }
  virtual bool storeLseRows(CudaWriter &, int /*acc*/, int64_t /*rowOffset*/) { return false; }
  // ==== end of the memory layer's methods ====
};

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_TILETARGET_H
