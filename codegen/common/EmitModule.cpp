//===- EmitModule.cpp - a forward program's CUDA module: its kernels, plan and manifest ---===//
//
// The forward module's entry point, emitCuda: the program's printable shape, its kernel's entry name, the kernel
// (KernelPrinter, CudaEmitter.cpp and the files beside it) with the prelude of its target, the split-KV combine and
// KV-cache append kernels where the schedule asks for them, the launch plan (LaunchPlanner.cpp) and the manifest's
// facts (describeKernel); and the text every module of either kind starts with (sourceHeading, the sequence view).
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

namespace flashtile::codegen {

using namespace kernel;

LogicalResult describeKernel(FuncOp func, const KernelShape &shape, StringRef kind, KernelInfo &info) {
  ScheduleAttr schedule = func.getScheduleAttr();
  info.kind = kind.str();
  info.arch = func.getTargetAttr().getArch().str();
  info.dtype = shape.dtype;
  info.headDim = shape.headDim;
  info.headDimV = shape.headDimV;
  info.variant = func.getVariant().str();
  info.schedule = schedule.getName().str();
  schedule::recordDispatchRule(info); // for runtimes that load the kernel without the compiler
  info.shapeClass = stringifyShapeClass(schedule.getShapeClass()).str();
  info.blockM = shape.blockM;
  info.blockN = shape.blockN;
  for (Attribute name : func.getParams())
    info.paramNames.push_back(cast<StringAttr>(name).getValue().str());
  for (Attribute input : func.getInputs())
    info.inputNames.push_back(cast<InputAttr>(input).getName().str());
  if (info.paramNames.size() > FLASHTILE_MAX_VARIANT_PARAMS || info.inputNames.size() > FLASHTILE_MAX_VARIANT_INPUTS)
    return func.emitOpError() << "declares " << info.paramNames.size() << " parameters and " << info.inputNames.size()
                              << " inputs; kernels take at most " << FLASHTILE_MAX_VARIANT_PARAMS << " and "
                              << FLASHTILE_MAX_VARIANT_INPUTS << " (KernelAbi.h)";
  info.compilerVersion = std::string(compilerVersion());
  return success();
}

std::string sourceHeading(const KernelInfo &info, const KernelShape &shape, StringRef isa, StringRef title) {
  std::string src = "// " + info.entry + ": " + title.str() + "\n";
  src += "// schedule " + commentText(info.schedule) + " (blockM " + std::to_string(shape.blockM) + ", blockN " +
         std::to_string(shape.blockN) + ", " + std::to_string(shape.warps) + " warps), target " +
         commentText(info.arch) + " (" + commentText(isa) + " instructions), variant \"" + commentText(info.variant) +
         "\", " + shape.dtype + (shape.kvDtype.empty() ? "" : " (K/V " + shape.kvDtype + ")") + ", head dims " +
         std::to_string(shape.headDim) + "/" + std::to_string(shape.headDimV) + ".\n";
  // The launch plan (KernelInfo::plan), as the runtime executes it: rows and keys are those of the longest
  // sequence.
  src += "// Launch plan:\n";
  std::string described = info.plan.describe();
  for (size_t start = 0; start < described.size();) {
    size_t end = described.find('\n', start);
    src += "//   " + described.substr(start, end - start) + "\n";
    start = end == std::string::npos ? described.size() : end + 1;
  }
  src += "\n// ==== kernel parameters: runtime/include/flashtile/runtime/KernelAbi.h, verbatim ====\n";
  src += kKernelAbiText;
  return src;
}

void openSequenceView(CudaWriter &w) {
  w.line("FlashtileSequence p{params, blockBatch * params.seqlenK, 1.f / params.softmaxScale};");
  w.open("if (params.cuSeqlensQ)");
  w.line("const int z = blockBatch;");
  w.line("const int qBegin = min(max(params.cuSeqlensQ[z], 0), params.seqlenQ);");
  w.line("const int qEnd = min(max(params.cuSeqlensQ[z + 1], qBegin), params.seqlenQ);");
  w.line("const int kBegin = min(max(params.cuSeqlensK[z], 0), params.seqlenK);");
  w.line("const int kEnd = min(max(params.cuSeqlensK[z + 1], kBegin), params.seqlenK);");
}

std::string sequenceStructText(bool positions) {
  return (positions ? positionsStructText() : "") +
         "\n// The sequence a thread block works on: the kernel parameters, base pointers and lengths rewritten for a\n"
         "// varlen sequence, the row of its first key among all sequences' keys (" +
         tileDimWords({Dim::KeyOffset}) +
         ") and\n"
         "// 1 / softmax_scale (tile.softmax_scale inverse), computed once per block instead of per score.\n"
         "// [splitBegin, splitEnd) are the keys of the block's split of the key range (" +
         tileDimWords({Dim::SplitBegin, Dim::SplitEnd}) +
         ";\n"
         "// split-KV).\n"
         "struct FlashtileSequence : FlashtileFwdParams {\n  int keyOffset;\n  float invSoftmaxScale;\n"
         "  int splitBegin, splitEnd; // 0 unless set: members left out of p's initializer are zero\n" +
         (positions ? positionsMembersText() : "") + "};\n";
}


namespace {

/// The forward program's kernel shape, checked against what `family` prints: its tiles, and the packed query heads
/// and KV caches of split-KV programs.
FailureOr<KernelShape> printableShape(FuncOp func, const TargetFamily &family) {
  KernelShape shape = schedule::kernelShapeOf(func);
  if (std::optional<std::string> error = family.checkShape(shape))
    return func.emitOpError() << *error;
  shape.packQueryHeads = func->hasAttr(kPackQueryHeadsAttr);
  if (shape.packQueryHeads && func.getBody().getOps<StoreSplitOp>().empty())
    return func.emitOpError() << "packs query heads (" << kPackQueryHeadsAttr
                              << ") without splitting its key range; the CUDA printer packs split-KV programs only";
  shape.kvCache = func->hasAttr(kKvCacheAttr);
  if (shape.kvCache && func.getBody().getOps<StoreSplitOp>().empty())
    return func.emitOpError() << "reads a KV cache (" << kKvCacheAttr
                              << ") without splitting its key range; the CUDA printer reads caches in split-KV "
                                 "programs only";
  if (!shape.kvDtype.empty() && !shape.kvCache)
    return func.emitOpError() << "reads K and V of kv_dtype " << shape.kvDtype << " without reading a KV cache ("
                              << kKvCacheAttr << "); the CUDA printer reads e4m3 K and V from KV caches only";
  if (shape.packQueryHeads)
    for (FinalizeOp fin : func.getBody().getOps<FinalizeOp>())
      if (fin.hasSink())
        return fin.emitOpError() << "has a sink in a program that packs query heads; the sink joins at "
                                    "tile.store_split there (one head per row)";
  return shape;
}

/// The rotary embedding of the program's loads (the last load that has one), if any.
std::optional<Rotary> programRotary(FuncOp func) {
  std::optional<Rotary> rotary;
  func.walk([&](LoadOp load) {
    if (std::optional<Rotary> r = rotaryOf(load))
      rotary = r;
  });
  return rotary;
}

/// The kernel's entry: the schedule, the variant, the dtype, the head dims, and the shape class, KV cache and rotary
/// embedding where they are not the default.
std::string kernelEntry(FuncOp func, const KernelShape &shape, const std::optional<Rotary> &rotary) {
  ScheduleAttr schedule = func.getScheduleAttr();
  return "flashtile_" + identifierText(schedule.getName()) + "_" + identifierText(func.getVariant()) + "_" +
         shape.dtype + "_d" + std::to_string(shape.headDim) +
         (shape.headDimV != shape.headDim ? "_dv" + std::to_string(shape.headDimV) : "") +
         (schedule.getShapeClass() != ShapeClass::Default
              ? "_" + identifierText(stringifyShapeClass(schedule.getShapeClass()))
              : "") +
         (shape.kvCache ? "_kvcache" : "") + // a library holds a variant's plain and KV-cache kernels side by side
         (shape.kvDtype.empty() ? "" : "_" + shape.kvDtype) + // and those of an e4m3 cache
         (rotary ? (rotary->interleaved ? "_rotary_interleaved" : "_rotary") : "");
}

} // namespace

FailureOr<EmittedKernel> emitCuda(FuncOp func) {
  if (func.getKind() != kForwardProgram)
    return func.emitOpError() << "is a " << func.getKind()
                              << " program; the CUDA printer prints forward programs (docs/backward.md)";
  FailureOr<const TargetFamily *> family = printableFamily(func);
  if (failed(family))
    return failure();
  TargetAttr targetAttr = func.getTargetAttr();
  FailureOr<KernelShape> checkedShape = printableShape(func, **family);
  if (failed(checkedShape))
    return failure();
  KernelShape shape = *checkedShape;
  std::optional<Rotary> rotary = programRotary(func);
  if (rotary && !shape.kvCache)
    return func.emitOpError() << "rotates Q (" << kRotaryAttr << ") without reading a KV cache (" << kKvCacheAttr
                              << "); rotary embedding comes with the keys a cache call appends";

  EmittedKernel kernel;
  KernelInfo &info = kernel.info;
  info.entry = kernelEntry(func, shape, rotary);
  if (failed(describeKernel(func, shape, func.getKind(), info)))
    return failure();
  ModuleFacts facts;
  facts.entry = info.entry;
  facts.blockM = shape.blockM;
  facts.blockN = shape.blockN;
  facts.threads = shape.warps * kWarpSize;
  facts.smemBytes = static_cast<int>((*family)->smemBytes(shape)); // tile-lower-to-target bounded it by the arch
  if (const ArchLimits *limits = archLimits(**family, info.arch))
    facts.dependentLaunch = limits->dependentLaunch;

  std::unique_ptr<TileTarget> target = (*family)->createPrinter(shape);
  ScalarHelpers helpers;
  KernelPrinter printer(func, *target, helpers, (*family)->asyncProtocol());
  CudaWriter functions;
  if (shape.kvCache)
    printKvErrorFunctions(functions);
  if (rotary) {
    printRotaryFunctions(functions, shape.dtype == "bf16");
    info.rotary = rotary->interleaved ? "interleaved" : "halves";
  }
  if (failed(printer.printVariantFunctions(functions)) || failed(printer.printKernel(info.entry, shape)))
    return failure();
  facts.packQueryHeads = shape.packQueryHeads;
  facts.tensorMaps = target->takesTensorMaps();
  facts.tensorMapSwizzle = target->tensorMapSwizzleBytes();
  facts.ctaPair = shape.ctaPair;
  facts.persistent = printer.persistent();
  facts.dynamicWork =
      func.walk([](WorkLoopOp loop) { return loop.isDynamic() ? WalkResult::interrupt() : WalkResult::advance(); })
          .wasInterrupted();
  facts.kvSteps = !func.getBody().getOps<StateLoadOp>().empty();
  if (facts.kvSteps && (printer.splitKv() || facts.persistent || shape.packQueryHeads))
    return func.emitOpError() << "walks K/V steps (tile.state_load) and splits its keys, packs query heads or is "
                                 "persistent; the CUDA printer runs K/V steps over whole Q tiles of one head";
  if (printer.splitKv()) {
    facts.combineEntry = info.entry + "_combine";
    facts.combineRows = kCombineRowsPerBlock;
    facts.combineThreads = kCombineWarps * kWarpSize;
    if (failed(printer.printCombineKernel(facts.combineEntry)))
      return failure();
  }
  CudaWriter append;
  if (shape.kvCache) {
    info.kvCache = true;
    info.kvDtype = shape.kvDtype;
    facts.appendEntry = info.entry + "_append";
    facts.appendThreads = FLASHTILE_APPEND_THREADS;
    facts.appendChunkElements = kAppendChunkElements;
    printKvCacheAppendKernel(append, facts.appendEntry, shape.headDim, shape.headDimV,
                             rotary ? std::optional<bool>(rotary->interleaved) : std::nullopt, shape.kvDtype == "e4m3",
                             shape.dtype == "bf16");
  }
  CudaWriter prepass;
  if (shape.dtype == "e4m3") {
    // e4m3 kernels take FlashtileFp8Params (Fp8Abi.h): the descales, and the workspace a prepass lays V out in.
    facts.transposeVEntry = info.entry + "_vt";
    facts.transposeVThreads = target->printOperandPrepass(prepass, facts.transposeVEntry);
    if (facts.transposeVThreads == 0)
      return func.emitOpError() << "is an e4m3 program, and " << targetAttr.getIsa()
                                << " printed no prepass laying V out for its 8-bit P·V";
  }
  info.plan = planLaunches(facts);

  std::string &src = kernel.source;
  src = sourceHeading(info, shape, targetAttr.getIsa(), "attention forward generated by flashtile from tile IR.");
  if (shape.dtype == "e4m3" || shape.kvDtype == "e4m3")
    src += "\n// ==== FP8 kernel parameters: runtime/include/flashtile/runtime/Fp8Abi.h, verbatim ====\n" +
           std::string(kFp8AbiText);
  src += target->prelude();
  src += sequenceStructText(takesPositions(func));
  if (std::string defs = helpers.definitions(); !defs.empty())
    src += "\n" + defs;
  src += "\n" + functions.str();
  src += prepass.str();
  src += printer.kernel();
  src += append.str();
  return kernel;
}


} // namespace flashtile::codegen
