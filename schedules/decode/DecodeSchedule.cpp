//===- DecodeSchedule.cpp - the decode (split-KV) schedule as a plug-in ---===//
//
// Flash-decoding on FA2's tile orchestration: the generic passes FA2 runs (tile-split-boundary, tile-pipeline-copies)
// around this schedule's own: tile-decode-split-kv, which bounds each program instance's walk to its split of the key
// range and makes it store a partial O and LSE (tile.store_split), and tile-decode-stage-o, which sends that O
// through Q's dead slot. Configuration: DecodeConfig.h.
//===----------------------------------------------------------------------===//
#include "schedules/decode/DecodeConfig.h"
#include "schedules/decode/DecodeRegister.h"

#include "passes/IR/TileKvDtype.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "mlir/Transforms/Passes.h"

static_assert(std::string_view(flashtile::decode::kKvCache) == flashtile::schedule::kKvCacheKnob);

namespace flashtile::decode {
namespace {

using namespace mlir;
using namespace flashtile::tile;

class DecodeSchedule final : public schedule::Schedule {
public:
  std::string_view name() const override { return kName; }
  std::string_view summary() const override {
    return "decode (flash-decoding): FA2's tiles with the key range of each Q tile split across thread blocks and "
           "an exact LSE-weighted combine kernel; the runtime picks the number of splits (any arch, mma.sync)";
  }
  const std::vector<schedule::OptionSpec> &options() const override {
    static const std::vector<schedule::OptionSpec> specs = {
        {kBlockM, "query rows per thread block", 16, kMaxBlockM},
        {kBlockN, "keys per K/V tile (splits are whole tiles)", 16, kMaxBlockN},
        {kWarps, "warps per thread block; each owns block-m / warps query rows", 1, kMaxWarps},
        {kStages, "K/V buffers: 1, or 2 to also run Q·Kᵀ one tile ahead of the softmax", kMinStages, kMaxStages},
        {kMinBlocksPerSm, "registers capped so this many blocks fit an SM (0: no cap)", 0,
         kMaxThreadsPerSm / kWarpSize},
        {kPackGqa,
         "1: a tile's rows are a K/V head's query heads x query rows (K/V read once per group); 0: one "
         "query head a tile",
         0, 1},
        {kKvCache,
         "1: the kernel also reads KV caches, contiguous or paged (flash_attn_with_kvcache), and appends new keys; "
         "0 (the default): plain K/V only",
         0, 1},
        {kKvConvert,
         "an e4m3 KV cache: 0 widens each K/V tile into a 16-bit shared-memory tile; 1 (the default over an e4m3 "
         "cache, with block-m 16 on one warp unless kv-convert, block-m or warps is named) converts the MMA fragments of the "
         "8-bit tiles in registers (refused for K/V of the program's dtype)",
         0, 1},
        {kKvF16Mma,
         "with kv-convert 1 in a bf16 program: 1 runs Q·Kᵀ and P·V in f16 (each e4m3 pair of K or V one conversion "
         "instead of four: e4m3 to f16 is exact; Q's fragments converted to f16 once, scaled by a power of two a warp "
         "that S undoes exactly; P rounded to f16); 0 in bf16 (the default). The output stays bf16",
         0, 1},
    };
    return specs;
  }

  FailureOr<ScheduleAttr> configure(FuncOp func, const schedule::Knobs &knobs, ShapeClass) const override {
    int headDim = func.getHeadDim(), headDimV = func.getHeadDimV();
    DecodeConfig config = DecodeConfig::defaultsFor(headDim, headDimV);
    if (hasKvDtype(func)) {
      // An e4m3 KV cache: its fragments converted in registers by one warp of 16 rows (the rows of one K/V head's
      // group at one query row up to 16 query heads), unless the knobs name another tiling. Measured on the H100 at
      // B16, GQA 32/8, hd128, 32k keys, paged 256 (bench/NOTES.md v45): 1.80x the bf16 cache's tokens/s at 92% of
      // the HBM roof, against 1.23x at 63% for the widening in shared memory with bf16's 32 rows on 2 warps.
      // kv-convert 0 named keeps bf16's tiling (the widening's kernel as it was the default before).
      const bool widening = knobs.count(kKvConvert) && knobs.at(kKvConvert) == 0;
      config.kvConvert = 1;
      if (!widening && !knobs.count(kBlockM) && !knobs.count(kWarps))
        config.blockM = 16, config.warps = 1;
    }
    schedule::applyKnob(knobs, kBlockM, config.blockM);
    schedule::applyKnob(knobs, kBlockN, config.blockN);
    schedule::applyKnob(knobs, kWarps, config.warps);
    schedule::applyKnob(knobs, kStages, config.stages);
    schedule::applyKnob(knobs, kMinBlocksPerSm, config.minBlocksPerSm);
    schedule::applyKnob(knobs, kKvConvert, config.kvConvert);
    schedule::applyKnob(knobs, kKvF16Mma, config.kvF16Mma);
    if (auto error = config.validate(headDim, headDimV))
      return func.emitOpError() << *error;
    // The form of an e4m3 cache's conversion is the printer's (an attribute beside tile.kv_dtype). A program of
    // 16-bit K/V has nothing to convert: the knob is refused there rather than accepted and ignored.
    if (config.kvConvert == 1 && !hasKvDtype(func))
      return func.emitOpError() << "decode: " << kKvConvert << " = 1 is not supported here; accepted: 0 (K and V are "
                                << "of the program's dtype: nothing to convert; 1 needs an e4m3 KV cache, kv-cache 1 "
                                   "with kv dtype e4m3)";
    if (config.kvConvert == 1)
      func->setAttr(kKvConvertRegistersAttr, UnitAttr::get(func.getContext()));
    if (config.kvF16Mma == 1) {
      if (config.kvConvert != 1 || !isa<BFloat16Type>(func.getDtype()))
        return func.emitOpError() << "decode: " << kKvF16Mma << " = 1 runs a bf16 program's MMAs in f16 over the "
                                  << "e4m3 fragments of kv-convert 1; accepted: 1 with kv-convert 1 (an e4m3 KV cache) "
                                     "and dtype bf16 (an f16 program's MMAs are f16 already), or 0";
      func->setAttr(kKvF16MmaAttr, UnitAttr::get(func.getContext()));
    }
    // One tiling serves every shape class (the split count, a kernel argument, adapts to the shape); the grid
    // takes Q tiles per (batch, head), splits fastest (block order 0); every tile is rescaled (FA2's policy).
    // Split-Q as fa2: every warp owns blockM / warps query rows.
    return ScheduleAttr::get(func.getContext(), kName, config.blockM, config.blockN, config.warps, WarpLayout::SplitQ,
                             config.blockM / config.warps, config.stages, /*rescaleThreshold=*/0, config.minBlocksPerSm,
                             /*lptGroupBlocks=*/0, ShapeClass::Default);
  }

  // An e4m3 KV cache (tile.kv_dtype) in a bf16 or f16 program: the K/V copies widen it in shared memory (the sm80
  // family), so Q·Kᵀ and P·V are the 16-bit program's MMAs. Only the KV-cache kernels read it (tile-decode-split-kv).
  bool readsKvDtype(std::string_view kvDtype) const override { return kvDtype == "e4m3"; }

  // Descending as FA2: within a split, the masked tiles near the diagonal come first.
  bool walkDescending() const override { return true; }

  std::string targetFamilyFor(std::string_view) const override { return "sm80"; }

  DispatchRule dispatchRule(std::string_view) const override {
    // Made for a few query rows over a long key range (split-KV): first for decode-sized calls on every arch, and
    // the only schedule whose kernels read KV caches.
    return {.calls = DefaultCalls::Decode};
  }

  void buildPipeline(OpPassManager &pm, const schedule::Request &request) const override {
    OpPassManager &func = pm.nest<FuncOp>();
    schedule::addApplySchedule(func, kName, request);
    auto knob = [&](const char *name, bool byDefault) {
      auto it = request.knobs.find(name);
      return it == request.knobs.end() ? byDefault : it->second != 0;
    };
    // GQA packing on unless turned off; the cache code only in kernels asked for it (plain decode calls run
    // kernels without it: KernelSpec::kvCache).
    func.addPass(createSplitKvPass(knob(kPackGqa, true), knob(kKvCache, false)));
    func.addPass(createTileSplitBoundary());
    func.addPass(createTilePipelineCopies());
    func.addPass(createStageOPass());
    func.addPass(createTileLowerToTarget(TileLowerToTargetOptions{request.arch}));
    func.addPass(createCanonicalizerPass());
    func.addPass(createCSEPass());
  }
};

} // namespace

void registerSchedule() {
  schedule::registerSchedule(std::make_unique<DecodeSchedule>());
  mlir::registerPass([] { return createSplitKvPass(/*packQueryHeads=*/true, /*kvCache=*/false); });
  mlir::registerPass([] { return createStageOPass(); });
}

} // namespace flashtile::decode
