// CodegenTest.cpp — CUDA printing of FA2-scheduled tile IR: every built-in variant, dtype, head dim and target
// compiles with NVRTC to a cubin (no GPU needed), KernelInfo describes the launch, and IR the printer cannot
// handle is rejected with a diagnostic that says what to run.
#include "Printers.h"
#include "PlanSupport.h"
#include "Variants.h"
#include "codegen/common/CudaEmitter.h"
#include "codegen/common/KernelAbiText.h"
#include "codegen/sm80/TileOpsSm80.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Version.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"
#include "schedules/fa2/Fa2Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

using namespace flashtile;

namespace {

constexpr std::string_view kElfMagic = "\x7f"
                                       "ELF";

/// The sm80 family's shared memory for an FA2 configuration: one Q tile and `stages` K and V tiles of padded rows.
int64_t sm80SmemBytes(const fa2::Fa2Config &c, int headDim, int headDimV) {
  using codegen::sm80::rowBytes;
  return c.blockM * rowBytes(headDim) + int64_t(c.stages) * c.blockN * (rowBytes(headDim) + rowBytes(headDimV));
}

/// Counts the non-overlapping occurrences of `needle` in `text`.
int count(const std::string &text, const std::string &needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
    ++n;
  return n;
}

/// Builds a variant's program and runs the FA2 schedule up to (and including) `lastPass`, collecting the
/// diagnostics of the pipeline and of emitCuda.
class Compiler {
public:
  enum class Upto { Unscheduled, Scheduled, Pipelined, Lowered };

  Compiler()
      : handler(&context, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        }) {}

  /// The schedule's whole pipeline from the registry (`schedule`, e.g. "fa3"), down to its target.
  tile::FuncOp buildWith(const std::string &schedule, const Variant &variant, ElementType dtype, int headDim,
                         const std::string &arch, const schedule::Knobs &knobs = {}) {
    auto built = buildAttentionProgram(context, variant, ProgramOptions{dtype, headDim, headDimV ? headDimV : headDim});
    EXPECT_TRUE(mlir::succeeded(built)) << diagnostics;
    if (mlir::failed(built))
      return {};
    module = std::move(*built);
    mlir::PassManager pm(&context);
    schedule::Request request;
    request.schedule = schedule;
    request.arch = arch;
    request.knobs = knobs;
    schedule::lookupSchedule(schedule)->buildPipeline(pm, request);
    if (mlir::failed(pm.run(*module)))
      return {}; // the diagnostics say why
    return *module->getOps<tile::FuncOp>().begin();
  }

  tile::FuncOp build(const Variant &variant, ElementType dtype, int headDim, const std::string &arch,
                     Upto upto = Upto::Lowered) {
    auto built = buildAttentionProgram(context, variant, ProgramOptions{dtype, headDim, headDimV ? headDimV : headDim});
    EXPECT_TRUE(mlir::succeeded(built)) << diagnostics;
    if (mlir::failed(built))
      return {};
    module = std::move(*built);
    mlir::PassManager pm(&context);
    mlir::OpPassManager &func = pm.nest<tile::FuncOp>();
    if (upto == Upto::Lowered) {
      fa2::buildPipeline(pm, fa2::Fa2Options{.arch = arch});
    } else if (upto != Upto::Unscheduled) {
      func.addPass(tile::createTileApplySchedule());
      func.addPass(tile::createTileSplitBoundary());
      if (upto == Upto::Pipelined)
        func.addPass(tile::createTilePipelineCopies());
    }
    EXPECT_TRUE(mlir::succeeded(pm.run(*module))) << diagnostics;
    return *module->getOps<tile::FuncOp>().begin();
  }

  mlir::MLIRContext context;
  mlir::ScopedDiagnosticHandler handler;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string diagnostics;
  int headDimV = 0; ///< the V/O head dim of the next build; 0: the Q/K head dim
};

//===----------------------------------------------------------------------===//
// Every built-in variant x dtype x head dim x target compiles with NVRTC
//===----------------------------------------------------------------------===//

using Config = std::tuple<std::string, ElementType, int, std::string>; // variant, dtype, head dim, arch

class CodegenCompiles : public testing::TestWithParam<Config> {};

TEST_P(CodegenCompiles, ToACubin) {
  auto [variantName, dtype, headDim, arch] = GetParam();
  Compiler compiler;
  tile::FuncOp func = compiler.build(*variants::byName(variantName), dtype, headDim, arch);
  ASSERT_TRUE(func);
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;

  StatusOr<std::string> cubin = compileCuda(kernel->source, kernel->info.entry + ".cu", arch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  // The entry symbol is in the cubin's string table.
  EXPECT_NE(cubin->find(kernel->info.entry), std::string::npos);
}

std::string configName(const testing::TestParamInfo<Config> &info) {
  auto [variant, dtype, headDim, arch] = info.param;
  return variant + "_" + (dtype == ElementType::BF16 ? "bf16" : "f16") + "_d" + std::to_string(headDim) + "_" + arch;
}

INSTANTIATE_TEST_SUITE_P(Fa2, CodegenCompiles,
                         testing::Combine(testing::Values("none", "causal"),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(64, 128), testing::Values("sm_80", "sm_90a", "sm_100a")),
                         configName);

// Every other built-in variant: bf16 at both head dims for every target; combinations (their hooks are the ones
// above, composed by flashtile::both) and the per-batch ALiBi indexing once each.
INSTANTIATE_TEST_SUITE_P(Fa2Variants, CodegenCompiles,
                         testing::Combine(testing::Values("causal_top_left", "sliding_window", "softcap", "alibi",
                                                          "sinks", "document_mask"),
                                          testing::Values(ElementType::BF16), testing::Values(64, 128),
                                          testing::Values("sm_80", "sm_90a", "sm_100a")),
                         configName);
INSTANTIATE_TEST_SUITE_P(Fa2CombinedVariants, CodegenCompiles,
                         testing::Combine(testing::Values("sliding_window_causal", "softcap_causal", "alibi_causal",
                                                          "alibi_per_batch", "sinks_causal"),
                                          testing::Values(ElementType::BF16), testing::Values(128),
                                          testing::Values("sm_90a")),
                         configName);

// fa3 lowered to the sm90 family (wgmma, TMA, mbarriers, setmaxnreg): every built-in variant compiles to an sm_90a
// cubin, and the kernel takes the TMA descriptors of Q, K and V. bench/device/fa3-bench.sh runs them on the H200.
using Fa3Config = std::tuple<std::string, ElementType, int, int>; // variant, dtype, head dim, head dim v

class Fa3Compiles : public testing::TestWithParam<Fa3Config> {};

TEST_P(Fa3Compiles, ToAnSm90aCubin) {
  auto [variantName, dtype, headDim, headDimV] = GetParam();
  Compiler compiler;
  compiler.headDimV = headDimV;
  tile::FuncOp func = compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a");
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  EXPECT_EQ(plans::mainLaunch(kernel->info).tensorMaps.size(), 3u);
  // A producer warpgroup and a consumer warpgroup per 64 rows (three at head dims up to 96 unless the program bounds
  // keys from below, else two; 96-key tiles with three at 96).
  EXPECT_EQ(plans::mainLaunch(kernel->info).threads, 128 + 2 * kernel->info.blockM);
  const bool banded = variantName.starts_with("sliding_window") || variantName == "document_mask";
  EXPECT_EQ(kernel->info.blockM, headDim <= 96 && !banded ? 192 : 128);
  if (headDim == 96 && !banded)
    EXPECT_EQ(kernel->info.blockN, 96);
  // 112 keys at head dim 192 (192:192, FA4's width there; measured faster than 80 from 8k), 80 at 192:128 and 256.
  if (headDim > 128)
    EXPECT_EQ(kernel->info.blockN, headDim == 192 && (headDimV == 0 || headDimV == 192) && !banded ? 112 : 80);
  // Head dims that are not whole 64-column blocks read 64-byte swizzled tiles: the descriptors say so to the runtime.
  const int span = headDim % 64 == 0 && (headDimV ? headDimV : headDim) % 64 == 0 ? 128 : 64;
  for (const PlanTensorMap &map : plans::mainLaunch(kernel->info).tensorMaps)
    EXPECT_EQ(map.swizzleBytes, span) << map.tensor;
  EXPECT_EQ(kernel->source.find("kMajorStep<64>(") != std::string::npos, span == 64);
  EXPECT_TRUE(kernel->info.verify().ok()) << kernel->info.verify().message();
  EXPECT_NE(kernel->source.find("const __grid_constant__ sm90::TensorMaps maps"), std::string::npos);
  std::string log;
  StatusOr<std::string> cubin =
      compileCuda(kernel->source, kernel->info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin, {}, &log);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  EXPECT_FALSE(reportsSerializedWgmma(log)) << log;
}

std::string fa3ConfigName(const testing::TestParamInfo<Fa3Config> &info) {
  auto [variant, dtype, headDim, headDimV] = info.param;
  return variant + (dtype == ElementType::BF16 ? "_bf16_d" : "_f16_d") + std::to_string(headDim) +
         (headDimV && headDimV != headDim ? "_dv" + std::to_string(headDimV) : "");
}

INSTANTIATE_TEST_SUITE_P(Fa3Variants, Fa3Compiles,
                         testing::Combine(testing::Values("none", "causal", "causal_top_left", "sliding_window",
                                                          "sliding_window_causal", "softcap", "softcap_causal",
                                                          "alibi", "alibi_per_batch", "alibi_causal", "sinks",
                                                          "sinks_causal", "document_mask"),
                                          testing::Values(ElementType::BF16), testing::Values(128),
                                          testing::Values(128)),
                         fa3ConfigName);
INSTANTIATE_TEST_SUITE_P(Fa3HeadDims, Fa3Compiles,
                         testing::Values(Fa3Config{"causal", ElementType::F16, 64, 64},
                                         Fa3Config{"none", ElementType::BF16, 256, 256},
                                         Fa3Config{"causal", ElementType::BF16, 192, 128},
                                         Fa3Config{"causal", ElementType::F16, 96, 96},
                                         Fa3Config{"none", ElementType::F16, 32, 32},
                                         Fa3Config{"softcap_causal", ElementType::BF16, 192, 192},
                                         Fa3Config{"alibi", ElementType::F16, 192, 192},
                                         Fa3Config{"sliding_window", ElementType::BF16, 192, 192}),
                         fa3ConfigName);
// The head dims of 64-byte swizzled tiles (codegen/sm90/README.md): every built-in variant at 96 and 32.
INSTANTIATE_TEST_SUITE_P(Fa3NarrowSwizzle, Fa3Compiles,
                         testing::Combine(testing::Values("none", "causal", "causal_top_left", "sliding_window",
                                                          "sliding_window_causal", "softcap", "softcap_causal",
                                                          "alibi", "alibi_per_batch", "alibi_causal", "sinks",
                                                          "sinks_causal", "document_mask"),
                                          testing::Values(ElementType::BF16), testing::Values(96, 32),
                                          testing::Values(0)), // 0: head dim v = head dim
                         fa3ConfigName);

// fa3 in e4m3 (docs/fp8.md): every built-in variant at head dim 128 and the head dims 64, 96, 192, 256 compile to
// sm_90a cubins without serialized wgmmas. The module is two kernels: the Vᵀ prepass (`_vt`, first) and the
// attention kernel with k32 wgmmas, taking FlashtileFp8Params last; the plan binds the Vᵀ workspace. GQA/MQA and
// varlen are the same kernel (the K/V head and the sequence's rows are kernel arguments), so they compile here too.
using Fa3E4m3Config = std::tuple<std::string, int, int>; // variant, head dim, head dim v

class Fa3E4m3Compiles : public testing::TestWithParam<Fa3E4m3Config> {};

TEST_P(Fa3E4m3Compiles, ToAnSm90aCubin) {
  auto [variantName, headDim, headDimV] = GetParam();
  Compiler compiler;
  compiler.headDimV = headDimV;
  tile::FuncOp func = compiler.buildWith("fa3", *variants::byName(variantName), ElementType::E4M3, headDim, "sm_90a");
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const KernelInfo &info = kernel->info;
  EXPECT_EQ(info.dtype, "e4m3");
  EXPECT_EQ(info.blockN % 32, 0) << "P·V reduces over k32 steps";
  ASSERT_EQ(plans::launchedEntries(info), (std::vector<std::string>{info.entry + "_vt", info.entry}));
  EXPECT_EQ(info.plan.launches[0].grid[0].text(), "cdiv(keys, " + std::to_string(info.blockN) + ")");
  EXPECT_TRUE(plans::bindsField(info, "vTransposed"));
  // Q's and K's span: the widest of 128, 64, 32 bytes dividing both head dims (8-bit elements: bytes = columns).
  const int dv = headDimV ? headDimV : headDim;
  const int rowBytes = std::gcd(headDim, dv);
  const int span = rowBytes % 128 == 0 ? 128 : rowBytes % 64 == 0 ? 64 : 32;
  for (const PlanTensorMap &map : plans::mainLaunch(info).tensorMaps)
    EXPECT_EQ(map.swizzleBytes, span) << map.tensor;
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  ASSERT_TRUE(KernelInfo::parse(info.serialize()).ok());
  EXPECT_TRUE(plans::bindsField(*KernelInfo::parse(info.serialize()), "vTransposed"));
  // 8-bit wgmmas only, O never staged in the (8-bit) sQ.
  EXPECT_EQ(count(kernel->source, "sm90::warpgroup::Wgmma<"), 0);
  EXPECT_EQ(count(kernel->source, "sm90::warp::stmatrixX4(sm90::smemAddress(sQ)"), 0);
  EXPECT_GT(count(kernel->source, "WgmmaE4m3<kBlockN>::ss("), 0);
  EXPECT_GT(count(kernel->source, "WgmmaE4m3<kHeadDimV>::rs("), 0);
  // Once per tile setup (a persistent kernel's roles each set up every tile they take).
  EXPECT_GE(count(kernel->source, "const float qkDescale ="), 1);
  EXPECT_EQ(count(kernel->source, "const float qkDescale ="), count(kernel->source, "const int hKv ="));
  EXPECT_NE(kernel->source.find(", const __grid_constant__ sm90::TensorMaps maps, const FlashtileFp8Params fp8)"),
            std::string::npos);
  std::string log;
  StatusOr<std::string> cubin =
      compileCuda(kernel->source, info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin, {}, &log);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  EXPECT_NE(cubin->find(info.entry + "_vt"), std::string::npos);
  EXPECT_FALSE(reportsSerializedWgmma(log)) << log;
}

std::string fa3E4m3ConfigName(const testing::TestParamInfo<Fa3E4m3Config> &info) {
  auto [variant, headDim, headDimV] = info.param;
  return variant + "_e4m3_d" + std::to_string(headDim) +
         (headDimV && headDimV != headDim ? "_dv" + std::to_string(headDimV) : "");
}

INSTANTIATE_TEST_SUITE_P(Fa3E4m3Variants, Fa3E4m3Compiles,
                         testing::Combine(testing::Values("none", "causal", "causal_top_left", "sliding_window",
                                                          "sliding_window_causal", "softcap", "softcap_causal",
                                                          "alibi", "alibi_per_batch", "alibi_causal", "sinks",
                                                          "sinks_causal", "document_mask"),
                                          testing::Values(128), testing::Values(0)),
                         fa3E4m3ConfigName);
INSTANTIATE_TEST_SUITE_P(Fa3E4m3HeadDims, Fa3E4m3Compiles,
                         testing::Combine(testing::Values("none", "causal", "sliding_window", "softcap"),
                                          testing::Values(64, 96, 192, 256), testing::Values(0)),
                         fa3E4m3ConfigName);
INSTANTIATE_TEST_SUITE_P(Fa3E4m3MixedHeadDims, Fa3E4m3Compiles,
                         testing::Values(Fa3E4m3Config{"causal", 192, 128}), fa3E4m3ConfigName);

// fa3's dynamic scheduler (--scheduler dynamic): every built-in variant's persistent kernel takes its Q tiles from
// the launch's counter (one atomicAdd by the producer) and hands them to the consumers through the work queue's
// cell and barriers; each compiles to an sm_90a cubin and says in its KernelInfo that it needs the counter.
class Fa3DynamicCompiles : public testing::TestWithParam<Fa3Config> {};

TEST_P(Fa3DynamicCompiles, ToAnSm90aCubin) {
  auto [variantName, dtype, headDim, headDimV] = GetParam();
  Compiler compiler;
  compiler.headDimV = headDimV;
  tile::FuncOp func =
      compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a", {{"scheduler", 1}});
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  EXPECT_TRUE(plans::setsField(kernel->info, "qTiles"));
  EXPECT_TRUE(plans::bindsField(kernel->info, "tileCounter"));
  EXPECT_TRUE(kernel->info.verify().ok()) << kernel->info.verify().message();
  EXPECT_TRUE(KernelInfo::parse(kernel->info.serialize()).ok());
  EXPECT_TRUE(plans::bindsField(*KernelInfo::parse(kernel->info.serialize()), "tileCounter"));
  EXPECT_EQ(count(kernel->source, "atomicAdd(params.tileCounter, 1)"), 2); // the first take, and past empty tiles
  EXPECT_EQ(count(kernel->source, "*workCell = unit;"), 1);
  EXPECT_EQ(count(kernel->source, "const int unit = *workCell;"), 1);
  std::string log;
  StatusOr<std::string> cubin =
      compileCuda(kernel->source, kernel->info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin, {}, &log);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  EXPECT_FALSE(reportsSerializedWgmma(log)) << log;
}

INSTANTIATE_TEST_SUITE_P(Fa3DynamicVariants, Fa3DynamicCompiles,
                         testing::Combine(testing::Values("none", "causal", "causal_top_left", "sliding_window",
                                                          "sliding_window_causal", "softcap", "softcap_causal", "alibi",
                                                          "alibi_per_batch", "alibi_causal", "sinks", "sinks_causal",
                                                          "document_mask"),
                                          testing::Values(ElementType::BF16), testing::Values(128),
                                          testing::Values(128)),
                         fa3ConfigName);
INSTANTIATE_TEST_SUITE_P(Fa3DynamicHeadDims, Fa3DynamicCompiles,
                         testing::Values(Fa3Config{"causal", ElementType::F16, 64, 64},
                                         Fa3Config{"sliding_window_causal", ElementType::BF16, 64, 64},
                                         Fa3Config{"none", ElementType::BF16, 256, 256},
                                         Fa3Config{"causal", ElementType::BF16, 192, 128}),
                         fa3ConfigName);

TEST(Codegen, Fa3SchedulerKnobTakesItsWordsAndNamesThemOtherwise) {
  const schedule::Schedule *fa3 = schedule::lookupSchedule("fa3");
  ASSERT_TRUE(fa3);
  std::string error;
  mlir::FailureOr<schedule::Knobs> dynamic = schedule::parseKnobs(*fa3, {"scheduler=dynamic"}, error);
  ASSERT_TRUE(mlir::succeeded(dynamic)) << error;
  EXPECT_EQ(dynamic->at("scheduler"), 1);
  mlir::FailureOr<schedule::Knobs> numeric = schedule::parseKnobs(*fa3, {"scheduler=0"}, error);
  ASSERT_TRUE(mlir::succeeded(numeric)) << error;
  EXPECT_EQ(numeric->at("scheduler"), 0);
  EXPECT_TRUE(mlir::failed(schedule::parseKnobs(*fa3, {"scheduler=lpt"}, error)));
  EXPECT_EQ(error, "fa3: option 'scheduler=lpt' is not of the form name=static|dynamic");
  error = schedule::checkKnobs(*fa3, {{"scheduler", 2}});
  EXPECT_NE(error.find("fa3: scheduler = 2 is not accepted; accepted: static, dynamic"), std::string::npos) << error;
  // Numeric knobs keep their messages.
  EXPECT_TRUE(mlir::failed(schedule::parseKnobs(*fa3, {"stages=two"}, error)));
  EXPECT_EQ(error, "fa3: option 'stages=two' is not of the form name=integer");
  // Dynamic hands tiles to persistent blocks: with persistent 0 it is refused, naming both knobs.
  Compiler compiler;
  EXPECT_FALSE(compiler.buildWith("fa3", variants::causal(), ElementType::BF16, 128, "sm_90a",
                                  {{"scheduler", 1}, {"persistent", 0}}));
  EXPECT_NE(compiler.diagnostics.find("fa3: scheduler = dynamic hands tiles to persistent blocks, but persistent = 0"),
            std::string::npos)
      << compiler.diagnostics;
  // The default stays static: no kernel asks for a counter.
  Compiler defaults;
  tile::FuncOp func = defaults.buildWith("fa3", variants::causal(), ElementType::BF16, 128, "sm_90a");
  ASSERT_TRUE(func) << defaults.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << defaults.diagnostics;
  EXPECT_FALSE(plans::bindsField(kernel->info, "tileCounter"));
  EXPECT_EQ(kernel->source.find("atomicAdd"), std::string::npos);
}

// FA4's partial software exp2 as an fa3 option (--exp2-poly-share N): the n8 tiles nt with nt % 8 < N of every score
// row take their exponentials from the cubic on the FMA pipe (sm90::math::exp2Poly3x2, two scalar calls: sm_90 has
// no packed fp32), the rest MUFU; every such kernel compiles to an sm_90a cubin. Without the knob the kernel has no
// software exp2 at all (its text is what it was), and a share past 8 is refused by name.
class Fa3Exp2PolyCompiles : public testing::TestWithParam<std::tuple<const char *, int, int>> {};

TEST_P(Fa3Exp2PolyCompiles, ToAnSm90aCubin) {
  auto [variantName, headDim, share] = GetParam();
  Compiler compiler;
  tile::FuncOp func = compiler.buildWith("fa3", *variants::byName(variantName), ElementType::BF16, headDim, "sm_90a",
                                         {{"exp2-poly-share", share}});
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  EXPECT_NE(kernel->source.find("if (nt % 8 < " + std::to_string(share) + ") {"), std::string::npos);
  EXPECT_NE(kernel->source.find("sm90::math::exp2Poly3x2("), std::string::npos);
  EXPECT_NE(kernel->source.find("__device__ __forceinline__ float exp2Poly3(float x)"), std::string::npos);
  StatusOr<std::string> cubin = compileCuda(kernel->source, kernel->info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));

  Compiler plainCompiler;
  tile::FuncOp plain =
      plainCompiler.buildWith("fa3", *variants::byName(variantName), ElementType::BF16, headDim, "sm_90a");
  ASSERT_TRUE(plain) << plainCompiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> mufuOnly = codegen::emitCuda(plain);
  ASSERT_TRUE(mlir::succeeded(mufuOnly)) << plainCompiler.diagnostics;
  EXPECT_EQ(mufuOnly->source.find("exp2Poly3"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fa3Exp2Poly, Fa3Exp2PolyCompiles,
                         testing::Values(std::tuple{"none", 128, 2}, std::tuple{"causal", 64, 4},
                                         std::tuple{"softcap", 128, 2}, std::tuple{"softcap_causal", 64, 8},
                                         std::tuple{"sliding_window_causal", 128, 1}, std::tuple{"sinks", 128, 4}),
                         [](const testing::TestParamInfo<std::tuple<const char *, int, int>> &info) {
                           return std::string(std::get<0>(info.param)) + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_share" +
                                  std::to_string(std::get<2>(info.param));
                         });

/// The CUDA of the fa3 forward's kernel of a case without knobs (empty, with a failure recorded, if it does not build).
std::string fa3DefaultCuda(const char *variantName, ElementType dtype, int headDim) {
  Compiler compiler;
  tile::FuncOp func = compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a");
  EXPECT_TRUE(func) << compiler.diagnostics;
  if (!func)
    return {};
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  EXPECT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  return mlir::succeeded(kernel) ? kernel->source : std::string();
}

/// Compiles `cuda` to an sm_90a cubin with NVRTC and expects no serialized-wgmma advisory from ptxas.
void expectCubinWithoutSerializedWgmma(const std::string &cuda, const std::string &entry) {
  std::string log;
  StatusOr<std::string> cubin = compileCuda(cuda, entry + ".cu", "sm_90a", NvrtcOutput::Cubin, {}, &log);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << cuda;
  EXPECT_FALSE(reportsSerializedWgmma(log)) << log;
}

/// The test name of a (variant, head dim, dtype) case: variant_dN_dtype.
std::string variantHeadDimDtypeName(const testing::TestParamInfo<std::tuple<const char *, int, ElementType>> &info) {
  auto [variant, headDim, dtype] = info.param;
  return std::string(variant) + "_d" + std::to_string(headDim) + "_" +
         (dtype == ElementType::BF16  ? "bf16"
          : dtype == ElementType::F16 ? "f16"
                                      : "e4m3");
}

// desc-advance 1 (the fa3 forward): each GEMM's wgmma descriptors made once and advanced by one 64-bit add a k step
// (FA4's form: ptxas issues one UIADD3.64 instead of moving the constant high word in before every wgmma), for Q·Kᵀ
// and P·V, at the 128- and 64-byte spans and for e4m3 (P·V's Vᵀ image K-major); every such kernel compiles without a
// serialization advisory. Without the knob the GEMMs encode each step's descriptor as before (the default's CUDA is
// byte-identical: scripts/emit-matrix.py), and the backward refuses the knob by name.
class Fa3DescAdvanceCompiles : public testing::TestWithParam<std::tuple<const char *, int, ElementType>> {};

TEST_P(Fa3DescAdvanceCompiles, ToAnSm90aCubin) {
  auto [variantName, headDim, dtype] = GetParam();
  Compiler compiler;
  tile::FuncOp func =
      compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a", {{"desc-advance", 1}});
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &cuda = kernel->source;
  EXPECT_GE(count(cuda, "sm90::desc::advance(qDesc, "), 1);
  EXPECT_GE(count(cuda, "sm90::desc::advance(kDesc, "), 1);
  EXPECT_GE(count(cuda, "sm90::desc::advance(vDesc, "), 1);
  EXPECT_EQ(count(cuda, "sm90::desc::kMajorStep"), 0);
  EXPECT_EQ(count(cuda, "sm90::desc::mnMajorStep"), 0);
  expectCubinWithoutSerializedWgmma(cuda, kernel->info.entry);
  EXPECT_EQ(fa3DefaultCuda(variantName, dtype, headDim).find("sm90::desc::advance("), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fa3DescAdvance, Fa3DescAdvanceCompiles,
                         testing::Values(std::tuple{"none", 128, ElementType::BF16},
                                         std::tuple{"softcap_causal", 64, ElementType::F16},
                                         std::tuple{"alibi_causal", 96, ElementType::BF16},
                                         std::tuple{"sliding_window", 256, ElementType::BF16},
                                         std::tuple{"causal", 192, ElementType::BF16},
                                         std::tuple{"none", 128, ElementType::E4M3}),
                         variantHeadDimDtypeName);

// max-chains 2 or 4 (the fa3 forward): each row's max over a K/V tile in that many chains of n8 tiles (nt % chains),
// combined at the end, so that the exponentials wait for a quarter (or half) of the dependent max steps; every such
// kernel compiles to an sm_90a cubin. Without the knob the one chain a row is printed as before (the default's CUDA is
// byte-identical: scripts/emit-matrix.py).
class Fa3MaxChainsCompiles : public testing::TestWithParam<std::tuple<const char *, int, ElementType, int>> {};

TEST_P(Fa3MaxChainsCompiles, ToAnSm90aCubin) {
  auto [variantName, headDim, dtype, chains] = GetParam();
  Compiler compiler;
  tile::FuncOp func =
      compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a", {{"max-chains", chains}});
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &cuda = kernel->source;
  const std::string n = std::to_string(chains);
  EXPECT_GE(
      count(cuda, "chainMax[nt % " + n + "] = nt < " + n + " ? pairMax : fmaxf(chainMax[nt % " + n + "], pairMax);"),
      1);
  EXPECT_EQ(count(cuda, "tileMax = fmaxf(tileMax, "), 0);
  EXPECT_EQ(count(cuda, "float chainMax[" + n + "];"), count(cuda, "const float tileMax = fmaxf("));
  StatusOr<std::string> cubin = compileCuda(cuda, kernel->info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << cuda;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));

  const std::string oneChain = fa3DefaultCuda(variantName, dtype, headDim);
  EXPECT_EQ(oneChain.find("chainMax"), std::string::npos);
  EXPECT_GE(count(oneChain, "tileMax = fmaxf(tileMax, "), 1);
}

INSTANTIATE_TEST_SUITE_P(Fa3MaxChains, Fa3MaxChainsCompiles,
                         testing::Values(std::tuple{"none", 128, ElementType::E4M3, 4},
                                         std::tuple{"causal", 128, ElementType::E4M3, 2},
                                         std::tuple{"none", 64, ElementType::BF16, 4},
                                         std::tuple{"softcap_causal", 256, ElementType::BF16, 2},
                                         std::tuple{"sliding_window", 96, ElementType::F16, 4}),
                         [](const testing::TestParamInfo<std::tuple<const char *, int, ElementType, int>> &info) {
                           return std::string(std::get<0>(info.param)) + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  (std::get<2>(info.param) == ElementType::BF16  ? "bf16"
                                   : std::get<2>(info.param) == ElementType::F16 ? "f16"
                                                                                 : "e4m3") +
                                  "_c" + std::to_string(std::get<3>(info.param));
                         });

TEST(Codegen, Fa3MaxChainsRefusesOtherCountsByName) {
  for (int64_t chains : {3, 0}) {
    Compiler compiler;
    tile::FuncOp func = compiler.buildWith("fa3", *variants::byName("none"), ElementType::BF16, 128, "sm_90a",
                                           {{"max-chains", chains}});
    EXPECT_FALSE(func);
    EXPECT_NE(compiler.diagnostics.find("max-chains"), std::string::npos) << compiler.diagnostics;
  }
}

// lane-vote 1 (the fa3 forward with conditional rescaling): the warp votes from each lane's own max over its keys,
// and the quad's shuffles run inside `if (maxMoved)`, after the vote; every such kernel compiles to an sm_90a cubin.
// Without the knob the vote takes the quad maxima as before; with rescale-threshold 0 it is refused by name.
class Fa3LaneVoteCompiles : public testing::TestWithParam<std::tuple<const char *, int, ElementType>> {};

TEST_P(Fa3LaneVoteCompiles, ToAnSm90aCubin) {
  auto [variantName, headDim, dtype] = GetParam();
  schedule::Knobs knobs{{"lane-vote", 1}, {"max-chains", 4}};
  if (dtype != ElementType::E4M3)
    knobs["rescale-threshold"] = 8;
  Compiler compiler;
  tile::FuncOp func = compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a", knobs);
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &cuda = kernel->source;
  const size_t vote = cuda.find("maxMoved |= tileMax * scoreScale > rowMax[mt][r] + 8.f;");
  ASSERT_NE(vote, std::string::npos) << cuda;
  const size_t branch = cuda.find("if (maxMoved) {", vote), quad = cuda.find("quadMax(laneMax[mt][r])", vote);
  ASSERT_NE(quad, std::string::npos);
  EXPECT_LT(cuda.find("maxMoved = __any_sync(0xffffffffu, maxMoved);", vote), branch);
  EXPECT_LT(branch, quad);
  EXPECT_EQ(count(cuda, "quadMax(tileMax)"), 0);
  StatusOr<std::string> cubin = compileCuda(cuda, kernel->info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << cuda;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));

  Compiler plainCompiler;
  tile::FuncOp plain = plainCompiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a",
                                               dtype != ElementType::E4M3 ? schedule::Knobs{{"rescale-threshold", 8}}
                                                                          : schedule::Knobs{});
  ASSERT_TRUE(plain) << plainCompiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> quadVote = codegen::emitCuda(plain);
  ASSERT_TRUE(mlir::succeeded(quadVote)) << plainCompiler.diagnostics;
  EXPECT_EQ(quadVote->source.find("laneMax"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fa3LaneVote, Fa3LaneVoteCompiles,
                         testing::Values(std::tuple{"none", 128, ElementType::E4M3},
                                         std::tuple{"causal", 256, ElementType::E4M3},
                                         std::tuple{"softcap", 64, ElementType::BF16}),
                         variantHeadDimDtypeName);

TEST(Codegen, Fa3LaneVoteWithoutConditionalRescalingIsRefusedByName) {
  Compiler compiler;
  tile::FuncOp func =
      compiler.buildWith("fa3", *variants::byName("none"), ElementType::BF16, 128, "sm_90a", {{"lane-vote", 1}});
  EXPECT_FALSE(func);
  EXPECT_NE(compiler.diagnostics.find("lane-vote = 1"), std::string::npos) << compiler.diagnostics;
  EXPECT_NE(compiler.diagnostics.find("rescale-threshold"), std::string::npos) << compiler.diagnostics;
}

// late-pv-wait 1 (the fa3 forward): a kept branch (never taken) before each wait for P·V that follows a softmax in a
// loop without a mask, so that ptxas cannot hoist that wait above the softmax's exponentials; the kernels where it
// adds no spills (non-causal at head dims 64-128: causal, 192 and 256 spill with it) compile to sm_90a cubins
// without a serialization advisory, and without the knob no such branch is printed.
class Fa3LatePvWaitCompiles : public testing::TestWithParam<std::tuple<const char *, int, ElementType>> {};

TEST_P(Fa3LatePvWaitCompiles, ToAnSm90aCubin) {
  auto [variantName, headDim, dtype] = GetParam();
  Compiler compiler;
  tile::FuncOp func =
      compiler.buildWith("fa3", *variants::byName(variantName), dtype, headDim, "sm_90a", {{"late-pv-wait", 1}});
  ASSERT_TRUE(func) << compiler.diagnostics;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &cuda = kernel->source;
  // Each wait for P·V (a wait followed by acc's fence) has the branch on the line before it.
  std::vector<std::string> lines;
  for (size_t at = 0; at < cuda.size();) {
    size_t end = cuda.find('\n', at);
    end = end == std::string::npos ? cuda.size() : end;
    lines.push_back(cuda.substr(at, end - at));
    at = end + 1;
  }
  // (the interior segment's loops: the ones whose comment says "no mask").
  int interiorWaits = 0, fenced = 0;
  bool interior = false;
  for (size_t i = 2; i < lines.size(); ++i) {
    if (lines[i].find("// ---- K/V tiles [") != std::string::npos)
      interior = lines[i].find("no mask") != std::string::npos;
    if (lines[i].find("fenceOperands(reinterpret_cast<float (&)[kOTiles * 4]>(acc[0]));") != std::string::npos &&
        lines[i - 1].find("sm90::warpgroup::wait<") != std::string::npos) {
      bool branch = lines[i - 2].find("if (p.seqlenK < 0) __trap();") != std::string::npos;
      bool softmaxBefore = false;
      for (size_t k = i; k-- > 0 && lines[k].find("// ---- K/V tiles [") == std::string::npos;)
        softmaxBefore |= lines[k].find("online softmax") != std::string::npos;
      bool wanted = interior && softmaxBefore;
      interiorWaits += wanted;
      fenced += branch;
      EXPECT_EQ(branch, wanted) << "line " << i;
    }
  }
  EXPECT_GE(interiorWaits, 1);
  EXPECT_EQ(fenced, interiorWaits);
  EXPECT_EQ(count(cuda, "__trap();"), interiorWaits);
  expectCubinWithoutSerializedWgmma(cuda, kernel->info.entry);
  EXPECT_EQ(fa3DefaultCuda(variantName, dtype, headDim).find("__trap()"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fa3LatePvWait, Fa3LatePvWaitCompiles,
                         testing::Values(std::tuple{"none", 128, ElementType::E4M3},
                                         std::tuple{"none", 128, ElementType::BF16},
                                         std::tuple{"softcap", 64, ElementType::F16},
                                         std::tuple{"none", 96, ElementType::BF16}),
                         variantHeadDimDtypeName);

TEST(Codegen, Fa3Exp2PolyShareOutOfRangeIsRefusedByName) {
  const schedule::Schedule *fa3 = schedule::lookupSchedule("fa3");
  ASSERT_TRUE(fa3);
  std::string error = schedule::checkKnobs(*fa3, {{"exp2-poly-share", 9}});
  EXPECT_NE(error.find("exp2-poly-share"), std::string::npos) << error;
  EXPECT_NE(error.find("8"), std::string::npos) << error;
}

TEST(Codegen, Fa3NamesTheHeadDimsTheSm90FamilyCannotPrint) {
  Compiler compiler;
  // Head dim 80 is neither whole 128-byte nor whole 64-byte swizzle blocks: the sm90 family names the rule.
  EXPECT_FALSE(compiler.buildWith("fa3", variants::causal(), ElementType::BF16, 80, "sm_90a"));
  EXPECT_NE(compiler.diagnostics.find("sm90: head_dim (80) must be a multiple of 32 up to 256 (whole column blocks "
                                      "of the 128-byte or the 64-byte swizzle)"),
            std::string::npos)
      << compiler.diagnostics;
}

// Every other supported head dim and the 192/128 pair (Runtime.h): all on sm_90a, a subset on sm_80 and sm_100a
// (NVRTC takes 0.3-0.9 s a kernel). Causal, so that the masked boundary segments are printed too.
using HeadDimConfig = std::tuple<int, int, std::string>; // head dim, head dim v, arch

class CodegenCompilesHeadDims : public testing::TestWithParam<HeadDimConfig> {};

TEST_P(CodegenCompilesHeadDims, ToACubin) {
  auto [headDim, headDimV, arch] = GetParam();
  Compiler compiler;
  compiler.headDimV = headDimV;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, headDim, arch);
  ASSERT_TRUE(func);
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const KernelInfo &info = kernel->info;
  EXPECT_EQ(info.headDim, headDim);
  EXPECT_EQ(info.headDimV, headDimV);
  EXPECT_EQ(info.entry, "flashtile_fa2_causal_bf16_d" + std::to_string(headDim) +
                            (headDimV != headDim ? "_dv" + std::to_string(headDimV) : ""));
  fa2::Fa2Config config = fa2::Fa2Config::defaultsFor(headDim, headDimV);
  EXPECT_EQ(plans::mainLaunch(info).smemBytes, sm80SmemBytes(config, headDim, headDimV));
  StatusOr<std::string> cubin = compileCuda(kernel->source, info.entry + ".cu", arch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
}

std::string headDimConfigName(const testing::TestParamInfo<HeadDimConfig> &info) {
  auto [headDim, headDimV, arch] = info.param;
  // Appended, not concatenated: GCC 12 reports a false -Wrestrict on `"d" + std::to_string(...)` here.
  std::string name = "d";
  name += std::to_string(headDim);
  name += "_dv";
  name += std::to_string(headDimV);
  name += "_";
  name += arch;
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fa2, CodegenCompilesHeadDims,
                         testing::Values(HeadDimConfig{32, 32, "sm_90a"}, HeadDimConfig{96, 96, "sm_90a"},
                                         HeadDimConfig{192, 192, "sm_90a"}, HeadDimConfig{256, 256, "sm_90a"},
                                         HeadDimConfig{192, 128, "sm_90a"}, HeadDimConfig{32, 32, "sm_80"},
                                         HeadDimConfig{256, 256, "sm_80"}, HeadDimConfig{192, 128, "sm_80"},
                                         HeadDimConfig{96, 96, "sm_100a"}, HeadDimConfig{192, 128, "sm_100a"}),
                         headDimConfigName);

//===----------------------------------------------------------------------===//
// What the kernel says about itself, and what its source looks like
//===----------------------------------------------------------------------===//

TEST(Codegen, KernelInfoDescribesTheLaunch) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 128, "sm_90a");
  ASSERT_TRUE(func);
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const KernelInfo &info = kernel->info;
  EXPECT_EQ(info.entry, "flashtile_fa2_causal_bf16_d128");
  EXPECT_EQ(info.arch, "sm_90a");
  EXPECT_EQ(info.dtype, "bf16");
  EXPECT_EQ(info.headDim, 128);
  EXPECT_EQ(info.headDimV, 128);
  EXPECT_EQ(info.variant, "causal");
  EXPECT_EQ(info.schedule, "fa2");
  EXPECT_EQ(info.shapeClass, "default");
  fa2::Fa2Config config = fa2::Fa2Config::defaultsFor(128, 128);
  EXPECT_EQ(info.blockM, config.blockM);
  EXPECT_EQ(info.blockN, config.blockN);
  EXPECT_EQ(plans::mainLaunch(info).threads, config.threads());
  EXPECT_EQ(plans::mainLaunch(info).smemBytes, sm80SmemBytes(config, 128, 128));
  EXPECT_TRUE(info.paramNames.empty());
  EXPECT_EQ(info.compilerVersion, compilerVersion());
  Status valid = info.verify();
  EXPECT_TRUE(valid.ok()) << valid.message();
}

TEST(Codegen, SourceFollowsTheScheduledIr) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::F16, 64, "sm_80");
  ASSERT_TRUE(func);
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &src = kernel->source;
  // Host and device agree on the parameters: the struct is KernelAbi.h, verbatim.
  EXPECT_NE(src.find(codegen::kKernelAbiText), std::string::npos);
  EXPECT_NE(src.find("extern \"C\" __global__ void __launch_bounds__(128) flashtile_fa2_causal_f16_d64("
                     "const FlashtileFwdParams params)"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"), std::string::npos);
  EXPECT_NE(src.find("sm80::mmaF16(score"), std::string::npos);
  // Two descending segments, the mask only in the tail boundary one; the variant's predicate printed once.
  EXPECT_EQ(count(src, "// ---- K/V tiles"), 2) << src;
  EXPECT_NE(src.find("for (int j = tailBoundaryEnd - 1; j >= tailBoundaryBegin; --j)"), std::string::npos) << src;
  EXPECT_NE(src.find("for (int j = tailBoundaryBegin - 1; j >= interiorBegin; --j)"), std::string::npos) << src;
  EXPECT_EQ(count(src, "__device__ __forceinline__ bool keep("), 1) << src;
  EXPECT_EQ(count(src, "!keep(b, h, q, kv, p)"), 1) << src;
  size_t interior = src.find("interior segment");
  ASSERT_NE(interior, std::string::npos);
  EXPECT_EQ(src.find("keep(b, h, q, ", interior), std::string::npos) << "the interior segment is masked";
  // One commit group per copy, whether or not the predicate lets it copy anything.
  EXPECT_EQ(count(src, "sm80::cpAsyncCommit();"), 2 + 2 * 2) << src;
  EXPECT_NE(src.find("sm80::cpAsyncWait<1>();"), std::string::npos);
  // Printing is deterministic: the same IR gives the same text.
  auto again = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(again));
  EXPECT_EQ(again->source, src);
}

/// A variant with a score modifier and a parameter: the modifier becomes a __device__ function reading
/// p.variantParams, and KernelInfo lists the parameter.
TEST(Codegen, ScoreModifierAndParameters) {
  Variant softcap =
      Variant("softcap").param("cap", 30.f).score([](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) {
        return p["cap"] * dsl::tanh(s / p["cap"]);
      });
  Compiler compiler;
  tile::FuncOp func = compiler.build(softcap, ElementType::BF16, 64, "sm_90a");
  ASSERT_TRUE(func);
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &src = kernel->source;
  EXPECT_EQ(kernel->info.paramNames, std::vector<std::string>{"cap"});
  EXPECT_EQ(count(src, "__device__ __forceinline__ float scoreMod(float score, int b, int h, int q, int kv, "
                       "const FlashtileSequence &p)"),
            1)
      << src;
  EXPECT_NE(src.find("tileTanh("), std::string::npos) << src;
  EXPECT_NE(src.find("p.variantParams[0]"), std::string::npos) << src;
  // The modifier needs scaled scores: s / cap takes the scale as s / (cap·(1/scale)) (no multiply per score for
  // it), and the softmax multiplies by log2(e) only.
  EXPECT_NE(src.find("tileTanh(score / (p.variantParams[0] * p.invSoftmaxScale))"), std::string::npos) << src;
  EXPECT_EQ(src.find("*= p.softmaxScale"), std::string::npos) << src;
  EXPECT_NE(src.find("const float scoreScale = sm80::kLog2e;"), std::string::npos) << src;
  StatusOr<std::string> cubin = compileCuda(src, kernel->info.entry + ".cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n" << src;
}

/// An accumulator outside registers (FA4's tensor memory) is refused by name: the registered targets keep the whole
/// state in registers.
TEST(Codegen, AnAccumulatorOutsideRegistersIsRefused) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(Variant("plain"), ElementType::BF16, 64, "sm_90a");
  ASSERT_TRUE(func);
  auto inTensorMemory = [](mlir::Value v) {
    if (auto acc = mlir::dyn_cast<tile::AccType>(v.getType()))
      v.setType(tile::AccType::get(v.getContext(), acc.getRows(), acc.getCols(), tile::MemorySpace::Tensor));
  };
  func.walk([&](mlir::Operation *op) {
    for (mlir::Value v : op->getResults())
      inTensorMemory(v);
    for (mlir::Region &region : op->getRegions())
      for (mlir::BlockArgument arg : region.getArguments())
        inTensorMemory(arg);
  });
  auto kernel = codegen::emitCuda(func);
  EXPECT_TRUE(mlir::failed(kernel));
  EXPECT_NE(compiler.diagnostics.find("keeps the accumulator in tensor memory; the CUDA printer's targets keep the "
                                      "whole state in registers"),
            std::string::npos)
      << compiler.diagnostics;
}

/// Builds `variant`, prints its kernel into `src` and NVRTC-compiles that for `arch` (fails the test on any error).
void emitAndCompile(Compiler &compiler, const Variant &variant, int headDim, const char *arch, std::string &src) {
  tile::FuncOp func = compiler.build(variant, ElementType::BF16, headDim, arch);
  ASSERT_TRUE(func) << compiler.diagnostics;
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  src = kernel->source;
  StatusOr<std::string> cubin = compileCuda(src, kernel->info.entry + ".cu", arch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n" << src;
}

/// A score_mod or mask that reads an input per key gets keys past seqlen_k (a tile's padding, masked) as key
/// seqlen_k - 1, so its reads stay inside the array; one that reads per head or row gets kv as is.
TEST(Codegen, PerKeyInputsStayInBounds) {
  Variant perKey = Variant("key_bias")
                       .input("key_bias", dsl::ElementKind::F32)
                       .score([](dsl::Expr s, const dsl::Coords &c, const dsl::Params &p) {
                         return s + p.load("key_bias", c.sizes.keyOffset() + c.kv);
                       });
  Compiler compiler;
  for (auto [variant, clamped] : {std::pair{perKey, true}, std::pair{variants::alibi(), false}}) {
    std::string src;
    ASSERT_NO_FATAL_FAILURE(emitAndCompile(compiler, variant, 64, "sm_80", src));
    EXPECT_EQ(count(src, "(score[mt][nt][i], b, h, q, min(kv, p.seqlenK - 1), p);"), clamped ? 2 : 0) << src;
    // ALiBi's slopes are per head; its key arrives split for the float distance (FloatDistancesWithoutConversions).
    EXPECT_EQ(count(src, "(score[mt][nt][i], b, h, q, kvTile, kvStep, p);"), clamped ? 0 : 2) << src;
  }
  // The same for a mask: one reading an input per key gets clamped keys, document_mask (per query row) does not.
  Variant keyMask =
      Variant("key_mask").input("key_from", dsl::ElementKind::I32).mask([](const dsl::Coords &c, const dsl::Params &p) {
        return p.load("key_from", c.sizes.keyOffset() + c.kv) <= c.qAligned();
      });
  for (auto [variant, clamped] : {std::pair{keyMask, true}, std::pair{variants::documentMask(), false}}) {
    std::string src;
    ASSERT_NO_FATAL_FAILURE(emitAndCompile(compiler, variant, 64, "sm_80", src));
    EXPECT_EQ(count(src, "if ((kv >= p.seqlenK) | !keep(b, h, q, min(kv, p.seqlenK - 1), p))") > 0, clamped) << src;
    EXPECT_EQ(count(src, "if ((kv >= p.seqlenK) | !keep(b, h, q, kv, p))") > 0, !clamped) << src;
  }
}

/// ALiBi's float(|i' - kv|): kv = kvTile + kvStep, so the distance is float(i' - kvTile) (one value per row and K
/// tile) minus the constant kvStep, not an int-to-float conversion per score; kv-free conversions are left alone.
TEST(Codegen, FloatDistancesWithoutConversions) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::alibi(), ElementType::BF16, 128, "sm_90a");
  ASSERT_TRUE(func) << compiler.diagnostics;
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &src = kernel->source;
  EXPECT_NE(src.find("float scoreMod(float score, int b, int h, int q, int kvTile, int kvStep, "
                     "const FlashtileSequence &p) {\n  const int kv = kvTile + kvStep;\n"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("fabsf(static_cast<float>(((q + p.seqlenK) - p.seqlenQ) - kvTile) - static_cast<float>(kvStep))"),
            std::string::npos)
      << src;
  EXPECT_EQ(src.find("static_cast<float>(abs("), std::string::npos) << src;
  // ALiBi is additive: it runs on unscaled scores with 1/scale on the slope, and the scale joins log2(e) in the
  // softmax's exp2 multiplier (no multiply per score for it).
  EXPECT_NE(src.find("return score - ((static_cast<const float *>(p.inputs[0])[h] * p.invSoftmaxScale) * fabsf("),
            std::string::npos)
      << src;
  EXPECT_EQ(src.find("*= p.softmaxScale"), std::string::npos) << src;
  EXPECT_NE(src.find("const float scoreScale = p.scaleLog2;"), std::string::npos) << src;
  EXPECT_NE(src.find("const int kvTile = j * kBlockN + fragCol, kvStep = 8 * nt + i % 2;"), std::string::npos) << src;
  // A conversion that is not of a key distance (here of the head index) stays a conversion.
  Variant headBias = Variant("head_bias").score([](dsl::Expr s, const dsl::Coords &c, const dsl::Params &) {
    return s + dsl::toFloat(c.h);
  });
  tile::FuncOp other = compiler.build(headBias, ElementType::BF16, 128, "sm_90a");
  ASSERT_TRUE(other) << compiler.diagnostics;
  auto otherKernel = codegen::emitCuda(other);
  ASSERT_TRUE(mlir::succeeded(otherKernel)) << compiler.diagnostics;
  EXPECT_NE(otherKernel->source.find("return score + (static_cast<float>(h) * p.invSoftmaxScale);"), std::string::npos)
      << otherKernel->source;
  EXPECT_NE(otherKernel->source.find("(score[mt][nt][i], b, h, q, kv, p);"), std::string::npos);
  for (const std::string *text : {&src, static_cast<const std::string *>(&otherKernel->source)}) {
    StatusOr<std::string> cubin = compileCuda(*text, "float_key.cu", "sm_90a", NvrtcOutput::Cubin);
    ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n" << *text;
  }
}

/// A sliding window masks tiles at both ends: three segments, the head boundary one masked too.
TEST(Codegen, SlidingWindowHasThreeSegments) {
  constexpr int kLeft = 100;
  Variant window = Variant("window")
                       .mask([](const dsl::Coords &c, const dsl::Params &) {
                         auto i = c.qAligned();
                         return c.kv <= i && c.kv >= i - kLeft;
                       })
                       .kvRange([](const dsl::QTile &q, const dsl::Params &) {
                         return dsl::Range{q.firstAligned() - kLeft, q.lastAligned() + 1};
                       })
                       .fullRange([](const dsl::QTile &q, const dsl::Params &) {
                         return dsl::Range{q.lastAligned() - kLeft, q.firstAligned() + 1};
                       });
  Compiler compiler;
  tile::FuncOp func = compiler.build(window, ElementType::BF16, 128, "sm_80");
  ASSERT_TRUE(func);
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &src = kernel->source;
  EXPECT_EQ(count(src, "// ---- K/V tiles"), 3) << src;
  EXPECT_EQ(count(src, "!keep(b, h, q, kv, p)"), 2) << src;
  EXPECT_EQ(count(src, "__device__ __forceinline__ bool keep("), 1) << src;
  StatusOr<std::string> cubin = compileCuda(src, kernel->info.entry + ".cu", "sm_80", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n" << src;
}

/// Inputs and sinks: tile.input reads p.inputs[i] with the declared element type (in KV-range rules too), the sink
/// is a __device__ function that finalize calls once per thread, and KernelInfo lists the inputs in ABI order.
TEST(Codegen, InputsAndSinks) {
  Variant v = both(variants::sinks(), variants::documentMask(), "sinks_documents");
  Compiler compiler;
  tile::FuncOp func = compiler.build(v, ElementType::BF16, 64, "sm_80");
  ASSERT_TRUE(func);
  auto kernel = codegen::emitCuda(func);
  ASSERT_TRUE(mlir::succeeded(kernel)) << compiler.diagnostics;
  const std::string &src = kernel->source;
  EXPECT_EQ(kernel->info.inputNames, (std::vector<std::string>{"sinks", "doc_start"}));
  EXPECT_EQ(count(src, "__device__ __forceinline__ float sinkLogit(int b, int h, const FlashtileSequence &p)"), 1)
      << src;
  EXPECT_NE(src.find("return static_cast<const float *>(p.inputs[0])[h];"), std::string::npos) << src;
  // doc_start: once in the mask and in both KV-range rules, from the sequence's first key row (tile.dim
  // "key_offset": b * seqlen_k dense, cu_seqlens_k[b] varlen), computed once per block.
  EXPECT_EQ(count(src, "static_cast<const int *>(p.inputs[1])["), 3) << src;
  EXPECT_EQ(count(src, "static_cast<const int *>(p.inputs[1])[p.keyOffset + "), 3) << src;
  EXPECT_EQ(count(src, "FlashtileSequence p{params, blockBatch * params.seqlenK, 1.f / params.softmaxScale};"), 1)
      << src;
  EXPECT_EQ(count(src, "p.keyOffset = kBegin;"), 1) << src;
  // The mask's two conditions are evaluated without short-circuit (no branch per score around the load).
  EXPECT_NE(src.find("return (kv <= t0) & (kv >= static_cast<const int *>(p.inputs[1])"), std::string::npos) << src;
  size_t keepBegin = src.find("bool keep(");
  ASSERT_NE(keepBegin, std::string::npos);
  std::string keepText = src.substr(keepBegin, src.find("\n}", keepBegin) - keepBegin);
  EXPECT_EQ(keepText.find("&&"), std::string::npos) << keepText;
  EXPECT_EQ(count(src, "// ---- K/V tiles"), 3) << src;     // head boundary, interior, tail boundary
  EXPECT_EQ(count(src, "!keep(b, h, q, kv, p)"), 2) << src; // the interior is not masked
  EXPECT_EQ(count(src, "const float sinkLog2 = sinkLogit(b, h, p) * sm80::kLog2e;"), 1) << src;
  EXPECT_NE(src.find("const FlashtileSequence &p) {"), std::string::npos);
  StatusOr<std::string> cubin = compileCuda(src, kernel->info.entry + ".cu", "sm_80", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n" << src;
}

//===----------------------------------------------------------------------===//
// IR the printer cannot print
//===----------------------------------------------------------------------===//

TEST(Codegen, RejectsUnscheduledIr) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_80", Compiler::Upto::Unscheduled);
  ASSERT_TRUE(func);
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("is not scheduled; run the schedule's passes"), std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, RejectsUnpipelinedIr) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_80", Compiler::Upto::Scheduled);
  ASSERT_TRUE(func);
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("is not pipelined (no tile.copy_async); run the schedule's pipeline pass"),
            std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, RejectsIrWithoutTarget) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_80", Compiler::Upto::Pipelined);
  ASSERT_TRUE(func);
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("has no #tile.target; run tile-lower-to-target"), std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, ShapeClassNamesAreTheRuntimes) {
  // The IR's shape classes are the runtime's: kernel names and manifests carry the IR's name of a class, and the
  // runtime looks kernels up by its own (kShapeClasses). The count is also a static_assert in TileDialect.cpp.
  ASSERT_EQ(tile::getMaxEnumValForShapeClass() + 1, kShapeClasses.size());
  for (uint32_t c = 0; c < kShapeClasses.size(); ++c) {
    auto shapeClass = static_cast<tile::ShapeClass>(c);
    EXPECT_EQ(tile::stringifyShapeClass(shapeClass).str(), std::string(kShapeClasses[c]));
    EXPECT_EQ(tile::symbolizeShapeClass(kShapeClasses[c]), shapeClass);
  }
}

TEST(Codegen, KernelShapeCarriesTheIrsWarpLayout) {
  // The printers take the warp layout from KernelShape, not from blockM / warps: kernelShapeOf maps every layout the
  // IR can state to codegen's, under the IR's name (the families' refusals print it), with the IR's rows per warp.
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_80");
  ASSERT_TRUE(func);
  tile::ScheduleAttr s = func.getScheduleAttr();
  for (uint32_t v = 0; v <= tile::getMaxEnumValForWarpLayout(); ++v) {
    auto layout = static_cast<tile::WarpLayout>(v);
    int64_t rows = layout == tile::WarpLayout::SplitKeys ? s.getBlockM() : s.getBlockM() / 2;
    func.setScheduleAttr(tile::ScheduleAttr::get(&compiler.context, s.getName(), s.getBlockM(), s.getBlockN(),
                                                 s.getWarps(), layout, rows, s.getStages(), s.getRescaleThreshold(),
                                                 s.getMinBlocksPerSm(), s.getLptGroupBlocks(), s.getShapeClass()));
    codegen::KernelShape shape = schedule::kernelShapeOf(func);
    EXPECT_EQ(std::string(codegen::warpLayoutName(shape.warpLayout)), tile::stringifyWarpLayout(layout).str());
    EXPECT_EQ(shape.warpRows, rows);
  }
}

TEST(Codegen, RejectsUnknownInstructionFamily) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_90a");
  ASSERT_TRUE(func);
  func.setTargetAttr(tile::TargetAttr::get(&compiler.context, "sm_90a", "sm120"));
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find(
                "targets the 'sm120' instruction family, which is not registered; registered: sm100, sm80, sm90"),
            std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, TheSm100FamilyRefusesFa2sBlocks) {
  // fa2's program (no roles, cp.async waits) handed to the sm100 family: its shape check names the rule.
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_90a");
  ASSERT_TRUE(func);
  func.setTargetAttr(tile::TargetAttr::get(&compiler.context, "sm_100a", "sm100"));
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("one producer warpgroup plus one or two computing warpgroups of 128 rows each"),
            std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, TheSm90FamilyRefusesFa2sBlocks) {
  // fa2's program (no roles, cp.async waits) handed to the sm90 family: its shape check names the rule.
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_90a");
  ASSERT_TRUE(func);
  func.setTargetAttr(tile::TargetAttr::get(&compiler.context, "sm_90a", "sm90"));
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("a block is one producer warpgroup plus consumer warpgroups of 64 rows each"),
            std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, RejectsOpsItDoesNotKnow) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_80");
  ASSERT_TRUE(func);
  // An integer shift: valid IR, but not an op the printer knows.
  mlir::Block &body = func.getBodyBlock();
  mlir::OpBuilder b(&body, body.begin());
  mlir::Value one = mlir::arith::ConstantIntOp::create(b, b.getUnknownLoc(), 1, 32);
  mlir::arith::ShLIOp::create(b, b.getUnknownLoc(), one, one);
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("'arith.shli' op cannot be printed as CUDA"), std::string::npos)
      << compiler.diagnostics;
}

TEST(Codegen, RejectsScoresUsedTwice) {
  Compiler compiler;
  tile::FuncOp func = compiler.build(variants::causal(), ElementType::BF16, 64, "sm_80");
  ASSERT_TRUE(func);
  // A second reader of the scores: the printer updates them in place, so it must refuse.
  tile::QkOp qk;
  func.walk([&](tile::QkOp op) { qk = op; });
  ASSERT_TRUE(qk);
  mlir::OpBuilder b(qk->getBlock()->getTerminator());
  tile::ScaleOp::create(b, qk.getLoc(), qk.getS());
  EXPECT_TRUE(mlir::failed(codegen::emitCuda(func)));
  EXPECT_NE(compiler.diagnostics.find("produces a register tile used 2 times"), std::string::npos)
      << compiler.diagnostics;
}

} // namespace

/// The block orders: every (Q tile, pair) of the grid exactly once; Q tiles last-to-first inside a pair (order 0)
/// or inside a group of pairs of at least N blocks (order N, or the whole grid when smaller).
TEST(Fa2GridOrder, GridTileIsABijectionAndTakesQTilesHeaviestFirst) {
  for (int order : {0, 1, 512, 100}) {
    for (auto [qTiles, pairs] :
         {std::pair{1, 1}, {16, 128}, {64, 32}, {3, 1000}, {7, 13}, {600, 2}, {1, 700}, {33, 33}}) {
      SCOPED_TRACE("order " + std::to_string(order) + ", " + std::to_string(qTiles) + " Q tiles x " +
                   std::to_string(pairs) + " pairs");
      std::vector<int> seen(static_cast<size_t>(qTiles) * pairs, 0);
      int groupPairs = order == 0 ? 1 : std::min(pairs, (order + qTiles - 1) / qTiles);
      EXPECT_TRUE(order == 0 || groupPairs == pairs || groupPairs * qTiles >= order);
      int previousQTile = qTiles, previousGroupFirst = 0;
      for (int linear = 0; linear < qTiles * pairs; ++linear) {
        fa2::GridTile t = fa2::gridTile(linear, qTiles, pairs, order);
        ASSERT_TRUE(t.qTile >= 0 && t.qTile < qTiles && t.pair >= 0 && t.pair < pairs) << "block " << linear;
        ++seen[static_cast<size_t>(t.pair) * qTiles + t.qTile];
        int groupFirst = t.pair / groupPairs * groupPairs;
        if (groupFirst != previousGroupFirst)
          previousQTile = qTiles; // a new group (pair, for order 0) starts again from the heaviest Q tile
        EXPECT_LE(t.qTile, previousQTile) << "block " << linear << ": Q tiles must not grow inside a group";
        previousQTile = t.qTile;
        previousGroupFirst = groupFirst;
      }
      for (size_t i = 0; i < seen.size(); ++i)
        ASSERT_EQ(seen[i], 1) << "tile " << i % qTiles << " of pair " << i / qTiles;
    }
  }
}

/// Shared-memory rows: a multiple of 8 chunks of 16 bytes stays unpadded (XOR swizzle); any other width is padded to
/// an odd chunk count, so eight consecutive rows start in eight different bank groups.
TEST(Sm80SharedMemory, RowsArePaddedToAnOddChunkCountUnlessAMultipleOf8) {
  EXPECT_EQ(codegen::sm80::rowBytes(64), 128);
  EXPECT_EQ(codegen::sm80::rowBytes(128), 256);
  EXPECT_EQ(codegen::sm80::rowBytes(256), 512);
  EXPECT_EQ(codegen::sm80::rowBytes(96), 13 * 16);
  EXPECT_EQ(codegen::sm80::rowBytes(32), 5 * 16);
  EXPECT_EQ(codegen::sm80::rowBytes(40), 5 * 16);
  EXPECT_EQ(codegen::sm80::rowBytes(48), 7 * 16);
  for (int width = 8; width <= 256; width += 8) {
    int chunks = codegen::sm80::rowBytes(width) / 16;
    std::vector<bool> group(8, false);
    for (int row = 0; row < 8; ++row) // the 16-byte bank group where row `row` starts
      group[(row * (chunks % 8 == 0 ? 0 : chunks)) % 8] = true;
    if (chunks % 8 != 0)
      EXPECT_EQ(std::count(group.begin(), group.end(), true), 8) << "width " << width << ": rows share bank groups";
  }
  fa2::Fa2Config config{128, 64, 4, 2};
  EXPECT_EQ(sm80SmemBytes(config, 96, 96), 128 * 208 + 2 * 64 * (208 + 208));
}
