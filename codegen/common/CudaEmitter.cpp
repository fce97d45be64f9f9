//===- CudaEmitter.cpp - scheduled tile IR to CUDA C++ --------------------===//
//
// The generic printer: checks that the IR is ready to print, names values, prints the scalar code, the
// KV-range rules, the K/V loop segments and the variant's regions (as __device__ functions), and hands every
// tile op to the target the IR was lowered to (`#tile.target`'s isa, looked up in the target registry); the memory
// layer's ops (tensor memory, buffers, channels, MMAs completed by commits) through TileTarget's memory-layer methods,
// for the families with the asynchronous protocol. The state,
// score and probability tiles live in registers that the target updates in place, so the printer first checks that the
// IR uses each of them once. This file holds the checks, the naming, the variant functions and the scalar ops; the
// module's entry point (emitCuda) is EmitModule.cpp's, the kernel's frame and loops CudaFrame.cpp's, the tile ops
// CudaOps.cpp's (the class they share: KernelPrinter.h).
//===----------------------------------------------------------------------===//
#include "codegen/common/CudaEmitter.h"
#include "codegen/common/Fp8AbiText.h"
#include "codegen/common/KernelPrinter.h"
#include "codegen/common/KernelAbiText.h"
#include "codegen/common/KvCacheCuda.h"
#include "codegen/common/LaunchPlanner.h"
#include "codegen/common/PositionsCuda.h"
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

using namespace mlir;
using namespace flashtile::tile;

// The IR's shape classes are the runtime's (kShapeClasses), in the same order: the runtime picks a call's class and
// finds the kernel of that name, which emitCuda writes from the IR's. The names are compared by a unit test
// (ShapeClassNamesAreTheRuntimes).
static_assert(getMaxEnumValForShapeClass() + 1 == flashtile::kShapeClasses.size(),
              "tile::ShapeClass and the runtime's kShapeClasses list different classes");

namespace flashtile::codegen {
namespace kernel {

/// `tile.dim a, b`, the dims spelled as the IR writes them: the comments that say which tile.dim a kernel value is.
std::string tileDimWords(std::initializer_list<Dim> dims) {
  std::string text = "tile.dim ";
  for (const Dim &dim : dims)
    text += (&dim == dims.begin() ? "" : ", ") + stringifyDim(dim).str();
  return text;
}

/// `text` for a `//` comment of the generated source: bytes outside printable ASCII, and the backslash (which
/// would continue the comment onto the next line), as \xNN, so that no name can end a comment and become code.
std::string commentSafe(StringRef text) {
  std::string out;
  for (char c : text) {
    if (c >= ' ' && c <= '~' && c != '\\') {
      out += c;
      continue;
    }
    out += "\\x";
    out += llvm::hexdigit(static_cast<unsigned char>(c) >> 4, /*LowerCase=*/true);
    out += llvm::hexdigit(static_cast<unsigned char>(c) & 0xf, /*LowerCase=*/true);
  }
  return out;
}

} // namespace kernel

using namespace kernel;

namespace {


/// `s` with every character outside [A-Za-z0-9_] replaced by '_': usable in a C identifier.
std::string sanitize(StringRef s) {
  std::string out = s.str();
  for (char &c : out)
    if (!llvm::isAlnum(c) && c != '_')
      c = '_';
  return out;
}



/// "tail_boundary" -> "tailBoundary".
std::string camel(StringRef snake) {
  std::string out;
  bool upper = false;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? llvm::toUpper(c) : c;
    upper = false;
  }
  return out;
}

/// The IR must be scheduled, pipelined and lowered to a registered instruction family.
FailureOr<const TargetFamily *> checkReady(FuncOp func, bool pipelined = true) {
  ScheduleAttr schedule = func.getScheduleAttr();
  if (!schedule)
    return func.emitOpError() << "is not scheduled; run the schedule's passes (tile-apply-schedule, "
                                 "tile-split-boundary, its pipeline pass, tile-lower-to-target) before emitting CUDA";
  if (pipelined && !func.getBody().walk([](CopyAsyncOp) { return WalkResult::interrupt(); }).wasInterrupted())
    return func.emitOpError() << "is not pipelined (no tile.copy_async); run the schedule's pipeline pass before "
                                 "emitting CUDA (its pipeline: Schedule::buildPipeline)";
  // Names are printed into the kernel's source and its manifest; IR built without the verifier must not slip one
  // past it.
  if (!isVariantName(func.getVariant()))
    return func.emitOpError() << "variant name '" << commentSafe(func.getVariant())
                              << "' is not accepted: [A-Za-z_] then [A-Za-z0-9_.-], at most " << kMaxNameLength
                              << " characters";
  for (Attribute p : func.getParams())
    if (!isIdentifierName(cast<StringAttr>(p).getValue()))
      return func.emitOpError() << "parameter name '" << commentSafe(cast<StringAttr>(p).getValue())
                                << "' is not an identifier";
  for (Attribute a : func.getInputs())
    if (!isIdentifierName(cast<InputAttr>(a).getName()))
      return func.emitOpError() << "input name '" << commentSafe(cast<InputAttr>(a).getName())
                                << "' is not an identifier";
  TargetAttr target = func.getTargetAttr();
  if (!target)
    return func.emitOpError() << "has no #tile.target; run tile-lower-to-target before emitting CUDA";
  const TargetFamily *family = lookupTarget(target.getIsa());
  if (!family) {
    std::string known;
    for (const std::string &name : targetNames())
      known += (known.empty() ? "" : ", ") + name;
    return func.emitOpError() << "targets the '" << target.getIsa()
                              << "' instruction family, which is not registered; registered: " << known;
  }
  return family;
}

/// Register tiles are updated in place: row statistics, an accumulator, a score or a probability value may be used
/// once (the op that consumes it takes over its registers), and a K/V loop computes one score tile per iteration.
LogicalResult checkInPlace(FuncOp func, bool asyncProtocol) {
  auto usedOnce = [](Value v, StringRef what) -> LogicalResult {
    if (v.hasOneUse())
      return success();
    Operation *where = v.getDefiningOp() ? v.getDefiningOp() : v.getParentBlock()->getParentOp();
    return where->emitOpError() << "produces " << what << " used " << std::distance(v.use_begin(), v.use_end())
                                << " times; the CUDA printer keeps it in registers updated in place, so it must "
                                   "be used exactly once";
  };
  WalkResult result = func.walk([&](Operation *op) -> WalkResult {
    if (!asyncProtocol && isa<TmemOp, SmemBufferOp, ChannelOp>(op)) {
      op->emitOpError() << "belongs to the memory layer (tensor memory, buffers, channels, MMAs completed by a "
                           "commit), which the target's family does not print: it runs no roles";
      return WalkResult::interrupt();
    }
    if (!asyncProtocol && ((isa<QkOp>(op) && cast<QkOp>(op).getToken()) || (isa<PvOp>(op) && cast<PvOp>(op).getToken()))) {
      op->emitOpError() << "is an asynchronous MMA (it returns a token); the target's family issues synchronous MMAs "
                           "(mma.sync): lower the schedule to a family that runs the asynchronous protocol";
      return WalkResult::interrupt();
    }
    if (!asyncProtocol && isa<RoleOp, BarrierOp, MmaWaitOp, KvWalkOp, WorkLoopOp, WorkQueueOp>(op)) {
      op->emitOpError() << "belongs to the asynchronous protocol (roles, barriers, asynchronous MMAs), which the "
                           "target's family does not run; it runs cp.async-style copies and tile.wait";
      return WalkResult::interrupt();
    }
    for (Value v : op->getResults()) {
      // The memory layer's accumulators live in their buffers (tile.init_acc, tile.mem_load, tile.rescale of one).
      bool memoryLayerAcc = asyncProtocol && isa<InitAccOp, MemLoadOp, RescaleOp>(op);
      if (auto acc = dyn_cast<AccType>(v.getType()); acc && acc.getSpace() != MemorySpace::Registers && !memoryLayerAcc) {
        op->emitOpError() << "keeps the accumulator in " << memorySpaceName(acc.getSpace())
                          << " memory; the CUDA printer's targets keep the whole state in registers";
        return WalkResult::interrupt();
      }
      if (isa<StatsType>(v.getType()) && failed(usedOnce(v, "row statistics")))
        return WalkResult::interrupt();
      if (isa<AccType>(v.getType()) && failed(usedOnce(v, "an accumulator")))
        return WalkResult::interrupt();
      if (isa<QkOp, ScaleOp, ScoreModOp, MaskOp, SoftmaxUpdateOp, FinalizeOp>(op) &&
          failed(usedOnce(v, "a register tile")))
        return WalkResult::interrupt();
    }
    if (auto loop = dyn_cast<KvLoopOp>(op)) {
      if (failed(usedOnce(loop.getStatsArg(), "row statistics")) || failed(usedOnce(loop.getAccArg(), "an accumulator")))
        return WalkResult::interrupt();
      // Carried tiles are the scores of the loop's own tile j: "score" in the kernel, refilled from the
      // "scoreNext" of the iteration before (or the prologue's Q·Kᵀ).
      auto yield = cast<YieldOp>(loop.getBody().front().getTerminator());
      // P (a 16-bit tile) carried to the next iteration's asynchronous P·V: from a constant or the loop before
      // in, this iteration's softmax (or itself) out, read by one tile.pv.
      auto isP = [](Value v) {
        auto type = dyn_cast<RankedTensorType>(v.getType());
        return type && !type.getElementType().isF32();
      };
      for (auto [arg, init, yielded] : llvm::zip(loop.getCarriedArgs(), loop.getCarried(),
                                                 cast<YieldOp>(loop.getBody().front().getTerminator())
                                                     .getValues()
                                                     .drop_front(2))) {
        if (!isP(init))
          continue;
        bool initOk = init.getDefiningOp<arith::ConstantOp>() || isa_and_nonnull<KvLoopOp>(init.getDefiningOp());
        bool yieldOk = yielded == arg || (yielded.getDefiningOp<SoftmaxUpdateOp>() &&
                                          yielded.getParentBlock() == &loop.getBody().front());
        int64_t pvs = llvm::count_if(arg.getUsers(), [](Operation *user) { return isa<PvOp>(user); });
        bool usesOk = pvs <= 1 && llvm::all_of(arg.getUsers(), [](Operation *u) { return isa<PvOp, YieldOp>(u); });
        if (!asyncProtocol || !initOk || !yieldOk || !usesOk) {
          loop.emitOpError() << "carries P in a way the CUDA printer cannot keep in registers: on a target with "
                                "asynchronous MMAs a loop carries P from a constant or the loop before, out of its "
                                "softmax, into one tile.pv";
          return WalkResult::interrupt();
        }
      }
      auto carriesTile = [&](Value v) { return isa<RankedTensorType>(v.getType()) && !isP(v); };
      int64_t tiles = llvm::count_if(loop.getCarried(), carriesTile);
      for (auto [arg, init, yielded, result] : llvm::zip(loop.getCarriedArgs(), loop.getCarried(),
                                                         yield.getValues().drop_front(2), loop.getCarriedResults())) {
        if (!carriesTile(init))
          continue; // a token: no registers
        auto fromQk = [](Value v) { return v.getDefiningOp<QkOp>() && v.hasOneUse(); };
        auto fromLoop = [](Value v) { return isa_and_nonnull<KvLoopOp>(v.getDefiningOp()) && v.hasOneUse(); };
        if (tiles != 1 || !(fromQk(init) || fromLoop(init)) || !fromQk(yielded) ||
            yielded.getParentBlock() != &loop.getBody().front() || failed(usedOnce(arg, "a register tile")) ||
            !(result.use_empty() || (result.hasOneUse() && isa<KvLoopOp>(*result.user_begin())))) {
          loop.emitOpError() << "carries a tile the CUDA printer cannot keep in registers; it carries one score "
                                "tile: from a tile.qk (or the previous loop) in, this iteration's tile.qk out";
          return WalkResult::interrupt();
        }
      }
      auto qks = loop.getBody().front().getOps<QkOp>();
      auto updates = loop.getBody().front().getOps<SoftmaxUpdateOp>();
      if (std::distance(qks.begin(), qks.end()) > 1 || std::distance(updates.begin(), updates.end()) > 1) {
        loop.emitOpError() << "computes more than one score tile per iteration; the CUDA printer keeps one";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

/// Whether a score_mod or mask region reads a variant input at an index computed from its key coordinate kv (its
/// last argument).
bool readsPerKeyInput(Region &region) {
  Value kv = region.front().getArguments().back();
  return region
      .walk([&](InputOp input) {
        bool perKey = llvm::any_of(input->getOperands(), [&](Value v) { return ScalarEmitter::dependsOn(v, kv); });
        return perKey ? WalkResult::interrupt() : WalkResult::advance();
      })
      .wasInterrupted();
}

} // namespace

using namespace kernel;

KeyArg keyArgOf(Region &region) {
  if (readsPerKeyInput(region))
    return KeyArg::Clamped;
  Value kv = region.front().getArguments().back();
  bool floatKey = region
                      .walk([&](Operation *op) {
                        Value a;
                        bool keyFirst, abs;
                        return ScalarEmitter::floatOfKey(op, kv, a, keyFirst, abs) ? WalkResult::interrupt()
                                                                                   : WalkResult::advance();
                      })
                      .wasInterrupted();
  return floatKey ? KeyArg::Split : KeyArg::Kv;
}

namespace kernel {

/// The targets' name (TileTarget.h, MLIR-free) of an operand of the IR.
Operand operandOf(tile::Operand operand) {
  switch (operand) {
  case tile::Operand::Q:
    return Operand::Q;
  case tile::Operand::K:
    return Operand::K;
  case tile::Operand::V:
    return Operand::V;
  default:
    break;
  }
  llvm_unreachable("an operand the forward's kernels do not read (the program kind's verifier)");
}


//===----------------------------------------------------------------------===//
// Tokens: which copies a wait waits for, and how many copies started after them
//===----------------------------------------------------------------------===//

/// Copies started in `block` strictly between `from` (null: the block's start) and `to` (null: its end). A K/V loop
/// in between counts none: it may run no iteration.
int64_t copiesBetween(Block *block, Operation *from, Operation *to) {
  auto it = from ? std::next(from->getIterator()) : block->begin();
  auto end = to ? to->getIterator() : block->end();
  int64_t n = 0;
  for (; it != end; ++it)
    n += isa<CopyAsyncOp>(*it);
  return n;
}

/// Copies started from the top of `ancestor`'s nested blocks down to `point` (`ancestor` holds `point`, or is it).
int64_t copiesDown(Operation *ancestor, Operation *point) {
  int64_t n = 0;
  while (ancestor != point) {
    Block *block = nullptr;
    for (Region &region : ancestor->getRegions())
      for (Block &b : region)
        if (b.findAncestorOpInBlock(*point))
          block = &b;
    Operation *inner = block->findAncestorOpInBlock(*point);
    n += copiesBetween(block, nullptr, inner);
    ancestor = inner;
  }
  return n;
}

constexpr int64_t kNoPath = std::numeric_limits<int64_t>::max() / 4;

/// The fewest copies started after the copy behind `token` and before `point`, over every path (first iteration or
/// back edge of a loop carrying it; a loop that ran or did not). `visiting` cuts cycles (a token passed through a
/// loop unchanged).
FailureOr<int64_t> copiesSince(Value token, Operation *point, llvm::SmallPtrSetImpl<void *> &visiting) {
  if (!visiting.insert(token.getAsOpaquePointer()).second)
    return kNoPath;
  auto done = llvm::make_scope_exit([&] { visiting.erase(token.getAsOpaquePointer()); });
  auto minOf = [](FailureOr<int64_t> a, FailureOr<int64_t> b) -> FailureOr<int64_t> {
    if (failed(a) || failed(b))
      return failure();
    return std::min(*a, *b);
  };
  // From the op that makes (or passes on) the token, along `block` down to `point`.
  auto after = [&](Block *block, Operation *from) -> FailureOr<int64_t> {
    Operation *ancestor = block->findAncestorOpInBlock(*point);
    if (!ancestor)
      return point->emitOpError() << "waits for a token that does not reach it";
    return copiesBetween(block, from, ancestor) + copiesDown(ancestor, point);
  };
  if (auto copy = token.getDefiningOp<CopyAsyncOp>())
    return after(copy->getBlock(), copy);
  if (auto arg = dyn_cast<BlockArgument>(token)) {
    auto loop = dyn_cast<KvLoopOp>(arg.getOwner()->getParentOp());
    if (std::optional<unsigned> i = loop ? loop.carriedNumber(arg) : std::nullopt) {
      Value yielded = loop.getYieldedCarried(*i);
      FailureOr<int64_t> inside = after(arg.getOwner(), nullptr);
      FailureOr<int64_t> path = minOf(copiesSince(loop.getCarried()[*i], loop, visiting),
                                      copiesSince(yielded, loop.getBody().front().getTerminator(), visiting));
      if (failed(inside) || failed(path))
        return failure();
      return *path + *inside;
    }
  }
  if (auto result = dyn_cast<OpResult>(token)) {
    auto loop = dyn_cast<KvLoopOp>(result.getOwner());
    if (std::optional<unsigned> i = loop ? loop.carriedNumber(result) : std::nullopt) {
      Operation *yield = loop.getBody().front().getTerminator();
      FailureOr<int64_t> outside = after(loop->getBlock(), loop);
      FailureOr<int64_t> path = minOf(copiesSince(loop.getYieldedCarried(*i), yield, visiting),
                                      copiesSince(loop.getCarried()[*i], loop, visiting));
      if (failed(outside) || failed(path))
        return failure();
      return *path + *outside;
    }
  }
  return point->emitOpError() << "waits for a token that no tile.copy_async produced";
}
FailureOr<int64_t> copiesSince(Value token, Operation *point) {
  llvm::SmallPtrSet<void *, 8> visiting;
  FailureOr<int64_t> n = copiesSince(token, point, visiting);
  if (succeeded(n) && *n >= kNoPath)
    return point->emitOpError() << "waits for a token that no tile.copy_async produced";
  return n;
}

/// The copies a token may stand for (through the loops that carry it).
SmallVector<CopyAsyncOp> copiesBehind(Value token) {
  SmallVector<CopyAsyncOp> copies;
  SmallVector<Value> work = {token};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto copy = v.getDefiningOp<CopyAsyncOp>()) {
      copies.push_back(copy);
    } else {
      auto loop = dyn_cast<KvLoopOp>(isa<BlockArgument>(v) ? cast<BlockArgument>(v).getOwner()->getParentOp()
                                                            : v.getDefiningOp());
      if (std::optional<unsigned> i = loop ? loop.carriedNumber(v) : std::nullopt) {
        work.push_back(loop.getCarried()[*i]);
        work.push_back(loop.getYieldedCarried(*i));
      }
    }
  }
  return copies;
}


//===----------------------------------------------------------------------===//
// Variant functions
//===----------------------------------------------------------------------===//

FailureOr<std::string> KernelPrinter::variantFunction(Operation *op, Region &body, StringRef base, StringRef returnType,
                                                      ArrayRef<StringRef> args, CudaWriter &out,
                                                      ArrayRef<StringRef> outs) {
  CudaWriter fw;
  NameScopes fnames;
  for (StringRef reserved : {"p", "ceilDiv", "floorDiv"})
    fnames.reserve(reserved);
  fnames.reserve(target.preludeNamespace());
  for (StringRef arg : llvm::concat<const StringRef>(args, outs))
    fnames.reserve(arg);
  ScalarEmitter fs(fw, fnames, helpers, func, &body);
  Block &block = body.front();
  for (auto [arg, name] : llvm::zip(block.getArguments(), args))
    fs.bind(arg, name.str());
  // A score_mod's or mask's key may arrive split (keyArgOf): kv = kvTile + kvStep.
  bool splitKey = isa<ScoreModOp, MaskOp>(op) && keyArgOf(body) == KeyArg::Split;
  if (splitKey) {
    fnames.reserve("kvTile");
    fnames.reserve("kvStep");
    fs.splitKey(block.getArguments().back(), "kvTile", "kvStep");
    fw.line("const int kv = kvTile + kvStep;");
  }
  for (Operation &inner : block.without_terminator()) {
    if (!ScalarEmitter::isScalarOp(&inner))
      return inner.emitOpError() << "cannot be printed in a variant function; " << op->getName()
                                 << " regions may hold scalar arith/math ops, tile.dim and tile.param";
    if (failed(fs.emit(&inner)))
      return failure();
  }
  auto yield = cast<YieldOp>(block.getTerminator());
  if (outs.empty()) {
    FailureOr<CExpr> result = fs.expr(yield.getValues().front(), yield);
    if (failed(result))
      return failure();
    fw.line("return " + result->text + ";");
  } else {
    for (auto [value, outName] : llvm::zip_equal(yield.getValues(), outs)) {
      FailureOr<CExpr> result = fs.expr(value, yield);
      if (failed(result))
        return failure();
      fw.line(outName.str() + " = " + result->text + ";");
    }
  }

  std::string key = (base + "\n" + fw.str()).str();
  if (auto it = functionByText.find(key); it != functionByText.end())
    return it->second;
  std::string name = functionNames.unique(base);
  functionByText[key] = name;
  std::string role =
      isa<MaskOp>(op)         ? "mask predicate (tile.mask): keep the score of query row q and key kv?"
      : isa<FinalizeOp>(op)   ? "attention sink (tile.finalize): the extra logit of head h's softmax"
      : isa<ScoreGradOp>(op)  ? "derivative of the score modifier (tile.score_grad): d score_mod / d score at (q, kv)"
      : isa<StoreSplitOp>(op) ? "attention sink (tile.store_split): the extra logit of head h's softmax, joined once"
      : isa<InputGradOp>(op)  ? "input gradient (tile.input_grad): the element of the input the score hook reads at "
                                "(b, h) and d score_mod / d that element at (q, kv)"
      : isa<SinkGradOp>(op)   ? "sink gradient (tile.sink_grad): head h's sink logit, the element of the input it "
                                "reads and d sink / d that element"
                              : "score modifier (tile.score_mod): the new score of query row q and key kv";
  out.comment("---- variant \"" + commentSafe(func.getVariant()) + "\": " + role + " ----");
  std::string params;
  for (auto [arg, argName] : llvm::zip(block.getArguments(), args))
    params += splitKey && arg == block.getArguments().back()
                  ? std::string("int kvTile, int kvStep, ")
                  : *ScalarEmitter::cType(arg.getType()) + " " + argName.str() + ", ";
  std::string results;
  for (auto [value, outName] : llvm::zip(yield.getValues(), outs))
    results += ", " + *ScalarEmitter::cType(value.getType()) + " &" + outName.str();
  out.line(fs.functionQualifiers() + returnType.str() + " " + name + "(" + params + "const FlashtileSequence &p" +
           results + ") {");
  std::string bodyText = fw.str();
  for (StringRef line : llvm::split(StringRef(bodyText).rtrim('\n'), '\n'))
    out.line("  " + line.str());
  out.line("}");
  out.line("");
  return name;
}

LogicalResult KernelPrinter::printVariantFunctions(CudaWriter &out) {
  functionNames.reserve(target.preludeNamespace());
  for (StringRef reserved : {"ceilDiv", "floorDiv"})
    functionNames.reserve(reserved);
  WalkResult result = func.walk([&](Operation *op) -> WalkResult {
    FailureOr<std::string> name = success(std::string());
    if (auto mod = dyn_cast<ScoreModOp>(op))
      name = variantFunction(op, mod.getBody(), "scoreMod", "float", {"score", "b", "h", "q", "kv"}, out);
    else if (auto mask = dyn_cast<MaskOp>(op))
      name = variantFunction(op, mask.getBody(), "keep", "bool", {"b", "h", "q", "kv"}, out);
    else if (auto grad = dyn_cast<ScoreGradOp>(op))
      name = variantFunction(op, grad.getBody(), "scoreGrad", "float", {"score", "b", "h", "q", "kv"}, out);
    else if (auto fin = dyn_cast<FinalizeOp>(op); fin && fin.hasSink())
      name = variantFunction(op, fin.getSink(), "sinkLogit", "float", {"b", "h"}, out);
    else if (auto split = dyn_cast<StoreSplitOp>(op); split && split.hasSink())
      name = variantFunction(op, split.getSink(), "sinkLogit", "float", {"b", "h"}, out);
    else if (auto grad = dyn_cast<InputGradOp>(op))
      name = variantFunction(op, grad.getBody(), "inputGrad", "void", {"score", "b", "h", "q", "kv"}, out,
                             {"index", "partial"});
    else if (auto grad = dyn_cast<SinkGradOp>(op))
      name = variantFunction(op, grad.getBody(), "sinkGrad", "void", {"b", "h"}, out, {"sink", "index", "partial"});
    else
      return WalkResult::advance();
    if (failed(name))
      return WalkResult::interrupt();
    functionOf[op] = *name;
    return WalkResult::skip();
  });
  return failure(result.wasInterrupted());
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

void KernelPrinter::nameRegisters() {
  const std::string scores = names.unique("score"), nextScores = names.unique("scoreNext");
  const std::string probabilities = names.unique("prob");
  auto isScores = [](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.getRank() == 2 && tensor.getElementType().isF32();
  };
  auto isProbabilities = [](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.getRank() == 2 && !tensor.getElementType().isF32();
  };
  func.walk<WalkOrder::PreOrder>([&](Operation *op) {
    auto same = [&](Value to, Value from) {
      if (const StateNames *st = stateOf.lookup(from))
        stateOf[to] = st;
    };
    if (auto qk = dyn_cast<QkOp>(op)) {
      // Scores yielded to the next iteration have registers of their own; the ones the softmax reads (here or,
      // carried, in the loops) share one set.
      bool next = llvm::any_of(qk->getUsers(), [](Operation *u) { return isa<YieldOp>(u); });
      tileOf[qk.getS()] = next ? nextScores : scores;
    } else if (isa<ScaleOp, ScoreModOp, MaskOp>(op)) {
      tileOf[op->getResult(0)] = tileOf.lookup(op->getOperand(0));
    } else if (auto update = dyn_cast<SoftmaxUpdateOp>(op)) {
      tileOf[update.getP()] = probabilities;
    } else if (auto load = dyn_cast<MemLoadOp>(op); load && isScores(load.getType())) {
      tileOf[load.getValue()] = scores; // S read from its buffer: the registers the softmax works in
    } else if (auto constant = dyn_cast<arith::ConstantOp>(op); constant && isProbabilities(constant.getType())) {
      tileOf[constant.getResult()] = probabilities; // the P a loop carries in, never read
    }
    if (auto loop = dyn_cast<KvLoopOp>(op))
      for (auto [arg, result] : llvm::zip(loop.getCarriedArgs(), loop.getCarriedResults())) {
        if (isScores(arg.getType()))
          tileOf[arg] = tileOf[result] = scores;
        else if (isProbabilities(arg.getType()))
          tileOf[arg] = tileOf[result] = probabilities;
      }
    auto memStats = [](Value buffer, MemorySpace space) {
      auto type = cast<MemBufType>(buffer.getType());
      return isa<StatsType>(type.getTile()) && type.getSpace() == space;
    };
    if (isa<InitStateOp, StateLoadOp, InitStatsOp>(op) ||
        (isa<MemLoadOp>(op) && memStats(cast<MemLoadOp>(op).getBuffer(), MemorySpace::Shared))) {
      stateNames.push_back({names.unique("acc"), names.unique("rowMax"), names.unique("rowSum")});
      for (Value v : op->getResults())
        stateOf[v] = &stateNames.back();
    } else if (auto store = dyn_cast<MemStoreOp>(op); store && memStats(store.getBuffer(), MemorySpace::Registers)) {
      // A registers buffer keeps the registers of the first state stored into it: its loads are that state.
      if (const StateNames *st = stateOf.lookup(store.getValue()); st && !bufferState.count(store.getBuffer()))
        bufferState[store.getBuffer()] = st;
    } else if (auto load = dyn_cast<MemLoadOp>(op); load && memStats(load.getBuffer(), MemorySpace::Registers)) {
      if (const StateNames *st = bufferState.lookup(load.getBuffer()))
        stateOf[load.getValue()] = st;
    } else if (auto load = dyn_cast<MemLoadOp>(op); load && isa<RankedTensorType>(load.getType()) &&
                                                     cast<RankedTensorType>(load.getType()).getRank() == 1) {
      rowsOf[load.getValue()] = names.unique("rowScale");
    } else if (auto loop = dyn_cast<KvLoopOp>(op)) {
      same(loop.getStatsArg(), loop.getInitStats());
      same(loop.getStats(), loop.getInitStats());
      same(loop.getAccArg(), loop.getInitAcc());
      same(loop.getAcc(), loop.getInitAcc());
    } else if (auto update = dyn_cast<SoftmaxUpdateOp>(op)) {
      same(update.getNewStats(), update.getStats());
    } else if (auto rescale = dyn_cast<RescaleOp>(op)) {
      same(rescale.getResult(), rescale.getAcc());
    } else if (auto pv = dyn_cast<PvOp>(op)) {
      same(pv.getResult(), pv.getAcc());
    } else if (auto store = dyn_cast<StateStoreOp>(op)) {
      same(store.getStatsOut(), store.getStats());
      same(store.getAccOut(), store.getAcc());
    } else if (auto fin = dyn_cast<FinalizeOp>(op)) {
      same(fin.getO(), fin.getAcc());
    }
  });
}

FailureOr<std::string> KernelPrinter::registers(Value v, Operation *user) {
  auto it = tileOf.find(v);
  if (it != tileOf.end() && !it->second.empty())
    return it->second;
  return user->emitOpError() << "uses a score or probability tile that the CUDA printer did not name (one made by "
                                "tile.qk, tile.softmax_update or a K/V loop that carries it)";
}

FailureOr<const StateNames *> KernelPrinter::state(Value v, Operation *user) {
  if (const StateNames *st = stateOf.lookup(v))
    return st;
  return user->emitOpError() << "uses an online-softmax state that no tile.init_state or tile.state_load made";
}

void KernelPrinter::assignNames() {
  for (StringRef reserved :
       {"p",        "params",    "ceilDiv",    "floorDiv",   "qFirst",    "qLast",      "kBlockM",   "kBlockN",
        "kHeadDim", "kHeadDimV", "kWarps",     "kThreads",   "qTile",     "blockBatch", "blockHead", "blockLinear",
        "qTiles",   "pairs",     "groupPairs", "groupFirst", "groupSize", "inGroup",    "pair",       "split",
        "kvTiles",  "splitTiles", "blockKvHead", "headsPerKv", "halfTiles", "unit", "unitK"})
    names.reserve(reserved);
  for (const std::string &reserved : target.reservedNames())
    names.reserve(reserved);
  for (const auto &entry : functionOf)
    names.reserve(entry.second);
  nameRegisters();
  // Readable names for the values a reader looks for: the KV-range rules' results, the loop segments' bounds
  // and the copies' tile indices. The first hint a value gets wins.
  func.walk([&](Operation *op) {
    if (auto range = dyn_cast<KvRangeOp>(op)) {
      scalars.hint(range.getLo(), stringifyRangeKind(range.getKind()).str() + "Lo");
      scalars.hint(range.getHi(), stringifyRangeKind(range.getKind()).str() + "Hi");
    } else if (auto loop = dyn_cast<KvLoopOp>(op); loop && loop.isBounded()) {
      scalars.hint(loop.getUpper(), camel(stringifySegment(loop.getSegment())) + "End");
      scalars.hint(loop.getLower(), camel(stringifySegment(loop.getSegment())) + "Begin");
    } else if (isa<CopyAsyncOp, LoadOp>(op)) {
      // K/V tile indices of the pipeline, by their distance from the loop's tile (or the walk's first tile).
      auto copy = dyn_cast<CopyAsyncOp>(op);
      auto load = dyn_cast<LoadOp>(op);
      Value index = copy ? copy.getIndex() : load.getIndex();
      Value pred = copy ? copy.getPred() : load.getPred();
      if (!index)
        return;
      bool inLoop = op->getParentOfType<KvLoopOp>() != nullptr;
      auto sub = index.getDefiningOp<arith::SubIOp>();
      APInt distance;
      if (!sub || !matchPattern(sub.getRhs(), m_ConstantInt(&distance)))
        return;
      static const char *kInLoop[] = {"", "nextTile", "tileAfterNext"}, *kPrologue[] = {"", "firstTile", "secondTile"};
      int64_t d = distance.getSExtValue();
      if (d < 1 || d > 2)
        return;
      std::string tile = (inLoop ? kInLoop : kPrologue)[d];
      scalars.hint(index, tile);
      if (pred)
        scalars.hint(pred, "has" + std::string(1, llvm::toUpper(tile[0])) + tile.substr(1));
    }
  });
}

FailureOr<std::string> KernelPrinter::operand(Value v, Operation *user) {
  FailureOr<CExpr> e = scalars.expr(v, user);
  if (failed(e))
    return failure();
  return e->operand();
}

FailureOr<std::string> KernelPrinter::kTileOf(Value scores, Operation *user) {
  Value v = scores;
  // Scores carried into a K/V loop are those of the loop's own tile j (a pipeline with two K/V buffers).
  auto carriedOf = [](Value v) -> KvLoopOp {
    auto arg = dyn_cast<BlockArgument>(v);
    auto loop = arg ? dyn_cast<KvLoopOp>(arg.getOwner()->getParentOp()) : KvLoopOp();
    return loop && loop.carriedNumber(arg) ? loop : KvLoopOp();
  };
  while (Operation *def = v.getDefiningOp()) {
    if (auto qk = dyn_cast<QkOp>(def)) {
      auto load = qk.getK().getDefiningOp<LoadOp>();
      if (load && load.getOperand() == tile::Operand::K && load.getIndex())
        return operand(load.getIndex(), user);
      break;
    }
    if (isa<MemLoadOp>(def)) {
      // S read from its buffer in a K/V walk: the MMA that wrote it multiplied the walk's tile of K.
      if (auto walk = def->getParentOfType<KvWalkOp>())
        return operand(walk.getBody().front().getArgument(0), user);
      break;
    }
    if (!isa<ScaleOp, ScoreModOp, MaskOp>(def))
      break;
    v = def->getOperand(0);
  }
  if (KvLoopOp loop = carriedOf(v))
    return operand(loop.getTileIndex(), user);
  return user->emitOpError() << "works on scores that do not come from tile.qk of a tile.load k[index]";
}

LogicalResult KernelPrinter::checkSlot(Operation *op, Value slot, Value index) {
  auto select = slot.getDefiningOp<SlotOp>();
  auto buffer = select ? select.getBuffer().getDefiningOp<BufferOp>() : BufferOp();
  if (!buffer || (!asyncProtocol && select.getIndex() != index))
    return op->emitOpError() << "moves its tile through a slot that is not tile.slot of its own tile index in a "
                                "tile.buffer; the CUDA printer puts tile j in slot j mod slots";
  int64_t slots = buffer.getBuffer().getType().getSlots();
  int64_t expected = index ? func.getScheduleAttr().getStages() : 1;
  if (slots != expected)
    return op->emitOpError() << "moves its tile through a buffer of " << slots << " slots; the schedule's kernel has "
                             << expected << " (#tile.schedule stages for K and V, 1 for Q)";
  return success();
}

FailureOr<bool> KernelPrinter::stagedInQ(Operation *store, Value staging) {
  if (!staging)
    return false;
  auto select = staging.getDefiningOp<SlotOp>();
  auto buffer = select ? select.getBuffer().getDefiningOp<BufferOp>() : BufferOp();
  if (!buffer || buffer.getOperand() != tile::Operand::Q || buffer.getBuffer().getType().getSlots() != 1)
    return store->emitOpError() << "stages O through a slot that is not the one slot of Q's tile.buffer; the CUDA "
                                   "printer stages O in Q's shared memory only";
  if (packed())
    return store->emitOpError() << "stages O of a program that packs query heads; packed rows go to their own "
                                   "query heads, stored from the registers";
  return true;
}

/// Whether `v` (a top-level scalar) is, or feeds through scalar ops, the bound of a K/V loop segment.
bool feedsLoopBound(Value v) {
  SmallVector<Value> work = {v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value next = work.pop_back_val();
    if (!seen.insert(next).second)
      continue;
    for (Operation *user : next.getUsers()) {
      if (auto loop = dyn_cast<KvLoopOp>(user); loop && (next == loop.getLower() || next == loop.getUpper()))
        return true;
      if (ScalarEmitter::isScalarOp(user))
        work.append(user->result_begin(), user->result_end());
    }
  }
  return false;
}

LogicalResult KernelPrinter::printOp(Operation *op) {
  if (auto constant = dyn_cast<arith::ConstantOp>(op); constant && isa<RankedTensorType>(constant.getType()))
    return printConstantTile(constant);
  if (ScalarEmitter::isScalarOp(op)) {
    if (!boundsCommented && isa<FuncOp, WorkLoopOp>(op->getParentOp()) && scalars.declares(op) &&
        feedsLoopBound(op->getResult(0))) {
      w.comment("---- K/V loop segments: the rules' key ranges in whole tiles of kBlockN keys, clamped to [0, "
                "seqlen_k) ----");
      boundsCommented = true;
    }
    return scalars.emit(op);
  }
  // Buffers and slots print nothing: a target places its buffers in setup and addresses tile j's slot itself (the
  // memory layer's buffers and channels too: memoryLayer handed them over).
  if (isa<BufferOp, SlotOp, BarrierOp, WorkQueueOp, TmemOp, TmemBufferOp, SmemBufferOp, ChannelOp>(op))
    return success();
  // A stage reads apart from scalar code that does not feed it (its own index and predicate stay with it).
  Operation *prev = op->getPrevNode();
  while (prev && isa<BufferOp, SlotOp, BarrierOp, WorkQueueOp, TmemOp, TmemBufferOp, SmemBufferOp, ChannelOp>(prev))
    prev = prev->getPrevNode();
  if (prev && ScalarEmitter::isScalarOp(prev) && !llvm::is_contained(op->getOperands(), prev->getResult(0)))
    w.separate();
  LogicalResult result =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case<KvRangeOp, KvLoopOp, KvWalkOp, WorkLoopOp, YieldOp>([&](Operation *loop) { return printLoops(loop); })
          .Case<RoleOp, BarrierWaitOp, BarrierArriveOp, MmaWaitOp, CopyAsyncOp, WaitOp>(
              [&](Operation *async) { return printAsync(async); })
          .Case<LoadOp, StoreOp, StoreSplitOp, StateLoadOp, StateStoreOp>(
              [&](Operation *move) { return printLoadStore(move); })
          .Case<QkOp, ScaleOp, ScoreModOp, MaskOp, PvOp>([&](Operation *math) { return printMath(math); })
          .Case<InitStateOp, SoftmaxUpdateOp, RescaleOp, FinalizeOp>(
              [&](Operation *softmax) { return printSoftmax(softmax); })
          .Case<TmemAllocOp, TmemFreeOp, MmaQkOp, MmaPvOp, MmaCommitOp, MemLoadOp, MemStoreOp, InitStatsOp, InitAccOp>(
              [&](Operation *memory) { return printMemory(memory); })
          .Default([&](Operation *other) -> LogicalResult {
            return other->emitOpError() << "cannot be printed as CUDA: the printer knows the tile ops and the "
                                           "scalar arith/math ops, not this one";
          });
  if (succeeded(result) && !isa<YieldOp, KvRangeOp, KvLoopOp>(op))
    w.separate();
  return result;
}

LogicalResult KernelPrinter::printConstantTile(arith::ConstantOp constant) {
  if (!asyncProtocol || !llvm::all_of(constant->getUsers(), [](Operation *user) { return isa<KvLoopOp>(user); }))
    return constant.emitOpError() << "is a constant tile; the CUDA printer takes one only as the initial P a K/V loop "
                                     "carries, on a target with asynchronous MMAs";
  FailureOr<std::string> p = registers(constant.getResult(), constant);
  if (failed(p))
    return failure();
  if (!target.declareCarriedProbabilities(w, *p))
    return notPrinted(constant, "is the initial P a K/V loop carries to the next iteration's P·V");
  w.separate();
  return success();
}

FailureOr<std::string> KernelPrinter::optionalOperand(Value v, Operation *user) {
  if (!v)
    return std::string();
  return operand(v, user);
}

LogicalResult KernelPrinter::notPrinted(Operation *op, const Twine &what) {
  return op->emitOpError() << what << "; " << loweredTo() << " does not print it";
}

std::string KernelPrinter::loweredTo() {
  return ("the '" + func.getTargetAttr().getIsa() + "' instruction family that schedule '" +
          func.getScheduleAttr().getName() + "' is lowered to")
      .str();
}

} // namespace kernel

FailureOr<const TargetFamily *> familyOf(FuncOp func, bool pipelined) { return checkReady(func, pipelined); }

FailureOr<const TargetFamily *> printableFamily(FuncOp func) {
  FailureOr<const TargetFamily *> family = checkReady(func);
  if (failed(family) || failed(checkInPlace(func, (*family)->asyncProtocol())))
    return failure();
  return family;
}

FailureOr<llvm::DenseMap<Operation *, std::string>> printVariantFunctions(FuncOp func, TileTarget &target,
                                                                          ScalarHelpers &helpers, CudaWriter &out) {
  KernelPrinter printer(func, target, helpers, /*asyncProtocol=*/false);
  if (failed(printer.printVariantFunctions(out)))
    return failure();
  return printer.variantFunctions();
}

std::string commentText(StringRef text) { return commentSafe(text); }
std::string identifierText(StringRef text) { return sanitize(text); }

} // namespace flashtile::codegen
