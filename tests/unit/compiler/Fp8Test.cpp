//===- Fp8Test.cpp - e4m3 programs: rounding, the IR, refusals, the interpreter -===//
//
// e4m3 (float8_e4m3fn) as an element type (docs/fp8.md): the interpreter's rounding against LLVM's APFloat with
// satfinite saturation; the program's types (O in bf16, P in e4m3); the refusals of the schedules and of the
// backward; and the interpreter on e4m3 programs of several variants, with per-(batch, K/V head) descales, against a
// double-precision reference on the dequantized inputs under FlashAttention's rule (flash-attn's hopper tests apply
// it to fp8 the same way). Inputs are random; FLASHTILE_TEST_SEED changes every case's seed.
//===----------------------------------------------------------------------===//
#include "AttentionReference.h"
#include "TestSupport.h"

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/TileDialect.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

using namespace mlir;
using namespace flashtile;

namespace {

using flashtile::test::maxAbsDiff;

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;
using flashtile::testing::seedFor;

//===----------------------------------------------------------------------===//
// Rounding
//===----------------------------------------------------------------------===//

/// `x` rounded to e4m3 by APFloat (ties to even), with satfinite's saturation: APFloat gives NaN past 464 (e4m3fn
/// has no infinity), the GPU's cvt.rn.satfinite gives ±448.
float apfloatSatfinite(float x) {
  if (std::isinf(x) || std::fabs(x) > 464.0f)
    return std::copysign(interp::kE4m3MaxFinite, x);
  bool lost;
  llvm::APFloat a(x);
  a.convert(llvm::APFloat::Float8E4M3FN(), llvm::APFloat::rmNearestTiesToEven, &lost);
  a.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &lost);
  return a.convertToFloat();
}

TEST(Fp8Rounding, MatchesAPFloatWithSatfiniteSaturation) {
  std::mt19937 rng(static_cast<unsigned>(seedFor("Fp8Rounding")));
  std::vector<float> xs = {0.0f, 448.0f, 464.0f, 465.0f, 1e6f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1p-6f, 1.0625f, 1.1875f};
  for (int i = 0; i < 200000; ++i) {
    float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(x))
      xs.push_back(x);
    // Values in e4m3's range, and ties: an e4m3 value plus half its last place (4 significant bits, exponents -9..8).
    xs.push_back(std::ldexp(float(int(rng() % 32) * 2 + 1), -13 + int(rng() % 18)));
    xs.push_back(std::ldexp(std::normal_distribution<float>(0.0f, 1.0f)(rng), int(rng() % 16) - 8));
  }
  int bad = 0;
  for (float x : xs)
    for (float v : {x, -x})
      if (std::bit_cast<uint32_t>(interp::roundToE4m3(v)) != std::bit_cast<uint32_t>(apfloatSatfinite(v)) &&
          bad++ < 5)
        ADD_FAILURE() << "e4m3(" << v << ") = " << interp::roundToE4m3(v) << ", APFloat (satfinite) "
                      << apfloatSatfinite(v);
  EXPECT_EQ(bad, 0);
}

TEST(Fp8Rounding, SaturatesTiesToEvenAndKeepsSubnormals) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(interp::roundToE4m3(448.0f), 448.0f);
  EXPECT_EQ(interp::roundToE4m3(464.0f), 448.0f); // the tie between 448 and 480 (NaN's encoding) goes to even
  EXPECT_EQ(interp::roundToE4m3(500.0f), 448.0f);
  EXPECT_EQ(interp::roundToE4m3(inf), 448.0f);
  EXPECT_EQ(interp::roundToE4m3(-inf), -448.0f);
  EXPECT_TRUE(std::isnan(interp::roundToE4m3(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(interp::roundToE4m3(1.0625f), 1.0f);  // 1 + 1/16: a tie, 1.000 is even
  EXPECT_EQ(interp::roundToE4m3(1.1875f), 1.25f); // 1 + 3/16: a tie, 1.010 is even
  EXPECT_EQ(interp::roundToE4m3(0x1p-9f), 0x1p-9f); // the smallest subnormal
  EXPECT_EQ(interp::roundToE4m3(0x1p-10f), 0.0f);   // half of it: ties to even (zero)
  EXPECT_EQ(interp::roundToE4m3(0x1.8p-10f), 0x1p-9f);
  EXPECT_EQ(interp::roundToE4m3(0.3f), 0.3125f);
}

//===----------------------------------------------------------------------===//
// The program
//===----------------------------------------------------------------------===//

TEST(Fp8Program, QKVAndPAreE4m3AndOIsBf16) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, variants::causal(), ProgramOptions{ElementType::E4M3, 128, 128});
  ASSERT_TRUE(succeeded(program)) << diags.text;
  tile::FuncOp func = funcOf(**program);
  EXPECT_TRUE(isa<Float8E4M3FNType>(func.getDtype()));
  EXPECT_TRUE(func.getOutputType().isBF16());
  EXPECT_EQ(tile::dtypeName(func.getDtype()), "e4m3");
  int loads = 0;
  func.walk([&](tile::LoadOp load) {
    ++loads;
    EXPECT_TRUE(isa<Float8E4M3FNType>(cast<RankedTensorType>(load.getType()).getElementType()));
  });
  EXPECT_EQ(loads, 3);
  func.walk([&](tile::SoftmaxUpdateOp update) {
    EXPECT_TRUE(isa<Float8E4M3FNType>(cast<RankedTensorType>(update.getP().getType()).getElementType()));
  });
  EXPECT_STREQ(elementTypeName(ElementType::E4M3), "e4m3");
}

TEST(Fp8Program, HasNoBackward) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto module = buildProgram(context, variants::causal(), ProgramOptions{ElementType::E4M3, 128, 128}, "backward");
  EXPECT_TRUE(failed(module));
  EXPECT_NE(diags.text.find("dtype e4m3 has no backward programs: FP8 attention is forward-only (as flash-attn 3)"),
            std::string::npos)
      << diags.text;
}

TEST(Fp8Program, TheVerifierRefusesE4m3BackwardKinds) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto module = buildProgram(context, variants::causal(), ProgramOptions{ElementType::BF16, 64, 64}, "backward");
  ASSERT_TRUE(succeeded(module)) << diags.text;
  tile::FuncOp func = funcOf(**module);
  func.setDtype(Float8E4M3FNType::get(&context));
  EXPECT_TRUE(failed(func.verify()));
  EXPECT_NE(diags.text.find("(e4m3) is for forward programs only, not backward_preprocess: FP8 attention has no "
                            "backward (as flash-attn 3)"),
            std::string::npos)
      << diags.text;
}

/// The diagnostics of scheduling an e4m3 program with `name` on `arch` (empty: the pipeline succeeded).
std::string scheduleE4m3(const std::string &name, const std::string &arch) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, variants::causal(), ProgramOptions{ElementType::E4M3, 128, 128});
  EXPECT_TRUE(succeeded(program)) << diags.text;
  PassManager pm(&context);
  schedule::Request request;
  request.schedule = name;
  request.arch = arch;
  std::string error;
  EXPECT_TRUE(succeeded(schedule::buildPipeline(pm, request, error))) << error;
  if (succeeded(pm.run(**program)))
    return "";
  return diags.text;
}

TEST(Fp8Schedules, RefuseE4m3ByName) {
  for (auto [name, arch] : {std::pair<std::string, std::string>{"fa1", "sm_80"},
                            {"fa2", "sm_80"},
                            {"fa2", "sm_90a"},
                            {"decode", "sm_90a"},
                            {"fa4", "sm_100a"}}) {
    std::string text = scheduleE4m3(name, arch);
    EXPECT_NE(text.find("schedule '" + name + "' has no 8-bit MMA path: dtype e4m3 is not accepted; its dtypes: "
                                              "bf16, f16"),
              std::string::npos)
        << name << " on " << arch << ": " << text;
  }
  // fa3 builds e4m3 kernels on sm_90a (wgmma m64nNk32; CodegenTest.cpp compiles them).
  EXPECT_EQ(scheduleE4m3("fa3", "sm_90a"), "");
}

//===----------------------------------------------------------------------===//
// The interpreter on e4m3 programs
//===----------------------------------------------------------------------===//

/// A variant and its meaning on the dequantized scaled scores (as in VariantTest.cpp, for the variants here).
struct Fp8Case {
  std::string name;
  std::function<Variant()> make;
  std::vector<float> params;
  std::function<bool(const interp::Problem &, int64_t i, int64_t j)> keep;
  std::function<double(double s, int64_t h, int64_t i, int64_t j, const interp::Problem &)> score;
  bool sinks = false; ///< input "sinks": one logit per query head
  bool slopes = false; ///< input "slopes": one ALiBi slope per query head
};

int64_t alignedRow(const interp::Problem &p, int64_t i) { return i + p.seqlenK - p.seqlenQ; }

std::vector<Fp8Case> fp8Cases() {
  return {
      {"none", variants::full, {}, {}, {}},
      {"causal", variants::causal, {}, [](const auto &p, int64_t i, int64_t j) { return j <= alignedRow(p, i); }, {}},
      {"sliding_window_24_4",
       [] { return variants::slidingWindow(256, 0); },
       {24.f, 4.f},
       [](const auto &p, int64_t i, int64_t j) { return j >= alignedRow(p, i) - 24 && j <= alignedRow(p, i) + 4; },
       {}},
      {"softcap",
       [] { return variants::softcap(30.f); },
       {2.f},
       {},
       [](double s, int64_t, int64_t, int64_t, const auto &) { return 2.0 * std::tanh(s / 2.0); }},
      {"alibi",
       [] { return variants::alibi(variants::SlopeShape::Heads); },
       {},
       {},
       {},
       false,
       true},
      {"sinks", variants::sinks, {}, {}, {}, true},
  };
}

struct Fp8Inputs {
  std::vector<float> q, k, v; ///< e4m3 values (already rounded)
  std::vector<float> slopes, sinks;
};

/// O (BSHD) of the dequantized problem in double, and its low-precision twin (normalized P rounded to e4m3, O to
/// bf16): the two references of flash-attn's fp8 rule.
struct Fp8Reference {
  std::vector<double> o, oLowp;
};

Fp8Reference fp8Reference(const interp::Problem &p, const Fp8Case &c, const Fp8Inputs &in) {
  const int64_t B = p.batch, Sq = p.seqlenQ, Sk = p.seqlenK, Hq = p.headsQ, Hkv = p.headsKv, D = p.headDim;
  const double inf = std::numeric_limits<double>::infinity();
  Fp8Reference ref{std::vector<double>(B * Sq * Hq * D), std::vector<double>(B * Sq * Hq * D)};
  std::vector<double> s(Sk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv), at = b * Hkv + hk;
      const double qd = p.qDescale[at], kd = p.kDescale[at], vd = p.vDescale[at];
      for (int64_t i = 0; i < Sq; ++i) {
        double m = c.sinks ? in.sinks[h] : -inf;
        for (int64_t j = 0; j < Sk; ++j) {
          s[j] = -inf;
          if (c.keep && !c.keep(p, i, j))
            continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += (in.q[((b * Sq + i) * Hq + h) * D + d] * qd) * (in.k[((b * Sk + j) * Hkv + hk) * D + d] * kd);
          s[j] = dot * p.softmaxScale;
          if (c.score)
            s[j] = c.score(s[j], h, i, j, p);
          if (c.slopes)
            s[j] -= in.slopes[h] * std::fabs(double(alignedRow(p, i) - j));
          m = std::max(m, s[j]);
        }
        double *o = &ref.o[((b * Sq + i) * Hq + h) * D], *oLowp = &ref.oLowp[((b * Sq + i) * Hq + h) * D];
        if (m == -inf)
          continue;
        double l = c.sinks ? std::exp(in.sinks[h] - m) : 0.0;
        for (int64_t j = 0; j < Sk; ++j)
          l += std::exp(s[j] - m);
        for (int64_t j = 0; j < Sk; ++j) {
          const double pj = std::exp(s[j] - m) / l, pLowp = interp::roundToE4m3(static_cast<float>(pj));
          for (int64_t d = 0; d < D; ++d) {
            const double vj = in.v[((b * Sk + j) * Hkv + hk) * D + d] * vd;
            o[d] += pj * vj;
            oLowp[d] += pLowp * vj;
          }
        }
        for (int64_t d = 0; d < D; ++d)
          oLowp[d] = interp::roundToBf16(static_cast<float>(oLowp[d]));
      }
    }
  return ref;
}

class Fp8Interpreter : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Interpreter, MatchesTheDequantizedReferenceWithDescales) {
  const Fp8Case &c = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, c.make(), ProgramOptions{ElementType::E4M3, 64, 64});
  ASSERT_TRUE(succeeded(program)) << diags.text;

  const uint64_t seed = seedFor("Fp8Interpreter_" + c.name);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  interp::Problem p = flashtile::testing::problem(2, 70, 90, 4, 2, 64, c.params);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> descale(0.25f, 4.0f), slope(0.05f, 0.5f);
  Fp8Inputs in;
  // Quantized inputs: e4m3 values of a standard normal spread over e4m3's range (as a quantizer would leave them).
  auto quantized = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = interp::roundToE4m3(4.0f * normal(rng));
    return x;
  };
  in.q = quantized(int64_t{p.batch} * p.seqlenQ * p.headsQ * p.headDim);
  in.k = quantized(int64_t{p.batch} * p.seqlenK * p.headsKv * p.headDim);
  in.v = quantized(int64_t{p.batch} * p.seqlenK * p.headsKv * p.headDimV);
  for (std::vector<float> *d : {&p.qDescale, &p.kDescale, &p.vDescale})
    for (int64_t i = 0; i < int64_t{p.batch} * p.headsKv; ++i)
      d->push_back(descale(rng) / (d == &p.vDescale ? 1.0f : 4.0f)); // q·k: scores of order one
  if (c.slopes) {
    for (int h = 0; h < p.headsQ; ++h)
      in.slopes.push_back(slope(rng));
    p.inputs = {in.slopes};
  }
  if (c.sinks) {
    for (int h = 0; h < p.headsQ; ++h)
      in.sinks.push_back(normal(rng));
    p.inputs = {in.sinks};
  }
  const Fp8Reference ref = fp8Reference(p, c, in);
  const double bound = 2 * maxAbsDiff(std::vector<float>(ref.oLowp.begin(), ref.oLowp.end()), ref.o) + 1e-5;

  std::vector<float> o, lse;
  ASSERT_TRUE(succeeded(interp::run(funcOf(**program), p, in.q, in.k, in.v, o, lse))) << diags.text;
  for (float x : o)
    ASSERT_EQ(x, interp::roundToBf16(x)) << "O must be stored in bf16";
  const double err = maxAbsDiff(o, ref.o);
  EXPECT_LE(err, bound) << c.name << ": max |O - ref| = " << err << " exceeds 2·max|ref_lowp - ref| + 1e-5";

  // The rule is not vacuous: the same program without the descales (each left at 1), or without v's alone, breaks it.
  for (bool keepQk : {false, true}) {
    interp::Problem wrong = p;
    wrong.vDescale.clear();
    if (!keepQk)
      wrong.qDescale.clear(), wrong.kDescale.clear();
    ASSERT_TRUE(succeeded(interp::run(funcOf(**program), wrong, in.q, in.k, in.v, o, lse))) << diags.text;
    EXPECT_GT(maxAbsDiff(o, ref.o), bound) << c.name << ": dropping descales (q·k kept: " << keepQk
                                           << ") went unnoticed";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, Fp8Interpreter, ::testing::ValuesIn(fp8Cases()),
                         [](const ::testing::TestParamInfo<Fp8Case> &info) { return info.param.name; });

TEST(Fp8Interpreter, RefusesDescalesOfTheWrongSizeOrDtype) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  interp::Problem p = flashtile::testing::problem(2, 8, 8, 2, 1, 64);
  std::vector<float> q(2 * 8 * 2 * 64, 0.5f), kv(2 * 8 * 1 * 64, 0.5f), o, lse;
  auto e4m3 = buildAttentionProgram(context, variants::full(), ProgramOptions{ElementType::E4M3, 64, 64});
  ASSERT_TRUE(succeeded(e4m3)) << diags.text;
  p.kDescale = {1.0f, 1.0f, 1.0f};
  EXPECT_TRUE(failed(interp::run(funcOf(**e4m3), p, q, kv, kv, o, lse)));
  EXPECT_NE(diags.text.find("k_descale holds 3 values; a descale is empty (= 1) or batch x heads_kv = 2x1 values"),
            std::string::npos)
      << diags.text;
  auto bf16 = buildAttentionProgram(context, variants::full(), ProgramOptions{ElementType::BF16, 64, 64});
  ASSERT_TRUE(succeeded(bf16)) << diags.text;
  p.kDescale = {1.0f, 1.0f};
  EXPECT_TRUE(failed(interp::run(funcOf(**bf16), p, q, kv, kv, o, lse)));
  EXPECT_NE(diags.text.find("k_descale is given, but descales apply to f8E4M3FN (e4m3) tensors only, and this "
                            "program's K and V are bf16"),
            std::string::npos)
      << diags.text;
}

} // namespace
