//===- DecodeTest.cpp - the decode schedule's split-KV, without a GPU ------===//
//
// The semantics of split-KV in the CPU interpreter: decode shapes (a few query rows over long keys, grouped-query
// attention) against the double reference for split counts from 1 to more than the K/V tiles, each K/V tile
// walked by exactly one split, packed sequences (an empty one included), and the errors of bad split counts. The
// printed kernels (attention and combine) compile with NVRTC. GQA packing (a K/V head's query heads x query rows as
// one tile's rows) computes what one head a tile does, reading K/V once per group. Every built-in variant runs under
// split-KV in VariantTest.cpp. Inputs are random; FLASHTILE_TEST_SEED changes every case's seed.
//===----------------------------------------------------------------------===//
#include "Printers.h"
#include "AttentionReference.h"
#include "PlanSupport.h"
#include "TestSupport.h"

#include "Variants.h"
#include "codegen/common/CudaEmitter.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/Nvrtc.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TilePacking.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>

using namespace mlir;
using namespace flashtile;
using flashtile::interp::Problem;

namespace {

using flashtile::testing::buildProgram;
using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;
using flashtile::testing::Outputs;
using flashtile::testing::problem;
using flashtile::testing::scheduledDecode;
using flashtile::testing::seedFor;

/// O within FlashAttention's bound, LSE within 1e-4 relative; rows that see no key O = 0 and LSE = -inf exactly.
void expectMatches(const Outputs &out, const test::Reference &ref, const std::string &what) {
  double bound = test::errorBound(ref), err = test::maxAbsDiff(out.o, ref.o);
  EXPECT_LE(err, bound) << what << ": max |O - ref| = " << err << " exceeds " << bound;
  ASSERT_EQ(out.lse.size(), ref.lse.size()) << what;
  for (size_t row = 0; row < ref.lse.size(); ++row) {
    bool ok = std::isinf(ref.lse[row])
                  ? out.lse[row] == ref.lse[row]
                  : std::fabs(out.lse[row] - ref.lse[row]) <= 1e-4 * std::max(1.0, std::fabs(ref.lse[row]));
    if (!ok) {
      ADD_FAILURE() << what << ": LSE row " << row << " is " << out.lse[row] << ", reference " << ref.lse[row];
      return;
    }
  }
}

//===----------------------------------------------------------------------===//
// Decode shapes against the reference
//===----------------------------------------------------------------------===//

struct Case {
  std::string variant; // "none" or "causal"
  int headDim, seqlenQ, seqlenK, headsQ, headsKv;

  std::string name() const {
    return variant + "_d" + std::to_string(headDim) + "_q" + std::to_string(seqlenQ) + "_k" + std::to_string(seqlenK) +
           "_h" + std::to_string(headsQ) + "x" + std::to_string(headsKv);
  }
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name(); }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char *variant : {"none", "causal"})
    for (auto [sq, sk] : {std::pair{1, 1}, {1, 33}, {1, 500}, {4, 257}, {16, 300}, {3, 2}})
      out.push_back({variant, 64, sq, sk, 8, 2});
  out.push_back({"causal", 128, 1, 1000, 4, 4});
  out.push_back({"none", 128, 8, 0, 2, 1});
  return out;
}

class DecodeVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeVsReference, EverySplitCountMatchesTheReference) {
  const Case &c = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, c.variant, ElementType::BF16, c.headDim);
  ASSERT_TRUE(program) << diags.text;
  // 32-key tiles: a few hundred keys are many tiles, so that splits are several tiles long, one, or empty.
  OwningOpRef<ModuleOp> decode = scheduledDecode(*program, {{"block-n", 32}});
  ASSERT_TRUE(decode) << diags.text;
  tile::FuncOp func = funcOf(*decode);
  ASSERT_FALSE(func.getBody().getOps<tile::StoreSplitOp>().empty());

  Problem p = problem(2, c.seqlenQ, c.seqlenK, c.headsQ, c.headsKv, c.headDim);
  uint64_t seed = seedFor(c.name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Inputs in = test::randomInputs(p, seed);
  test::Reference ref = test::referenceAttention(p, in, c.variant == "causal" ? test::Mask::Causal : test::Mask::None,
                                                 interp::roundToBf16);
  const int tiles = (c.seqlenK + 31) / 32;
  for (int splits : {1, 2, 3, std::max(tiles, 1), tiles + 5, 128}) {
    p.numSplits = splits;
    Outputs out;
    ASSERT_TRUE(succeeded(interp::run(func, p, in.q, in.k, in.v, out.o, out.lse))) << diags.text;
    expectMatches(out, ref, std::to_string(splits) + " splits");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name(); });

//===----------------------------------------------------------------------===//
// Each K/V tile is walked by one split
//===----------------------------------------------------------------------===//

TEST(DecodeSplits, EveryKTileIsLoadedOnceAcrossTheSplits) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", ElementType::BF16, 64);
  OwningOpRef<ModuleOp> decode = scheduledDecode(*program, {{"block-n", 32}});
  ASSERT_TRUE(decode) << diags.text;
  Problem p = problem(1, 2, 1000, 2, 1, 64);
  test::Inputs in = test::randomInputs(p, seedFor("DecodeSplits"));
  interp::RunStats one, many;
  Outputs out;
  p.numSplits = 1;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*decode), p, in.q, in.k, in.v, out.o, out.lse, &one))) << diags.text;
  // 1000 keys are 32 tiles of 32: each split of 7 walks 5 tiles (the last 2), none twice.
  p.numSplits = 7;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*decode), p, in.q, in.k, in.v, out.o, out.lse, &many))) << diags.text;
  ASSERT_EQ(one.kTileLoads.size(), many.kTileLoads.size());
  for (size_t i = 0; i < one.kTileLoads.size(); ++i) {
    EXPECT_EQ(one.kTileLoads[i], 32) << "Q tile " << i;
    EXPECT_EQ(many.kTileLoads[i], one.kTileLoads[i]) << "Q tile " << i;
  }
}

TEST(DecodeSplits, PackedSequencesSplitTheirOwnKeys) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", ElementType::F16, 64);
  OwningOpRef<ModuleOp> decode = scheduledDecode(*program, {{"block-n", 32}});
  ASSERT_TRUE(decode) << diags.text;
  // Four sequences of 1-3 query rows over 0, 1, 300 and 77 keys.
  Problem p = problem(4, 7, 378, 4, 2, 64);
  p.cuSeqlensQ = {0, 1, 3, 6, 7};
  p.cuSeqlensK = {0, 0, 1, 301, 378};
  std::mt19937_64 rng(seedFor("PackedSequencesSplitTheirOwnKeys"));
  Problem packed = p;
  packed.batch = 1; // randomInputs sizes by batch: the packed tensors are one entry of total rows
  test::Inputs in = test::randomInputs(packed, rng());
  Outputs unsplit, split;
  p.numSplits = 1;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*program), p, in.q, in.k, in.v, unsplit.o, unsplit.lse))) << diags.text;
  for (int splits : {2, 5, 13}) {
    p.numSplits = splits;
    ASSERT_TRUE(succeeded(interp::run(funcOf(*decode), p, in.q, in.k, in.v, split.o, split.lse))) << diags.text;
    // The unscheduled program is the reference here; one output ulp for a different summation order.
    EXPECT_LE(test::maxAbsDiff(split.o, unsplit.o), 2e-3) << splits << " splits";
    for (size_t i = 0; i < split.lse.size(); ++i)
      EXPECT_TRUE(split.lse[i] == unsplit.lse[i] || std::fabs(split.lse[i] - unsplit.lse[i]) <= 1e-4f)
          << splits << " splits, LSE row " << i << ": " << split.lse[i] << " vs " << unsplit.lse[i];
  }
  // The sequence without keys: O = 0, LSE = -inf, whatever the split count.
  for (int h = 0; h < 4; ++h)
    EXPECT_EQ(split.lse[h * 7 + 0], -std::numeric_limits<float>::infinity());
}

TEST(DecodeSplits, BadSplitCountsAreErrors) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "none", ElementType::BF16, 64);
  OwningOpRef<ModuleOp> decode = scheduledDecode(*program);
  ASSERT_TRUE(decode) << diags.text;
  Problem p = problem(1, 1, 64, 1, 1, 64);
  test::Inputs in = test::randomInputs(p, 1);
  Outputs out;
  p.numSplits = 0;
  EXPECT_TRUE(failed(interp::run(funcOf(*decode), p, in.q, in.k, in.v, out.o, out.lse)));
  EXPECT_NE(diags.text.find("num_splits = 0 is not accepted: at least 1"), std::string::npos) << diags.text;
  // A program that does not split its keys takes one split only.
  p.numSplits = 2;
  EXPECT_TRUE(failed(interp::run(funcOf(*program), p, in.q, in.k, in.v, out.o, out.lse)));
  EXPECT_NE(diags.text.find("(the program does not split its key range)"), std::string::npos) << diags.text;
}

TEST(DecodeSchedule, KnobsAreCheckedByTheRegistry) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "none", ElementType::BF16, 64);
  std::string error;
  EXPECT_FALSE(scheduledDecode(*program, {{"lpt-group-blocks", 4}}, &error));
  EXPECT_NE(error.find("lpt-group-blocks"), std::string::npos) << error;
  EXPECT_FALSE(scheduledDecode(*program, {{"block-m", 48}, {"warps", 5}}));
  EXPECT_NE(diags.text.find("decode: block-m = 48 is not supported"), std::string::npos) << diags.text;
}

//===----------------------------------------------------------------------===//
// The printed kernels
//===----------------------------------------------------------------------===//

using KernelCase = std::tuple<std::string, int, std::string>; // variant, head dim, arch

class DecodeCompiles : public ::testing::TestWithParam<KernelCase> {};

TEST_P(DecodeCompiles, AttentionAndCombineKernelsToACubin) {
  auto [variant, headDim, arch] = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto built =
      buildAttentionProgram(context, *variants::byName(variant), ProgramOptions{ElementType::BF16, headDim, headDim});
  ASSERT_TRUE(succeeded(built)) << diags.text;
  PassManager pm(&context);
  std::string error;
  ASSERT_TRUE(succeeded(schedule::buildPipeline(pm, schedule::Request{"decode", arch, "default", {}}, error))) << error;
  ASSERT_TRUE(succeeded(pm.run(**built))) << diags.text;
  FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(**built));
  ASSERT_TRUE(succeeded(kernel)) << diags.text;
  const KernelInfo &info = kernel->info;
  EXPECT_EQ(info.schedule, "decode");
  EXPECT_EQ(plans::launchedEntries(info), (std::vector<std::string>{info.entry, info.entry + "_combine"}));
  EXPECT_TRUE(info.splitKv());
  // One query row a combine block, its four warps sharing the row's splits, launched only when the keys split.
  const PlanLaunch &combine = info.plan.launches.back();
  EXPECT_EQ(combine.grid[0].text(), "cdiv(rows, 1)");
  EXPECT_EQ(combine.threads, 128);
  ASSERT_TRUE(combine.when.has_value());
  EXPECT_EQ(combine.when->text(), "splits > 1");
  EXPECT_EQ(combine.dependent, arch != "sm_80") << "programmatic dependent launch where the arch has it";
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  StatusOr<KernelInfo> parsed = KernelInfo::parse(info.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->plan.serialize(), info.plan.serialize());
  // The sink joins in the store and the combine kernel, never per split in finalize.
  if (variant.find("sinks") != std::string::npos)
    EXPECT_NE(kernel->source.find("joins once"), std::string::npos);
  StatusOr<std::string> cubin = compileCuda(kernel->source, info.entry + ".cu", arch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_NE(cubin->find(info.entry), std::string::npos);
  EXPECT_NE(cubin->find(info.entry + "_combine"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Decode, DecodeCompiles,
    ::testing::Values(KernelCase{"causal", 128, "sm_90a"}, KernelCase{"none", 64, "sm_80"},
                      KernelCase{"sinks_causal", 128, "sm_90a"}, KernelCase{"alibi_causal", 128, "sm_80"},
                      KernelCase{"sliding_window_causal", 128, "sm_90a"}, KernelCase{"softcap", 256, "sm_90a"},
                      KernelCase{"document_mask", 64, "sm_100a"}),
    [](const ::testing::TestParamInfo<KernelCase> &info) {
      return std::get<0>(info.param) + "_d" + std::to_string(std::get<1>(info.param)) + "_" + std::get<2>(info.param);
    });

//===----------------------------------------------------------------------===//
// GQA packing: a tile's rows are the query heads of a K/V head x the query rows
//===----------------------------------------------------------------------===//

/// A variant whose KV-range rule reads the head: each head sees its own prefix of the keys (head h: the first
/// 50·(h + 1)), so one rule cannot serve a tile of several heads.
Variant headPrefix() {
  return Variant("head_prefix")
      .mask([](const dsl::Coords &c, const dsl::Params &) { return c.kv < (c.h + 1) * 50; })
      .kvRange([](const dsl::QTile &q, const dsl::Params &) {
        return dsl::Range{q.h.literal(0), (q.h + 1) * 50};
      });
}

TEST(DecodeGqa, PackedRowsMatchOneHeadPerTileAndReadKvOncePerGroup) {
  for (const char *variant : {"causal", "alibi_causal", "sinks_causal", "sliding_window_causal"}) {
    SCOPED_TRACE(variant);
    MLIRContext context;
    DiagnosticCapture diags(context);
    OwningOpRef<ModuleOp> program = buildProgram(context, variant, ElementType::BF16, 64);
    ASSERT_TRUE(program) << diags.text;
    OwningOpRef<ModuleOp> packed = scheduledDecode(*program, {{"block-n", 32}});
    OwningOpRef<ModuleOp> unpacked = scheduledDecode(*program, {{"block-n", 32}, {"pack-gqa", 0}});
    ASSERT_TRUE(packed && unpacked) << diags.text;
    EXPECT_TRUE(funcOf(*packed)->hasAttr(tile::kPackQueryHeadsAttr));
    EXPECT_FALSE(funcOf(*unpacked)->hasAttr(tile::kPackQueryHeadsAttr));
    // 8 query heads over 2 K/V heads, 3 query rows: 12 packed rows a K/V head, in one 64-row tile.
    Problem p = problem(2, 3, 301, 8, 2, 64);
    std::mt19937_64 rng(seedFor(std::string("DecodeGqa") + variant));
    if (std::string(variant) == "alibi_causal" || std::string(variant) == "sinks_causal") {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> perHead(p.headsQ);
      for (int h = 0; h < p.headsQ; ++h)
        perHead[h] = std::string(variant) == "alibi_causal" ? 0.1f * float(h + 1) : normal(rng);
      p.inputs = {perHead};
    }
    if (std::string(variant) == "sliding_window_causal")
      p.params = {40.f, -1.f};
    test::Inputs in = test::randomInputs(p, rng());
    Outputs reference;
    ASSERT_TRUE(succeeded(interp::run(funcOf(*program), p, in.q, in.k, in.v, reference.o, reference.lse)))
        << diags.text;
    for (int splits : {1, 4}) {
      p.numSplits = splits;
      Outputs a, b;
      interp::RunStats packedStats, unpackedStats;
      ASSERT_TRUE(succeeded(interp::run(funcOf(*packed), p, in.q, in.k, in.v, a.o, a.lse, &packedStats))) << diags.text;
      ASSERT_TRUE(succeeded(interp::run(funcOf(*unpacked), p, in.q, in.k, in.v, b.o, b.lse, &unpackedStats)))
          << diags.text;
      // Packing changes which rows share a tile, not what any row computes.
      EXPECT_EQ(test::maxAbsDiff(a.o, b.o), 0.0) << splits << " splits";
      EXPECT_EQ(a.lse, b.lse) << splits << " splits";
      EXPECT_LE(test::maxAbsDiff(a.o, reference.o), 2e-2) << splits << " splits";
      // K tiles: once per K/V head packed, once per query head unpacked.
      int64_t packedLoads = std::accumulate(packedStats.kTileLoads.begin(), packedStats.kTileLoads.end(), int64_t{0});
      int64_t unpackedLoads =
          std::accumulate(unpackedStats.kTileLoads.begin(), unpackedStats.kTileLoads.end(), int64_t{0});
      EXPECT_GT(packedLoads, 0);
      EXPECT_EQ(packedLoads * 4, unpackedLoads) << splits << " splits";
    }
  }
}

TEST(DecodeGqa, ProgramsWhoseRangeRulesReadTheHeadAreNotPacked) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, headPrefix(), ProgramOptions{ElementType::BF16, 64, 64});
  ASSERT_TRUE(succeeded(program)) << diags.text;
  OwningOpRef<ModuleOp> decode = scheduledDecode(**program, {{"block-n", 32}});
  ASSERT_TRUE(decode) << diags.text;
  EXPECT_FALSE(funcOf(*decode)->hasAttr(tile::kPackQueryHeadsAttr));
  Problem p = problem(1, 2, 400, 4, 1, 64);
  test::Inputs in = test::randomInputs(p, seedFor("ProgramsWhoseRangeRulesReadTheHeadAreNotPacked"));
  Outputs unscheduled, split;
  ASSERT_TRUE(succeeded(interp::run(funcOf(**program), p, in.q, in.k, in.v, unscheduled.o, unscheduled.lse)));
  p.numSplits = 3;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*decode), p, in.q, in.k, in.v, split.o, split.lse))) << diags.text;
  EXPECT_LE(test::maxAbsDiff(split.o, unscheduled.o), 2e-2);
}

TEST(DecodeGqa, PackedKernelsPrintEachRowsHead) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto built =
      buildAttentionProgram(context, *variants::byName("alibi_causal"), ProgramOptions{ElementType::BF16, 128, 128});
  ASSERT_TRUE(succeeded(built)) << diags.text;
  PassManager pm(&context);
  std::string error;
  ASSERT_TRUE(succeeded(schedule::buildPipeline(pm, schedule::Request{"decode", "sm_90a", "default", {}}, error)))
      << error;
  ASSERT_TRUE(succeeded(pm.run(**built))) << diags.text;
  FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(**built));
  ASSERT_TRUE(succeeded(kernel)) << diags.text;
  EXPECT_EQ(plans::mainLaunch(kernel->info).grid[1].text(), "heads_kv");
  const std::string &src = kernel->source;
  EXPECT_NE(src.find("blockKvHead = blockIdx.y"), std::string::npos);
  EXPECT_NE(src.find("rowHead[mt][r] = hKv * headsPerKv + row % headsPerKv;"), std::string::npos);
  EXPECT_NE(src.find("(score[mt][nt][i], b, hRow, q, "), std::string::npos) << src;
  StatusOr<KernelInfo> parsed = KernelInfo::parse(kernel->info.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(plans::mainLaunch(*parsed).grid[1].text(), "heads_kv");
}

} // namespace
