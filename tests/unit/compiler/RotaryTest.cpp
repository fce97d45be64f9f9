//===- RotaryTest.cpp - rotary embedding of Q (tile.rotary), without a GPU -===//
//
// flash_attn_with_kvcache's rotary_cos/rotary_sin as a feature of the program (passes/IR/TileRotary.h): the DSL
// puts `tile.rotary` on Q's load (rows at consecutive positions for masked variants, all at the first otherwise),
// the verifier checks it, the CPU interpreter rotates Q exactly as a plain C++ RoPE does (checked against the double
// reference on host-rotated Q, unscheduled and under the decode schedule with GQA packing), and the decode kernels
// that carry it rotate Q in shared memory and the appended keys in the append kernel, compiled with NVRTC.
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
#include "jit/Jit.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileRotary.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

using namespace mlir;
using namespace flashtile;
using flashtile::interp::Problem;

namespace {

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;
using flashtile::testing::Outputs;
using flashtile::testing::scheduledDecode;
using flashtile::testing::seedFor;

/// RoPE of BSHD rows, in place, as flash-attn's apply_rotary_emb computes it: pair i of the first rotaryDim columns
/// of row s of batch entry b at position positionOf(b, s) becomes (x0·cos − x1·sin, x0·sin + x1·cos), in fp32 from
/// the rounded inputs and tables, rounded to the dtype.
void applyRope(std::vector<float> &x, int batch, int seqlen, int heads, int headDim, const std::vector<float> &cos,
               const std::vector<float> &sin, int rotaryDim, bool interleaved,
               const std::function<int(int, int)> &positionOf, interp::RoundFn round) {
  const int half = rotaryDim / 2;
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < seqlen; ++s)
      for (int h = 0; h < heads; ++h) {
        float *row = &x[((static_cast<size_t>(b) * seqlen + s) * heads + h) * headDim];
        const int pos = positionOf(b, s);
        for (int i = 0; i < half; ++i) {
          float &x0 = row[interleaved ? 2 * i : i], &x1 = row[interleaved ? 2 * i + 1 : i + half];
          const float a = round(x0), c = round(cos[pos * half + i]), sn = round(sin[pos * half + i]);
          const float bb = round(x1);
          x0 = round(a * c - bb * sn);
          x1 = round(a * sn + bb * c);
        }
      }
}

/// Tables of RoPE's usual frequencies (base 10000) for `seqlenRo` positions.
void ropeTables(int seqlenRo, int rotaryDim, std::vector<float> &cos, std::vector<float> &sin) {
  const int half = rotaryDim / 2;
  cos.resize(static_cast<size_t>(seqlenRo) * half);
  sin.resize(cos.size());
  for (int pos = 0; pos < seqlenRo; ++pos)
    for (int i = 0; i < half; ++i) {
      double angle = pos * std::pow(10000.0, -2.0 * i / rotaryDim);
      cos[pos * half + i] = static_cast<float>(std::cos(angle));
      sin[pos * half + i] = static_cast<float>(std::sin(angle));
    }
}

OwningOpRef<ModuleOp> buildProgram(MLIRContext &context, const std::string &variant, int headDim, RotaryMode rotary) {
  ProgramOptions options{ElementType::BF16, headDim, headDim};
  options.rotary = rotary;
  auto module = buildAttentionProgram(context, *variants::byName(variant), options);
  EXPECT_TRUE(succeeded(module));
  return succeeded(module) ? std::move(*module) : OwningOpRef<ModuleOp>();
}

/// As the DSL decides (ProgramOptions::rotary): the variants that mask put query rows at consecutive positions.
bool rotatesRowsApart(const std::string &variant) { return variants::byName(variant)->maskFn() != nullptr; }

tile::LoadOp qLoadOf(ModuleOp module) {
  tile::LoadOp q;
  module.walk([&](tile::LoadOp load) {
    if (load.getOperand() == tile::Operand::Q)
      q = load;
  });
  return q;
}

TEST(RotaryReference, RotatesPairsByTheTablesAngle) {
  // A quarter turn at position 1: (x0, x1) -> (-x1, x0); position 0 (cos 1, sin 0) leaves rows alone.
  std::vector<float> cos = {1, 1, 0, 0}, sin = {0, 0, 1, 1};
  std::vector<float> halves = {1, 2, 3, 4, 5}, interleaved = halves;
  auto identity = [](float x) { return x; };
  applyRope(
      halves, 1, 1, 1, 5, cos, sin, 4, false, [](int, int) { return 1; }, identity);
  EXPECT_EQ(halves, (std::vector<float>{-3, -4, 1, 2, 5})); // pairs (0, 2), (1, 3); column 4 untouched
  applyRope(
      interleaved, 1, 1, 1, 5, cos, sin, 4, true, [](int, int) { return 1; }, identity);
  EXPECT_EQ(interleaved, (std::vector<float>{-2, 1, -4, 3, 5})); // pairs (0, 1), (2, 3)
}

TEST(RotaryProgram, TheDslPutsTheRotationOnQsLoad) {
  MLIRContext context;
  for (auto [variant, perRow] :
       {std::pair{"causal", true}, {"sliding_window", true}, {"none", false}, {"softcap", false}}) {
    OwningOpRef<ModuleOp> module = buildProgram(context, variant, 64, RotaryMode::Interleaved);
    ASSERT_TRUE(module);
    std::optional<tile::Rotary> rotary = tile::rotaryOf(qLoadOf(*module));
    ASSERT_TRUE(rotary) << variant;
    EXPECT_TRUE(rotary->interleaved) << variant;
    EXPECT_EQ(rotary->perRow, perRow) << variant << ": rows at consecutive positions only for masked variants";
  }
  OwningOpRef<ModuleOp> halves = buildProgram(context, "causal", 64, RotaryMode::Halves);
  ASSERT_TRUE(tile::rotaryOf(qLoadOf(*halves)));
  EXPECT_FALSE(tile::rotaryOf(qLoadOf(*halves))->interleaved);
  OwningOpRef<ModuleOp> plain = buildProgram(context, "causal", 64, RotaryMode::None);
  EXPECT_FALSE(qLoadOf(*plain)->hasAttr(tile::kRotaryAttr));
}

TEST(RotaryProgram, TheVerifierNamesBadAttributes) {
  MLIRContext context;
  loadProgramDialects(context);
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> module = buildProgram(context, "none", 64, RotaryMode::Halves);
  ASSERT_TRUE(module);
  tile::LoadOp q = qLoadOf(*module);
  q->setAttr(tile::kRotaryAttr, Builder(&context).getStringAttr("interleaved"));
  EXPECT_TRUE(failed(verify(*module)));
  EXPECT_NE(diags.text.find("must be {interleaved = true|false, positions = \"rows\"|\"first\"}"), std::string::npos)
      << diags.text;
  q->setAttr(tile::kRotaryAttr, tile::rotaryAttr(&context, {false, true}));
  EXPECT_TRUE(succeeded(verify(*module))) << diags.text;
  diags.text.clear();
  module->walk([&](tile::LoadOp load) {
    if (load.getOperand() == tile::Operand::K)
      load->setAttr(tile::kRotaryAttr, tile::rotaryAttr(&context, {false, true}));
  });
  EXPECT_TRUE(failed(verify(*module)));
  EXPECT_NE(diags.text.find("rotates the Q tile only"), std::string::npos) << diags.text;
}

//===----------------------------------------------------------------------===//
// The interpreter against the reference on host-rotated Q
//===----------------------------------------------------------------------===//

struct Case {
  std::string variant; // "none" or "causal"
  bool interleaved;
  int rotaryDim;
  bool decode; // under the decode schedule (GQA packing, split-KV, tile.kv_cache), else unscheduled

  std::string name() const {
    return variant + (interleaved ? "_interleaved" : "_halves") + "_rd" + std::to_string(rotaryDim) +
           (decode ? "_decode" : "_unscheduled");
  }
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name(); }

class RotaryVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(RotaryVsReference, QIsRotatedAtTheCachePositions) {
  const Case &c = GetParam();
  constexpr int kHeadDim = 64, kSeqlenNew = 3;
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program =
      buildProgram(context, c.variant, kHeadDim, c.interleaved ? RotaryMode::Interleaved : RotaryMode::Halves);
  ASSERT_TRUE(program) << diags.text;
  OwningOpRef<ModuleOp> decode;
  if (c.decode) {
    decode = scheduledDecode(*program, {{"block-n", 32}, {"kv-cache", 1}});
    ASSERT_TRUE(decode) << diags.text;
  }
  tile::FuncOp func = funcOf(c.decode ? *decode : *program);

  // Two sequences of 4 query rows over 70 keys, the last kSeqlenNew of them new (positions count from 67).
  Problem p;
  p.batch = 2;
  p.seqlenQ = 4;
  p.seqlenK = 70;
  p.headsQ = 8;
  p.headsKv = 2;
  p.headDim = p.headDimV = kHeadDim;
  p.softmaxScale = 1.0f / std::sqrt(float(kHeadDim));
  p.rotaryDim = c.rotaryDim;
  p.seqlenNew = kSeqlenNew;
  p.seqlenRo = 80;
  ropeTables(p.seqlenRo, p.rotaryDim, p.rotaryCos, p.rotarySin);
  p.numSplits = c.decode ? 2 : 1;
  uint64_t seed = seedFor(c.name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Inputs in = test::randomInputs(p, seed);

  test::Inputs rotated = in;
  const int cached = p.seqlenK - kSeqlenNew;
  const bool perRow = c.variant == "causal";
  applyRope(
      rotated.q, p.batch, p.seqlenQ, p.headsQ, kHeadDim, p.rotaryCos, p.rotarySin, p.rotaryDim, c.interleaved,
      [&](int, int s) { return cached + (perRow ? s : 0); }, interp::roundToBf16);
  test::Reference ref =
      test::referenceAttention(p, rotated, perRow ? test::Mask::Causal : test::Mask::None, interp::roundToBf16);
  Outputs out;
  ASSERT_TRUE(succeeded(interp::run(func, p, in.q, in.k, in.v, out.o, out.lse))) << diags.text;
  double bound = test::errorBound(ref), err = test::maxAbsDiff(out.o, ref.o);
  EXPECT_LE(err, bound) << "max |O - ref(rotated Q)| = " << err << " exceeds " << bound;

  // The rotation matters: the reference on unrotated Q is far away.
  test::Reference plain =
      test::referenceAttention(p, in, perRow ? test::Mask::Causal : test::Mask::None, interp::roundToBf16);
  EXPECT_GT(test::maxAbsDiff(out.o, plain.o), 10 * bound) << "the output does not depend on the rotation";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char *variant : {"none", "causal"})
    for (bool interleaved : {false, true})
      for (int rotaryDim : {64, 32, 6})
        for (bool decode : {false, true})
          out.push_back({variant, interleaved, rotaryDim, decode});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RotaryVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name(); });

TEST(RotaryInterpreter, RefusesBadTablesAndPositionsPastThem) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", 64, RotaryMode::Halves);
  ASSERT_TRUE(program);
  Problem p;
  p.seqlenQ = 2;
  p.seqlenK = 10;
  p.headDim = p.headDimV = 64;
  p.seqlenNew = 2;
  test::Inputs in = test::randomInputs(p, 1);
  Outputs out;
  p.rotaryDim = 7;
  EXPECT_TRUE(failed(interp::run(funcOf(*program), p, in.q, in.k, in.v, out.o, out.lse)));
  EXPECT_NE(diags.text.find("rotary_dim is 7"), std::string::npos) << diags.text;
  p.rotaryDim = 16;
  p.seqlenRo = 9; // positions 8 and 9: the second is past the tables
  ropeTables(p.seqlenRo, p.rotaryDim, p.rotaryCos, p.rotarySin);
  diags.text.clear();
  EXPECT_TRUE(failed(interp::run(funcOf(*program), p, in.q, in.k, in.v, out.o, out.lse)));
  EXPECT_NE(diags.text.find("rotates query row 1 at position 9, outside the 9 rows"), std::string::npos) << diags.text;
  p.seqlenRo = 10;
  ropeTables(p.seqlenRo, p.rotaryDim, p.rotaryCos, p.rotarySin);
  EXPECT_TRUE(succeeded(interp::run(funcOf(*program), p, in.q, in.k, in.v, out.o, out.lse))) << diags.text;
}

} // namespace

namespace {

//===----------------------------------------------------------------------===//
// The printed kernels compile
//===----------------------------------------------------------------------===//

using KernelCase =
    std::tuple<std::string, std::string, int, std::string, bool>; // variant, dtype, hd, arch, interleaved

class RotaryCompiles : public ::testing::TestWithParam<KernelCase> {};

TEST_P(RotaryCompiles, AttentionCombineAndAppendKernelsToACubin) {
  auto [variant, dtype, headDim, arch, interleaved] = GetParam();
  jit::CompileOptions options;
  options.dtype = dtype == "bf16" ? ElementType::BF16 : ElementType::F16;
  options.headDim = options.headDimV = headDim;
  options.rotary = interleaved ? RotaryMode::Interleaved : RotaryMode::Halves;
  options.schedule = schedule::Request{"decode", arch, "default", {{"kv-cache", 1}}};
  StatusOr<jit::CompileResult> result = jit::compile(*variants::byName(variant), options, jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const KernelInfo &info = result->info;
  EXPECT_EQ(info.rotary, interleaved ? kRotaryInterleaved : kRotaryHalves);
  EXPECT_EQ(plans::launchedEntries(info),
            (std::vector<std::string>{info.entry + "_append", info.entry, info.entry + "_combine"}));
  EXPECT_NE(info.entry.find(interleaved ? "_kvcache_rotary_interleaved" : "_kvcache_rotary"), std::string::npos);
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  for (const std::string &entry : plans::launchedEntries(info))
    EXPECT_NE(result->cubin.find(entry), std::string::npos) << entry;
  // Q is rotated before the first ldmatrix of sQ, with the pairs and positions of the program.
  const std::string &cuda = result->cuda;
  size_t rotation = cuda.find("rotary embedding of Q in sQ"), firstRead = cuda.find("ldmatrixX4(qFrag");
  ASSERT_NE(rotation, std::string::npos);
  EXPECT_LT(rotation, firstRead);
  EXPECT_NE(cuda.find(interleaved ? "c0 = 2 * i, c1 = 2 * i + 1" : "c0 = i, c1 = i + half"), std::string::npos);
  EXPECT_NE(cuda.find(rotatesRowsApart(variant) ? "min(max(cached + " : "min(max(cached, 0)"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Decode, RotaryCompiles,
                         ::testing::Values(KernelCase{"causal", "bf16", 128, "sm_90a", false},
                                           KernelCase{"none", "f16", 64, "sm_80", true},
                                           KernelCase{"softcap", "bf16", 256, "sm_90a", false},
                                           KernelCase{"sliding_window", "f16", 96, "sm_100a", true}),
                         [](const ::testing::TestParamInfo<KernelCase> &info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_d" +
                                  std::to_string(std::get<2>(info.param)) + "_" + std::get<3>(info.param) +
                                  (std::get<4>(info.param) ? "_interleaved" : "_halves");
                         });

} // namespace
