//===- KernelPrinter.h - the forward printer, shared by its files ---------===//
//
// Private to codegen/common: the KernelPrinter class that CudaEmitter.cpp (checks, naming, the variant functions,
// scalar code), CudaFrame.cpp (the kernel's frame: roles, the sequence, work loops, the combine kernel, the K/V
// loops) and CudaOps.cpp (the tile ops by family: asynchronous pieces, loads and stores, GEMMs and the variant's
// math, the online softmax, the memory layer) define between them, and the helpers they share. emitCuda (CudaEmitter.h) is the entry point.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_KERNELPRINTER_H
#define FLASHTILE_CODEGEN_COMMON_KERNELPRINTER_H

#include "codegen/common/CudaEmitter.h"
#include "codegen/common/KernelAbiText.h"
#include "codegen/common/KvCacheCuda.h"
#include "codegen/common/LaunchPlanner.h"
#include "codegen/common/ScalarEmitter.h"
#include "codegen/common/TargetRegistry.h"
#include "codegen/common/TileTarget.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileCtaPair.h"
#include "passes/IR/TileKvCache.h"
#include "passes/IR/TileMemory.h"
#include "passes/IR/TileRotary.h"
#include "passes/IR/TileNames.h"
#include "passes/IR/TilePacking.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Version.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <deque>
#include <limits>

namespace flashtile::codegen::kernel {

using namespace mlir;
using namespace flashtile::tile;

constexpr int kWarpSize = 32;
/// The split-KV combine kernel: a block merges one query row, its warps sharing the row's splits (a decode row's
/// partials are a few KiB: the combine is latency-bound, so a row gets more loads in flight, not fewer blocks).
constexpr int kCombineRowsPerBlock = 1, kCombineWarps = 4;

/// `tile.dim a, b`, the dims spelled as the IR writes them: the comments that say which tile.dim a kernel value is.
std::string tileDimWords(std::initializer_list<Dim> dims);
/// `text` for a `//` comment of the generated source: bytes outside printable ASCII, and the backslash (which
/// would continue the comment onto the next line), as \xNN, so that no name can end a comment and become code.
std::string commentSafe(StringRef text);
/// The targets' name (TileTarget.h, MLIR-free) of an operand of the IR.
Operand operandOf(tile::Operand operand);
/// How many copies started after the copy (or copies) `token` names, on every path to `point` (the wait's count).
FailureOr<int64_t> copiesSince(Value token, Operation *point);
/// The tile.copy_async ops a token stands for (through the K/V loops that carry it).
SmallVector<CopyAsyncOp> copiesBehind(Value token);

class KernelPrinter {
public:
  KernelPrinter(FuncOp func, TileTarget &target, ScalarHelpers &helpers, bool asyncProtocol)
      : func(func), target(target), helpers(helpers), scalars(w, names, helpers, func), asyncProtocol(asyncProtocol) {}

  /// The variant's score_mod, mask and sink regions as __device__ functions (identical regions share one).
  LogicalResult printVariantFunctions(CudaWriter &out);
  /// The kernel itself.
  LogicalResult printKernel(StringRef entry, const KernelShape &shape);
  /// The thread block's sequence: `p`, the view of the kernel's `params` the rest of the kernel reads.
  void printSequence();
  /// `p` for batch entry blockBatch (varlen: its sequence's base pointers and lengths).
  void printSequenceView();
  /// A persistent block's loop over its work tiles (tile.work_loop), each decoded into the tile printSequence
  /// declares for a block that runs one.
  LogicalResult printWorkLoop(WorkLoopOp loop);
  /// The work tile `work` of a persistent kernel as qTile, blockBatch and blockHead, in the launch's order.
  void printWorkTile(const std::string &work);
  /// The unit of tile `count` of a dynamic tile.work_loop (taken from the launch's counter, or received from the
  /// taking role through the work queue) as qTile, blockBatch and blockHead; the loop ends past the last unit.
  LogicalResult printDynamicWorkTile(WorkLoopOp loop, const std::string &count);
  /// p.splitBegin/splitEnd of a kernel that does not split its keys, when the program reads them.
  void printUnsplit();
  /// Whether the kernel is persistent (tile.work_loop): its blocks decode their tiles in the loop.
  bool persistent() {
    return func.walk([](WorkLoopOp) { return WalkResult::interrupt(); }).wasInterrupted();
  }
  /// Split-KV programs (tile.store_split): the kernel that merges each row's splits, entry `entry`.
  LogicalResult printCombineKernel(StringRef entry);
  /// Whether the program splits its key range (split-KV: it stores with tile.store_split).
  bool splitKv() { return !func.getBody().getOps<StoreSplitOp>().empty(); }
  /// Whether a block's rows are the query heads of one K/V head x its query rows (GQA packing).
  bool packed() { return func->hasAttr(kPackQueryHeadsAttr); }
  const std::string &kernel() const { return w.str(); }
  /// The function printVariantFunctions printed for each hook op.
  const llvm::DenseMap<Operation *, std::string> &variantFunctions() const { return functionOf; }

private:
  void assignNames();
  LogicalResult printBlock(Block &block);
  /// One op: scalar code here, tile ops by family below (each family's ops, and only those, reach its printer).
  LogicalResult printOp(Operation *op);
  /// The K/V loops (their rules and segments), a persistent block's work loop, and what a loop carries (yield).
  LogicalResult printLoops(Operation *op);
  /// The asynchronous pieces: roles, barrier waits and arrivals, copies, waits on copies and MMAs.
  LogicalResult printAsync(Operation *op);
  LogicalResult printMmaWait(MmaWaitOp wait);
  /// Tiles in and out: loads, the stores of O and LSE (whole or split), the state between K/V steps.
  LogicalResult printLoadStore(Operation *op);
  /// The GEMMs (Q·Kᵀ, P·V) and the variant's math on scores (scale, score_mod, mask).
  LogicalResult printMath(Operation *op);
  /// The online softmax: its state, its steps, rescaling and finalize.
  LogicalResult printSoftmax(Operation *op);
  /// A constant tile: the initial P a K/V loop carries (asynchronous MMAs only).
  LogicalResult printConstantTile(arith::ConstantOp constant);
  /// The C expression of `v`, or "" for a null value (an optional operand).
  FailureOr<std::string> optionalOperand(Value v, Operation *user);
  /// `op`, which the target's family does not print (`what`: what it does): an error naming the op, the schedule and
  /// the family, instead of text in the kernel.
  LogicalResult notPrinted(Operation *op, const Twine &what);
  /// "the 'sm80' instruction family that schedule 'fa2' is lowered to", for errors.
  std::string loweredTo();
  LogicalResult printKvRange(KvRangeOp range);
  LogicalResult printKvLoop(KvLoopOp loop);
  LogicalResult printKvWalk(KvWalkOp walk);
  /// Whether `mma` (an asynchronous tile.qk / tile.pv) opens (`first`) or closes the MMAs its block issues, in a
  /// role whose warpgroups take turns (pingpong).
  bool mmaTurnEdge(Operation *mma, bool first);
  /// Collects the program's roles and barriers (IR order) and names the barriers.
  void collectRoles();
  /// Whether the target lays out the program's roles (TileTarget::checkRoles): an error on the role at fault, or the
  /// function, otherwise.
  LogicalResult checkRoles();
  /// The C expression of the index of the tile.slot that `load` reads (fa2: its tile index).
  FailureOr<std::string> slotOf(LoadOp load, Operation *user);
  /// The C expression of `v`, safe as an operand of any operator.
  FailureOr<std::string> operand(Value v, Operation *user);
  /// The index expression of the K tile a score tile was computed from.
  FailureOr<std::string> kTileOf(Value scores, Operation *user);
  /// A copy or load of tile `index` through `slot`: targets address tile j's slot as j mod stages, so the slot must
  /// be tile.slot of the same index in a buffer of the schedule's stages (Q: one slot).
  LogicalResult checkSlot(Operation *op, Value slot, Value index);
  /// Where `tile.store o` / `tile.store_split` stages O (`through %slot`): true for the slot of Q's one-slot buffer,
  /// false without staging; an error for any other slot, or for packed rows (stored row by row to their heads).
  FailureOr<bool> stagedInQ(Operation *store, Value staging);
  /// Prints `region` as `returnType base(args..., const FlashtileSequence &p)` (args[0] may be a float
  /// score; the others are int coordinates) unless an identical function exists; returns its name.
  /// `outs`: a region that yields several values gives them through reference parameters of these names, after
  /// `p`, and returnType is void.
  FailureOr<std::string> variantFunction(Operation *op, Region &body, StringRef base, StringRef returnType,
                                         ArrayRef<StringRef> args, CudaWriter &out, ArrayRef<StringRef> outs = {});

  FuncOp func;
  TileTarget &target;
  ScalarHelpers &helpers;
  CudaWriter w;
  NameScopes names;
  ScalarEmitter scalars;
  NameScopes functionNames;
  llvm::DenseMap<Operation *, std::string> functionOf; ///< score_mod / mask op -> its function
  llvm::StringMap<std::string> functionByText;         ///< printed body -> function name
  bool rowsDeclared = false;
  bool boundsCommented = false;
  /// The target's family runs roles, barriers, ring slots and asynchronous MMAs (TargetFamily::asyncProtocol).
  bool asyncProtocol = false;
  std::vector<RoleInfo> roles;
  std::vector<BarrierInfo> barriers;
  llvm::DenseMap<Operation *, int> roleIndex;
  llvm::DenseMap<Value, int> barrierIndex;
  /// The memory layer: tensor memory's columns (0: none), the buffers and channels (TileTarget's lists) and what each
  /// role does with them.
  int tmemColumns = 0;
  std::vector<MemBufferInfo> memBuffers;
  std::vector<ChannelInfo> channels;
  std::vector<RoleMemoryInfo> roleMemory;
  llvm::DenseMap<Value, int> memBufferIndex;
  llvm::DenseMap<Value, std::pair<int, bool>> channelOf; ///< a channel's barrier -> (channel, full)
  /// A registers buffer of row statistics -> the registers of the state stored in it (one chain a buffer).
  llvm::DenseMap<Value, const StateNames *> bufferState;
  /// Row vectors read from a buffer (tile.mem_load) -> their registers.
  llvm::DenseMap<Value, std::string> rowsOf;
  bool usesMemoryLayer() const { return tmemColumns > 0 || !memBuffers.empty() || !channels.empty(); }
  /// The memory layer's ops (MMAs on buffers, commits, tensor memory, threads' loads and stores of buffers).
  LogicalResult printMemory(Operation *op);
  /// tile.mem_load / tile.mem_store (printMemory's): what each reads or writes, by the buffer's memory space and the
  /// value's kind (scores, row statistics, a row's values, P, rescale factors, a zeroed or rescaled accumulator).
  LogicalResult printMemLoad(MemLoadOp load);
  LogicalResult printMemStore(MemStoreOp store);
  /// The buffer `v` (a tile.tmem_buffer or tile.smem_buffer) is, or an error at `user`.
  FailureOr<int> memBuffer(Value v, Operation *user);
  /// The tensor buffer a memory-layer accumulator (tile.mem_load of a buffer, tile.rescale of one) lives in, or -1.
  int accBuffer(Value acc);
  /// The registers of each !tile.stats and !tile.acc value (and of O, which finalize computes in the accumulator's),
  /// one StateNames a state: named where tile.init_state or tile.state_load makes it, then passed along its chain.
  std::deque<StateNames> stateNames;
  llvm::DenseMap<Value, const StateNames *> stateOf;
  /// The registers of each score and probability tile: a tile.qk's scores and what scale, score_mod and mask make of
  /// them, in place; the scores a loop carries to its next iteration in registers of their own until the iteration
  /// ends (carryScores); P in its own.
  llvm::DenseMap<Value, std::string> tileOf;
  void nameRegisters();
  /// The registers of the state `v` belongs to; an error at `user` if the printer did not name it.
  FailureOr<const StateNames *> state(Value v, Operation *user);
  /// The registers of the score or probability tile `v`; an error at `user` if the printer did not name it.
  FailureOr<std::string> registers(Value v, Operation *user);
};

} // namespace flashtile::codegen::kernel

#endif // FLASHTILE_CODEGEN_COMMON_KERNELPRINTER_H
