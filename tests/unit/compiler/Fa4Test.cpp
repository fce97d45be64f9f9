//===- Fa4Test.cpp - the FA4 schedule on the sm100 family, compile-verified -===//
//
// fa4's configuration (defaults per head dim, the knobs it refuses), and its kernels: every built-in variant at head
// dims 64, 128, 192/128 and 256, bf16 and f16, printed by the sm100 family (tcgen05.mma, tensor memory) and compiled
// by NVRTC to an sm_100a cubin. No SM100 GPU exists here: nothing in this file runs a kernel; the manifests say so
// (neverRunOnArch, checkAgainst fa2). The interpreter runs fa4-scheduled IR in VariantTest.cpp.
//===----------------------------------------------------------------------===//
#include "AttentionReference.h"
#include "PlanSupport.h"
#include "TestSupport.h"

#include "Variants.h"
#include "codegen/common/CudaEmitter.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Nvrtc.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/TileDialect.h"
#include "passes/Transforms/ScheduleRegistry.h"
#include "mlir/Pass/PassRegistry.h"
#include "schedules/fa4/Fa4Config.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace flashtile;

namespace {

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;

constexpr std::string_view kElfMagic = "\x7f"
                                       "ELF";

TEST(Fa4Config, DefaultsFollowTensorMemoryAndSharedMemory) {
  std::string error;
  // Two 128-row Q tiles while 2 x (64 + head dim v) columns fit tensor memory's 512.
  for (auto [headDim, headDimV] : {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {192, 128}}) {
    std::optional<fa4::Fa4Config> c = fa4::configure(headDim, headDimV, {}, error);
    ASSERT_TRUE(c) << error;
    EXPECT_EQ(c->softmaxWarpgroups, 2);
    EXPECT_EQ(c->blockM, 256);
    EXPECT_EQ(c->blockN, 64);
    EXPECT_EQ(c->stages, 2);
    EXPECT_EQ(c->roles, 1);
    // FA4's own roles: the two softmax warpgroups, the correction warpgroup, the warpgroup of the MMA and load warps.
    EXPECT_EQ(c->warps(), 16);
    EXPECT_EQ(c->rescaleThreshold, fa4::kDefaultRescaleThreshold);
  }
  // The first form: a load warpgroup and the softmax warpgroups.
  std::optional<fa4::Fa4Config> first = fa4::configure(128, 128, {{fa4::kRoles, 0}}, error);
  ASSERT_TRUE(first) << error;
  EXPECT_EQ(first->warps(), 12);
  // 256: one Q tile (2 x (64 + 256) > 512 columns).
  std::optional<fa4::Fa4Config> large = fa4::configure(256, 256, {}, error);
  ASSERT_TRUE(large) << error;
  EXPECT_EQ(large->softmaxWarpgroups, 1);
  EXPECT_EQ(large->blockM, 128);
  EXPECT_EQ(large->blockN, 64);
  EXPECT_EQ(large->warps(), 12);
}

TEST(Fa4Config, RefusesWhatItDoesNotPrint) {
  std::string error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kExp2PolyShare, 9}}, error));
  EXPECT_EQ(error, "fa4: exp2-poly-share = 9 must be 0 to 8 (eighths of S's n8 tiles)");
  EXPECT_FALSE(fa4::configure(256, 256, {{fa4::kSoftmaxWarpgroups, 2}}, error));
  EXPECT_NE(error.find("exceed tensor memory's 512"), std::string::npos) << error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kBlockN, 96}}, error));
  EXPECT_EQ(error, "fa4: block-n = 96 must be a power of two in [16, 256]");
  EXPECT_FALSE(fa4::configure(256, 256, {{fa4::kBlockN, 128}, {fa4::kStages, 2}}, error));
  EXPECT_NE(error.find("bytes of shared memory"), std::string::npos) << error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kRoles, 2}}, error));
  EXPECT_EQ(error, "fa4: roles = 2 must be 0 (the first form) or 1 (FA4's own roles)");
}

// two-cta = 1 (a cluster pair, tcgen05.mma.cta_group::2): accepted at head dims 128, 192/128 and 256 with FA4's own
// roles and block-n >= 32; everything else refused with a message naming the knob and what it accepts.
TEST(Fa4Config, TwoCtaWhereItIsAllowed) {
  std::string error;
  EXPECT_EQ(fa4::configure(128, 128, {}, error)->twoCta, 0) << "the default stays one CTA a block";
  for (auto [headDim, headDimV] : {std::pair{128, 128}, {192, 128}, {256, 256}}) {
    std::optional<fa4::Fa4Config> c = fa4::configure(headDim, headDimV, {{fa4::kTwoCta, 1}}, error);
    ASSERT_TRUE(c) << headDim << "/" << headDimV << ": " << error;
    EXPECT_EQ(c->twoCta, 1);
    // The block is one CTA of the pair: its warps, rows and tensor memory are as without the pair.
    std::optional<fa4::Fa4Config> one = fa4::configure(headDim, headDimV, {}, error);
    EXPECT_EQ(c->blockM, one->blockM);
    EXPECT_EQ(c->warps(), one->warps());
  }
  EXPECT_TRUE(fa4::configure(128, 128, {{fa4::kTwoCta, 1}, {fa4::kBlockN, 32}, {fa4::kSoftmaxWarpgroups, 1}}, error))
      << error;
  EXPECT_FALSE(fa4::configure(64, 64, {{fa4::kTwoCta, 1}}, error));
  EXPECT_EQ(error, "fa4: two-cta = 1 needs head dims >= 128 (each CTA of the pair holds half of V's columns, whole "
                   "64-column blocks; FA4 pairs CTAs from head dim 128 on), got 64/64; accepted at these head dims: "
                   "two-cta = 0");
  EXPECT_FALSE(fa4::configure(128, 64, {{fa4::kTwoCta, 1}}, error));
  EXPECT_NE(error.find("got 128/64"), std::string::npos) << error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kTwoCta, 1}, {fa4::kRoles, 0}}, error));
  EXPECT_EQ(error, "fa4: two-cta = 1 needs roles = 1 (FA4's own roles: one MMA warp issues the pair's MMAs); accepted "
                   "with roles = 0: two-cta = 0");
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kTwoCta, 1}, {fa4::kBlockN, 16}}, error));
  EXPECT_EQ(error, "fa4: two-cta = 1 needs block-n >= 32 (each CTA of the pair holds half of a K/V tile's keys, at "
                   "least one k16 step), got 16");
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kTwoCta, 2}}, error));
  EXPECT_EQ(error, "fa4: two-cta = 2 must be 0 (one CTA a block) or 1 (a cluster pair, tcgen05.mma.cta_group::2)");
}

/// Whether `func`'s key range depends on its Q tile's rows: a tile.kv_range rule that reads its first or last query
/// row (causal, windows, documents). fa4 refuses two-cta = 1 for these programs.
bool boundsKeysByRows(mlir::ModuleOp module) {
  bool byRows = false;
  module.walk([&](tile::KvRangeOp range) {
    mlir::Block &rule = range.getRule().front();
    byRows |= !rule.getArgument(0).use_empty() || !rule.getArgument(1).use_empty();
  });
  return byRows;
}

TEST(Fa4Schedule, RefusesTwoCtaWhereTheKeyRangeDependsOnTheQTile) {
  mlir::MLIRContext context;
  DiagnosticCapture diags(context);
  auto program =
      buildAttentionProgram(context, *variants::byName("causal"), ProgramOptions{ElementType::BF16, 128, 128});
  ASSERT_TRUE(mlir::succeeded(program)) << diags.text;
  ASSERT_TRUE(boundsKeysByRows(**program));
  EXPECT_FALSE(flashtile::testing::scheduledFa4(**program, {{fa4::kTwoCta, 1}}));
  EXPECT_NE(diags.text.find("fa4: two-cta = 1 needs a key range that does not depend on the Q tile (the two CTAs of a "
                            "pair walk the same K/V tiles), but variant 'causal' bounds keys by query rows "
                            "(tile.kv_range); accepted for it: two-cta = 0"),
            std::string::npos)
      << diags.text;
}

TEST(Fa4Schedule, IsOfferedOnSm100aOnlyAndMarkedNeverRun) {
  const schedule::Schedule *fa4 = schedule::lookupSchedule(fa4::kName);
  ASSERT_TRUE(fa4);
  EXPECT_EQ(fa4->targetFamilyFor("sm_100a"), "sm100");
  EXPECT_EQ(fa4->targetFamilyFor("sm_90a"), "");
  EXPECT_EQ(fa4->targetFamilyFor("sm_80"), "");
  EXPECT_EQ(fa4->checkAgainstOn("sm_100a"), "fa2");
  // Unproven: no call that names no schedule runs it.
  EXPECT_TRUE(schedule::dispatchRuleOf(*fa4, "sm_100a").preferredOver.empty());
}

// exp2-poly-share: the chosen share of a score row's n8 tiles takes the software exp2 (FMA pipe), the rest MUFU; the
// kernel still compiles for sm_100a. The sm80 family has no software exp2 and refuses the attribute (sm90 prints it
// for fa3's exp2-poly-share: CodegenTest's Fa3Exp2Poly).
TEST(Fa4Schedule, Exp2PolyShareReachesTheSoftmax) {
  mlir::MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, *variants::byName("softcap_causal"),
                                       ProgramOptions{ElementType::BF16, 128, 128});
  ASSERT_TRUE(mlir::succeeded(program)) << diags.text;
  mlir::OwningOpRef<mlir::ModuleOp> lowered =
      flashtile::testing::scheduledFa4(**program, {{fa4::kExp2PolyShare, 2}});
  ASSERT_TRUE(lowered) << diags.text;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(*lowered));
  ASSERT_TRUE(mlir::succeeded(kernel)) << diags.text;
  EXPECT_NE(kernel->source.find("if (nt % 8 < 2) {"), std::string::npos);
  EXPECT_NE(kernel->source.find("sm100::math::exp2Poly3x2(sLo, sHi);"), std::string::npos);
  StatusOr<std::string> cubin =
      compileCuda(kernel->source, kernel->info.entry + ".cu", "sm_100a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();

  // Without the knob the softmax has no software exp2 at all.
  mlir::OwningOpRef<mlir::ModuleOp> plain = flashtile::testing::scheduledFa4(**program);
  ASSERT_TRUE(plain) << diags.text;
  mlir::FailureOr<codegen::EmittedKernel> mufuOnly = codegen::emitCuda(funcOf(*plain));
  ASSERT_TRUE(mlir::succeeded(mufuOnly)) << diags.text;
  EXPECT_EQ(mufuOnly->source.find("sm100::math::exp2Poly3x2("), std::string::npos);

  target::KernelShape shape = schedule::kernelShapeOf(funcOf(*lowered));
  ASSERT_EQ(shape.exp2PolyShare, 2);
  std::optional<std::string> refused = target::lookupTarget("sm80")->checkShape(shape);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("no software exp2 here"), std::string::npos) << *refused;
}

// Cluster pairs (two-cta = 1) in the interpreter: blocks run pair by pair (Q tiles 2m and 2m + 1), the second even
// where its rows lie past the sequence, and match the reference; a pair whose CTAs would walk different K/V tiles is
// caught (planted: causal, scheduled without the pair and then marked as one).
TEST(Fa4Interpreter, CtaPairsRunTogetherAndMustWalkTheSameTiles) {
  mlir::MLIRContext context;
  DiagnosticCapture diags(context);
  auto none = buildAttentionProgram(context, *variants::byName("none"), ProgramOptions{ElementType::BF16, 128, 128});
  ASSERT_TRUE(mlir::succeeded(none)) << diags.text;
  mlir::OwningOpRef<mlir::ModuleOp> paired = flashtile::testing::scheduledFa4(**none, {{fa4::kTwoCta, 1}});
  ASSERT_TRUE(paired) << diags.text;
  ASSERT_TRUE(funcOf(*paired)->hasAttr("tile.cta_pair"));
  // 100 rows: one Q tile of 256 and its pair's second CTA past the rows; 600 rows: three tiles, two pairs.
  for (int seqlenQ : {100, 600}) {
    interp::Problem p = flashtile::testing::problem(1, seqlenQ, 300, 2, 1, 128);
    test::Inputs in = test::randomInputs(p, flashtile::testing::seedFor("fa4 pairs " + std::to_string(seqlenQ)));
    test::Reference ref = test::referenceAttention(p, in, test::Mask::None, interp::roundToBf16);
    flashtile::testing::Outputs out;
    interp::RunStats stats;
    ASSERT_TRUE(mlir::succeeded(interp::run(funcOf(*paired), p, in.q, in.k, in.v, out.o, out.lse, &stats)))
        << diags.text;
    EXPECT_LE(test::maxAbsDiff(out.o, ref.o), test::errorBound(ref)) << seqlenQ << " rows";
    for (size_t row = 0; row < ref.lse.size(); ++row)
      ASSERT_NEAR(out.lse[row], ref.lse[row], 1e-4 * std::max(1.0, std::fabs(ref.lse[row]))) << "row " << row;
    // Every Q tile with rows walked every K tile (ceil(300 / 64) = 5).
    for (int64_t loads : stats.kTileLoads)
      EXPECT_EQ(loads, 5);
  }

  auto causal =
      buildAttentionProgram(context, *variants::byName("causal"), ProgramOptions{ElementType::BF16, 128, 128});
  ASSERT_TRUE(mlir::succeeded(causal)) << diags.text;
  mlir::OwningOpRef<mlir::ModuleOp> planted = flashtile::testing::scheduledFa4(**causal);
  ASSERT_TRUE(planted) << diags.text;
  funcOf(*planted)->setAttr("tile.cta_pair", mlir::UnitAttr::get(&context));
  interp::Problem p = flashtile::testing::problem(1, 600, 600, 1, 1, 128);
  test::Inputs in = test::randomInputs(p, flashtile::testing::seedFor("fa4 planted pair"));
  flashtile::testing::Outputs out;
  diags.text.clear();
  EXPECT_TRUE(mlir::failed(interp::run(funcOf(*planted), p, in.q, in.k, in.v, out.o, out.lse)));
  EXPECT_NE(diags.text.find("the two CTAs of a cluster pair (tile.cta_pair: Q tiles 0 and 1 of batch entry 0, head 0) "
                            "walk different K/V tiles"),
            std::string::npos)
      << diags.text;
}

// Conditional rescaling on adversarial scores, through the whole fa4 pipeline in the interpreter: every row's scores
// rise along fa4's walk (K/V tiles last to first), slowly (a 32-key tile raises the max by 3.2 log2 units: the stale
// max is kept over tiles, P grows up to 2^8 before the max moves) and over a dynamic range of 1e4 (every tile moves
// it). Threshold 8 and 0 both match the double-precision reference by the FlashAttention rule, under the first form's
// roles and under FA4's own (roles = 1: the correction warpgroup applies alpha to O in tensor memory).
TEST(Fa4Interpreter, ConditionalRescalingIsExactOnRisingScores) {
  mlir::MLIRContext context;
  DiagnosticCapture diags(context);
  const int headDim = 64, seqlenQ = 48, seqlenK = 256;
  auto program = buildAttentionProgram(context, *variants::byName("none"),
                                       ProgramOptions{ElementType::BF16, headDim, headDim});
  ASSERT_TRUE(mlir::succeeded(program)) << diags.text;
  for (auto [label, log2PerKey] : {std::pair{"rising 0.1 log2 units a key", 0.1}, {"range 1e4", 1e4 / seqlenK}}) {
    interp::Problem p = flashtile::testing::problem(1, seqlenQ, seqlenK, 1, 1, headDim);
    test::Inputs in = test::randomInputs(p, flashtile::testing::seedFor(std::string("fa4 rising ") + label));
    // Score (log2 units) of row i and key j: q_i0 · k_j0 · scale · log2 e = (1 + i / Sq) · log2PerKey · (Sk - 1 - j),
    // plus the other dimensions' noise, scaled down.
    const double keyUnit = log2PerKey / (p.softmaxScale * std::numbers::log2e);
    for (int i = 0; i < seqlenQ; ++i) {
      in.q[i * headDim] = 1.0f + float(i) / seqlenQ;
      for (int d = 1; d < headDim; ++d)
        in.q[i * headDim + d] *= 0.1f;
    }
    for (int j = 0; j < seqlenK; ++j)
      in.k[j * headDim] = float(keyUnit * (seqlenK - 1 - j));
    test::Reference ref = test::referenceAttention(p, in, test::Mask::None, interp::roundToBf16);
    // The first form's roles, and FA4's own (the correction warpgroup rescales O in tensor memory).
    for (auto [threshold, roles] : {std::pair{int64_t{8}, int64_t{0}}, {int64_t{0}, int64_t{0}},
                                    {int64_t{8}, int64_t{1}}, {int64_t{0}, int64_t{1}}}) {
      const std::string what = std::string(label) + ", rescale threshold " + std::to_string(threshold) + ", roles " +
                               std::to_string(roles);
      mlir::OwningOpRef<mlir::ModuleOp> lowered = flashtile::testing::scheduledFa4(
          **program, {{fa4::kSoftmaxWarpgroups, 1}, {fa4::kBlockN, 32}, {fa4::kStages, 3},
                      {fa4::kRescaleThreshold, threshold}, {fa4::kRoles, roles}});
      ASSERT_TRUE(lowered) << diags.text;
      flashtile::testing::Outputs out;
      ASSERT_TRUE(mlir::succeeded(interp::run(funcOf(*lowered), p, in.q, in.k, in.v, out.o, out.lse))) << diags.text;
      const double bound = test::errorBound(ref), err = test::maxAbsDiff(out.o, ref.o);
      EXPECT_LE(err, bound) << what << ": max |O - ref| = " << err;
      for (size_t row = 0; row < ref.lse.size(); ++row)
        ASSERT_NEAR(out.lse[row], ref.lse[row], 1e-4 * std::max(1.0, std::fabs(ref.lse[row]))) << what << ", row " << row;
    }
  }
}

using Fa4Case = std::tuple<std::string, ElementType, int, int>; // variant, dtype, head dim, head dim v

/// The fa4 kernel of `c` with `knobs` in `kernel`, its manifest checked: sm_100a, never run there and checked against
/// fa2 on first use, the TMA descriptors of Q, K and V.
void emitFa4(const Fa4Case &c, schedule::Knobs knobs, std::optional<codegen::EmittedKernel> &kernel) {
  auto [variantName, dtype, headDim, headDimV] = c;
  mlir::MLIRContext context;
  DiagnosticCapture diags(context);
  auto program =
      buildAttentionProgram(context, *variants::byName(variantName), ProgramOptions{dtype, headDim, headDimV});
  ASSERT_TRUE(mlir::succeeded(program)) << diags.text;
  mlir::OwningOpRef<mlir::ModuleOp> lowered = flashtile::testing::scheduledFa4(**program, std::move(knobs));
  ASSERT_TRUE(lowered) << diags.text;
  mlir::FailureOr<codegen::EmittedKernel> emitted = codegen::emitCuda(funcOf(*lowered));
  ASSERT_TRUE(mlir::succeeded(emitted)) << diags.text;
  const KernelInfo &info = emitted->info;
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  EXPECT_EQ(info.arch, "sm_100a");
  EXPECT_TRUE(info.neverRunOnArch);
  EXPECT_EQ(info.checkAgainst, "fa2");
  EXPECT_EQ(plans::mainLaunch(info).tensorMaps.size(), 3u);
  kernel = std::move(*emitted);
}

/// `kernel` compiled by NVRTC to an sm_100a cubin holding its entry.
void expectCubin(const codegen::EmittedKernel &kernel) {
  StatusOr<std::string> cubin = compileCuda(kernel.source, kernel.info.entry + ".cu", "sm_100a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel.source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  EXPECT_NE(cubin->find(kernel.info.entry), std::string::npos);
}

class Fa4Compiles : public ::testing::TestWithParam<Fa4Case> {};

// The first form (roles = 0): every built-in variant's hooks run in the softmax warpgroups unchanged and the kernel
// compiles for sm_100a. bf16 only (f16 changes the packing and the instruction descriptor's types: the default form,
// Fa4RolesCompiles, compiles both).
TEST_P(Fa4Compiles, ToAnSm100aCubin) {
  std::optional<codegen::EmittedKernel> kernel;
  ASSERT_NO_FATAL_FAILURE(emitFa4(GetParam(), {{fa4::kRoles, 0}}, kernel));
  // A load warpgroup and a softmax warpgroup per 128 rows.
  EXPECT_EQ(plans::mainLaunch(kernel->info).threads, 128 + kernel->info.blockM);
  for (const char *primitive : {"sm100::tmem::alloc<", "sm100::tmem::dealloc<", "sm100::mma::f16SS(",
                                "sm100::mma::f16TS(", "sm100::mma::commit(", "sm100::tma::load5d("})
    EXPECT_NE(kernel->source.find(primitive), std::string::npos) << primitive;
  expectCubin(*kernel);
}

// fa4 stands alone: with fa3 taken out of the schedule registry, both of fa4's forms build their pipelines and
// compile for sm_100a (the first form's roles are the generic tile-role-pipeline, not fa3's pass by name).
TEST(Fa4Schedule, StandsWithoutFa3Registered) {
  // No pass of fa3's is reachable by name (fa4 used to build its first form from "tile-fa3-pipeline"); the role
  // pipeline is a generic pass.
  EXPECT_EQ(mlir::PassInfo::lookup("tile-fa3-pipeline"), nullptr);
  std::unique_ptr<schedule::Schedule> fa3 = schedule::unregisterSchedule("fa3");
  ASSERT_NE(fa3, nullptr);
  ASSERT_EQ(schedule::lookupSchedule("fa3"), nullptr);
  for (int roles : {0, 1}) {
    std::optional<codegen::EmittedKernel> kernel;
    emitFa4({"causal", ElementType::BF16, 128, 128}, {{fa4::kRoles, roles}}, kernel);
    if (kernel)
      expectCubin(*kernel);
    EXPECT_TRUE(kernel.has_value()) << "roles = " << roles;
  }
  EXPECT_EQ(schedule::lookupSchedule("fa3"), nullptr);
  schedule::registerSchedule(std::move(fa3));
  EXPECT_NE(schedule::lookupSchedule("fa3"), nullptr);
}

class Fa4RolesCompiles : public ::testing::TestWithParam<Fa4Case> {};

// FA4's own roles (roles = 1, the default), printed from the memory layer: the softmax warpgroups, a correction
// warpgroup and a warpgroup of one-warp roles (the MMA warp issuing every tcgen05.mma, the load warp). Every built-in
// variant's kernel compiles for sm_100a; no SM100 GPU exists here to run one.
TEST_P(Fa4RolesCompiles, ToAnSm100aCubin) {
  std::optional<codegen::EmittedKernel> kernel;
  ASSERT_NO_FATAL_FAILURE(emitFa4(GetParam(), {}, kernel));
  // The softmax warpgroups (one per 128 rows), the correction warpgroup, the warpgroup of the MMA and load warps.
  EXPECT_EQ(plans::mainLaunch(kernel->info).threads, kernel->info.blockM + 2 * 128);
  const std::string &src = kernel->source;
  for (const char *text : {"==== role \"mma\": warps [", "==== role \"correction\": warps [",
                           "sm100::tmem::alloc<kTmemAllocColumns>(tmemCell);", "sm100::tmem::dealloc<kTmemAllocColumns>(",
                           "sm100::mma::f16SS(", "sm100::mma::f16TS(", "sm100::mma::commit(&chanFull[",
                           "sm100::tmem::Access32x32b<kRowChunk>::load(", "sm100::tmem::Fragments<kSTiles>::loadC(",
                           "if (__any_sync(0xffffffffu, "})
    EXPECT_NE(src.find(text), std::string::npos) << text;
  // Every tcgen05.mma and commit is issued inside the MMA warp's role.
  const size_t mmaRole = src.find("==== role \"mma\""), nextRole = src.find("==== role", mmaRole + 1);
  for (const char *mma : {"sm100::mma::f16SS(", "sm100::mma::f16TS(", "sm100::mma::commit("})
    for (size_t at = src.find(mma, src.find("extern \"C\"")); at != std::string::npos; at = src.find(mma, at + 1))
      EXPECT_TRUE(at > mmaRole && (nextRole == std::string::npos || at < nextRole)) << mma << " outside the MMA warp";
  expectCubin(*kernel);
}

class Fa4TwoCtaCompiles : public ::testing::TestWithParam<Fa4Case> {};

// two-cta = 1: every built-in variant at the head dims it is allowed for (128, 192/128, 256) x {bf16, f16}. Where the
// variant's key range depends on the Q tile (causal, windows, documents) the schedule refuses it with its message;
// every other kernel is a cluster pair (the plan launches clusters of two over an even grid, K and V boxes of half a
// tile), issues only cta_group::2 forms from the leader's MMA warp, and compiles for sm_100a. No SM100 GPU exists here
// to run one; the manifest keeps the first-use self-check against fa2.
TEST_P(Fa4TwoCtaCompiles, ToAnSm100aCubinOrIsRefused) {
  auto [variantName, dtype, headDim, headDimV] = GetParam();
  {
    mlir::MLIRContext context;
    DiagnosticCapture diags(context);
    auto program =
        buildAttentionProgram(context, *variants::byName(variantName), ProgramOptions{dtype, headDim, headDimV});
    ASSERT_TRUE(mlir::succeeded(program)) << diags.text;
    if (boundsKeysByRows(**program)) {
      EXPECT_FALSE(flashtile::testing::scheduledFa4(**program, {{fa4::kTwoCta, 1}}));
      EXPECT_NE(diags.text.find("two-cta = 1 needs a key range that does not depend on the Q tile"), std::string::npos)
          << diags.text;
      return;
    }
  }
  std::optional<codegen::EmittedKernel> kernel;
  ASSERT_NO_FATAL_FAILURE(emitFa4(GetParam(), {{fa4::kTwoCta, 1}}, kernel));
  const PlanLaunch &launch = plans::mainLaunch(kernel->info);
  EXPECT_EQ(launch.threads, kernel->info.blockM + 2 * 128);
  EXPECT_EQ(launch.cluster, (std::array<int, 3>{2, 1, 1}));
  EXPECT_EQ(launch.grid[0].text(), "cdiv(cdiv(rows, " + std::to_string(kernel->info.blockM) + "), 2) * 2");
  ASSERT_EQ(launch.tensorMaps.size(), 3u);
  EXPECT_EQ(launch.tensorMaps[0].boxRows, kernel->info.blockM);
  EXPECT_EQ(launch.tensorMaps[1].boxRows, kernel->info.blockN / 2);
  EXPECT_EQ(launch.tensorMaps[2].boxRows, kernel->info.blockN / 2);
  const std::string &src = kernel->source;
  for (const char *text :
       {"sm100::pair::alloc<kTmemAllocColumns>(tmemCell);", "sm100::pair::relinquishAllocPermit();",
        "sm100::pair::dealloc<kTmemAllocColumns>(", "sm100::pair::f16SS(", "sm100::pair::f16TS(",
        "sm100::pair::commit(&chanFull[", "sm100::pair::kBothCtas", "sm100::pair::load5d(",
        "sm100::pair::arriveExpectTx(", "sm100::pair::arrive(sm100::pair::mapTo(&chanEmpty[",
        "sm100::pair::wait(&chanEmpty[", "sm100::pair::clusterSync();", "if ((qTile & ~1) * kBlockM >= p.seqlenQ)"})
    EXPECT_NE(src.find(text), std::string::npos) << text;
  // No cta_group::1 form in the kernel (ptxas accepts one group a kernel).
  const size_t body = src.find("extern \"C\"");
  for (const char *one : {"sm100::mma::f16SS(", "sm100::mma::f16TS(", "sm100::mma::commit(", "sm100::tmem::alloc<",
                          "sm100::tmem::dealloc<", "sm100::tma::load5d("})
    EXPECT_EQ(src.find(one, body), std::string::npos) << one;
  // Every MMA and commit is the leader's, inside the MMA warp's role.
  const size_t mmaRole = src.find("==== role \"mma\""), nextRole = src.find("==== role", mmaRole + 1);
  for (const char *mma : {"sm100::pair::f16SS(", "sm100::pair::f16TS(", "sm100::pair::commit("})
    for (size_t at = src.find(mma, body); at != std::string::npos; at = src.find(mma, at + 1)) {
      EXPECT_TRUE(at > mmaRole && (nextRole == std::string::npos || at < nextRole)) << mma << " outside the MMA warp";
      EXPECT_LT(at - src.rfind("if (lane == 0 && leaderCta)", at), 600u) << mma << " not under the leader's lane 0";
    }
  expectCubin(*kernel);
}

std::string fa4CaseName(const ::testing::TestParamInfo<Fa4Case> &info) {
  auto [variant, dtype, headDim, headDimV] = info.param;
  return variant + (dtype == ElementType::BF16 ? "_bf16_d" : "_f16_d") + std::to_string(headDim) +
         (headDimV != headDim ? "_dv" + std::to_string(headDimV) : "");
}

/// Every built-in variant x head dims {64, 128, 192/128, 256} x {bf16, f16} (bf16 only without `f16`).
std::vector<Fa4Case> fa4Cases(bool f16 = true) {
  std::vector<Fa4Case> cases;
  for (const std::string &variant : variants::names())
    for (ElementType dtype : {ElementType::BF16, ElementType::F16})
      if (dtype == ElementType::BF16 || f16)
        for (auto [headDim, headDimV] : {std::pair{64, 64}, {128, 128}, {192, 128}, {256, 256}})
          cases.emplace_back(variant, dtype, headDim, headDimV);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, Fa4Compiles, ::testing::ValuesIn(fa4Cases(/*f16=*/false)), fa4CaseName);
INSTANTIATE_TEST_SUITE_P(EveryVariant, Fa4RolesCompiles, ::testing::ValuesIn(fa4Cases()), fa4CaseName);

/// Every built-in variant x the head dims two-cta = 1 is allowed for {128, 192/128, 256} x {bf16, f16}.
std::vector<Fa4Case> fa4TwoCtaCases() {
  std::vector<Fa4Case> cases;
  for (const Fa4Case &c : fa4Cases())
    if (std::get<2>(c) >= fa4::kTwoCtaMinHeadDim)
      cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(EveryVariant, Fa4TwoCtaCompiles, ::testing::ValuesIn(fa4TwoCtaCases()), fa4CaseName);

} // namespace
