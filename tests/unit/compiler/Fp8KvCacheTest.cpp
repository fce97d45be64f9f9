//===- Fp8KvCacheTest.cpp - an e4m3 KV cache under a bf16/f16 Q, without a GPU -===//
//
// The e4m3 KV cache of a decode step (docs/fp8.md, "An e4m3 KV cache"): the DSL's kvDtype and its IR (tile.kv_dtype:
// K and V tiles e4m3, Q, P and O of the 16-bit dtype), the refusals (an e4m3 Q, a backward, schedules and families
// that read K/V of the program's dtype only, a decode kernel without the KV-cache code); the interpreter on the
// decode schedule's KV-cache programs, at several split counts, against a double reference on the dequantized cache
// (FlashAttention's rule, with negative controls: without k_descale or v_descale the rule breaks); and the printed
// kernels: every built-in variant x head dim, bf16 and f16, with and without rotary embedding, compile with NVRTC for
// sm_80 and sm_90a (their plan: the append kernel, the attention kernel, the combine; FlashtileFp8Params last).
// Inputs are random; FLASHTILE_TEST_SEED changes every case's seed.
//===----------------------------------------------------------------------===//
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
#include "passes/IR/TileKvDtype.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>

using namespace mlir;
using namespace flashtile;

namespace {

using flashtile::test::maxAbsDiff;

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;
using flashtile::testing::seedFor;

ProgramOptions e4m3Cache(ElementType dtype, int headDim, int headDimV = 0, RotaryMode rotary = RotaryMode::None) {
  ProgramOptions options{dtype, headDim, headDimV ? headDimV : headDim, rotary};
  options.kvDtype = ElementType::E4M3;
  return options;
}

/// `module` after `schedule`'s pipeline (on `arch`, with `knobs`), or null (the diagnostics say why).
OwningOpRef<ModuleOp> scheduledWith(ModuleOp module, const std::string &schedule, const std::string &arch,
                                    schedule::Knobs knobs) {
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(module.getContext());
  std::string message;
  if (failed(schedule::buildPipeline(pm, schedule::Request{schedule, arch, "default", std::move(knobs)}, message))) {
    ADD_FAILURE() << message;
    return {};
  }
  if (failed(pm.run(*copy)))
    return {};
  return copy;
}

//===----------------------------------------------------------------------===//
// The DSL and the IR
//===----------------------------------------------------------------------===//

TEST(Fp8KvCacheProgram, KAndVAreE4m3AndQPAndOKeepTheDtype) {
  for (ElementType dtype : {ElementType::BF16, ElementType::F16}) {
    MLIRContext context;
    DiagnosticCapture diags(context);
    auto program = buildAttentionProgram(context, variants::causal(), e4m3Cache(dtype, 128));
    ASSERT_TRUE(succeeded(program)) << diags.text;
    tile::FuncOp func = funcOf(**program);
    ASSERT_TRUE(tile::hasKvDtype(func));
    EXPECT_TRUE(isa<Float8E4M3FNType>(tile::kvDtypeOf(func)));
    EXPECT_EQ(func.getDtype(), func.getOutputType()) << "O keeps the 16-bit dtype";
    int kv = 0;
    func.walk([&](tile::LoadOp load) {
      Type element = cast<RankedTensorType>(load.getResult().getType()).getElementType();
      if (load.getOperand() == tile::Operand::Q) {
        EXPECT_EQ(element, func.getDtype());
      } else {
        EXPECT_TRUE(isa<Float8E4M3FNType>(element));
        ++kv;
      }
    });
    EXPECT_EQ(kv, 2);
    func.walk([&](tile::SoftmaxUpdateOp update) {
      EXPECT_EQ(cast<RankedTensorType>(update.getP().getType()).getElementType(), func.getDtype())
          << "P·V runs in the 16-bit dtype (V widened exactly)";
    });
    // The printed program parses back with the attribute.
    std::string text;
    llvm::raw_string_ostream os(text);
    (*program)->print(os);
    EXPECT_NE(text.find("tile.kv_dtype = f8E4M3FN"), std::string::npos) << text;
  }
}

TEST(Fp8KvCacheProgram, WithoutKvDtypeNothingChanges) {
  MLIRContext context;
  ProgramOptions same{ElementType::BF16, 128, 128};
  same.kvDtype = ElementType::BF16; // the dtype itself: no attribute
  auto program = buildAttentionProgram(context, variants::full(), same);
  ASSERT_TRUE(succeeded(program));
  EXPECT_FALSE(tile::hasKvDtype(funcOf(**program)));
}

TEST(Fp8KvCacheProgram, RefusesOtherPairsAndTheBackwardByName) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  // An e4m3 kv dtype under an e4m3 dtype is the e4m3 program itself (no attribute); the decode schedule refuses it
  // by name (no 8-bit MMA path: Fp8Test.cpp).
  auto q8 = buildAttentionProgram(context, variants::full(), e4m3Cache(ElementType::E4M3, 128));
  ASSERT_TRUE(succeeded(q8)) << diags.text;
  EXPECT_FALSE(tile::hasKvDtype(funcOf(**q8)));
  EXPECT_TRUE(failed(buildProgram(context, variants::full(), e4m3Cache(ElementType::BF16, 128), "backward")));
  EXPECT_NE(diags.text.find("kv dtype e4m3 has no backward programs"), std::string::npos) << diags.text;
  ProgramOptions kvF16{ElementType::BF16, 128, 128};
  kvF16.kvDtype = ElementType::F16;
  EXPECT_TRUE(failed(buildAttentionProgram(context, variants::full(), kvF16)));
  EXPECT_NE(diags.text.find("kv dtype f16 with dtype bf16 is not supported"), std::string::npos) << diags.text;
}

TEST(Fp8KvCacheProgram, TheVerifierChecksTheAttributeAndTheTiles) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, variants::full(), e4m3Cache(ElementType::BF16, 64));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  tile::FuncOp func = funcOf(**program);
  func->setAttr(tile::kKvDtypeAttr, TypeAttr::get(Float16Type::get(&context)));
  EXPECT_TRUE(failed(mlir::verify(func)));
  EXPECT_NE(diags.text.find("tile.kv_dtype must be f8E4M3FN (an e4m3 KV cache)"), std::string::npos) << diags.text;
  // Without the attribute the e4m3 K and V loads are of another type than the program's.
  func->removeAttr(tile::kKvDtypeAttr);
  EXPECT_TRUE(failed(mlir::verify(func)));
  EXPECT_NE(diags.text.find("differs from the program's dtype 'bf16'"), std::string::npos) << diags.text;
}

TEST(Fp8KvCacheSchedules, OnlyTheDecodeKvCacheKernelsReadAnE4m3Cache) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, variants::causal(), e4m3Cache(ElementType::BF16, 128));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  for (auto [name, arch] : {std::pair<std::string, std::string>{"fa2", "sm_80"}, {"fa3", "sm_90a"}}) {
    diags.text.clear();
    EXPECT_FALSE(scheduledWith(**program, name, arch, {})) << name;
    EXPECT_NE(diags.text.find("schedule '" + name +
                              "' reads K and V in the program's dtype: kv_dtype e4m3 (an e4m3 "
                              "KV cache) is read by the KV-cache kernels of schedule 'decode'"),
              std::string::npos)
        << name << ": " << diags.text;
  }
  diags.text.clear();
  EXPECT_FALSE(scheduledWith(**program, "decode", "sm_90a", {{"kv-cache", 0}}));
  EXPECT_NE(diags.text.find("which only a KV cache holds: split it with kv-cache"), std::string::npos) << diags.text;
  EXPECT_TRUE(scheduledWith(**program, "decode", "sm_90a", {{"kv-cache", 1}})) << diags.text;
}

//===----------------------------------------------------------------------===//
// The interpreter on the decode schedule's KV-cache programs
//===----------------------------------------------------------------------===//

struct Fp8KvCase {
  std::string variant; // none, causal, softcap (cap 2)
  ElementType dtype;
  int headDim, seqlenQ, seqlenK, headsQ, headsKv;

  std::string name() const {
    return variant + (dtype == ElementType::BF16 ? "_bf16" : "_f16") + "_d" + std::to_string(headDim) + "_q" +
           std::to_string(seqlenQ) + "_k" + std::to_string(seqlenK) + "_h" + std::to_string(headsQ) + "x" +
           std::to_string(headsKv);
  }
};

void PrintTo(const Fp8KvCase &c, std::ostream *os) { *os << c.name(); }

/// O (BSHD) of the problem in double on the dequantized cache (K·k_descale, V·v_descale) and Q as the dtype holds
/// it, and its low-precision twin (normalized P and O rounded to the dtype): the two references of the rule.
struct Reference {
  std::vector<double> o, oLowp;
};

Reference reference(const interp::Problem &p, const Fp8KvCase &c, const std::vector<float> &q,
                    const std::vector<float> &k, const std::vector<float> &v, interp::RoundFn round) {
  const int64_t B = p.batch, Sq = p.seqlenQ, Sk = p.seqlenK, Hq = p.headsQ, Hkv = p.headsKv, D = p.headDim;
  const double inf = std::numeric_limits<double>::infinity();
  Reference ref{std::vector<double>(B * Sq * Hq * D), std::vector<double>(B * Sq * Hq * D)};
  std::vector<double> s(Sk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv), at = b * Hkv + hk;
      const double kd = p.kDescale.empty() ? 1.0 : p.kDescale[at], vd = p.vDescale.empty() ? 1.0 : p.vDescale[at];
      for (int64_t i = 0; i < Sq; ++i) {
        double m = -inf;
        for (int64_t j = 0; j < Sk; ++j) {
          s[j] = -inf;
          if (c.variant == "causal" && j > i + Sk - Sq)
            continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(round(q[((b * Sq + i) * Hq + h) * D + d])) * (k[((b * Sk + j) * Hkv + hk) * D + d] * kd);
          s[j] = dot * p.softmaxScale;
          if (c.variant == "softcap")
            s[j] = 2.0 * std::tanh(s[j] / 2.0);
          m = std::max(m, s[j]);
        }
        double *o = &ref.o[((b * Sq + i) * Hq + h) * D], *oLowp = &ref.oLowp[((b * Sq + i) * Hq + h) * D];
        if (m == -inf)
          continue;
        double l = 0;
        for (int64_t j = 0; j < Sk; ++j)
          l += std::exp(s[j] - m);
        for (int64_t j = 0; j < Sk; ++j) {
          const double pj = std::exp(s[j] - m) / l, pLowp = round(static_cast<float>(pj));
          for (int64_t d = 0; d < D; ++d) {
            const double vj = v[((b * Sk + j) * Hkv + hk) * D + d] * vd;
            o[d] += pj * vj;
            oLowp[d] += pLowp * vj;
          }
        }
        for (int64_t d = 0; d < D; ++d)
          oLowp[d] = round(static_cast<float>(oLowp[d]));
      }
    }
  return ref;
}

/// Random inputs of problem `p`: Q standard normal, K and V e4m3 values of 16·N(0, 1) (a quantizer's spread over
/// e4m3's range), drawn in that order from `rng`.
struct CacheInputs {
  std::vector<float> q, k, v;
};
CacheInputs randomInputs(const interp::Problem &p, std::mt19937_64 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](int64_t n, bool e4m3) {
    std::vector<float> x(n);
    for (float &e : x)
      e = e4m3 ? interp::roundToE4m3(16.0f * normal(rng)) : normal(rng);
    return x;
  };
  CacheInputs in;
  in.q = fill(int64_t{p.batch} * p.seqlenQ * p.headsQ * p.headDim, false);
  in.k = fill(int64_t{p.batch} * p.seqlenK * p.headsKv * p.headDim, true);
  in.v = fill(int64_t{p.batch} * p.seqlenK * p.headsKv * p.headDimV, true);
  return in;
}

class Fp8KvInterpreter : public ::testing::TestWithParam<Fp8KvCase> {};

TEST_P(Fp8KvInterpreter, MatchesTheDequantizedCacheAtEverySplitCount) {
  const Fp8KvCase &c = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  std::optional<Variant> variant = c.variant == "softcap" ? variants::softcap(30.f) : variants::byName(c.variant);
  ASSERT_TRUE(variant);
  auto program = buildAttentionProgram(context, *variant, e4m3Cache(c.dtype, c.headDim));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  // 32-key tiles, so that a few hundred keys are several splits of several tiles.
  OwningOpRef<ModuleOp> decode = scheduledWith(**program, "decode", "sm_80", {{"kv-cache", 1}, {"block-n", 32}});
  ASSERT_TRUE(decode) << diags.text;

  const uint64_t seed = seedFor("Fp8KvInterpreter_" + c.name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  interp::Problem p =
      flashtile::testing::problem(2, c.seqlenQ, c.seqlenK, c.headsQ, c.headsKv, c.headDim,
                                  c.variant == "softcap" ? std::vector<float>{2.f} : std::vector<float>{});
  std::uniform_real_distribution<float> descale(0.02f, 0.5f);
  const auto [q, k, v] = randomInputs(p, rng);
  for (std::vector<float> *d : {&p.kDescale, &p.vDescale})
    for (int64_t i = 0; i < int64_t{p.batch} * p.headsKv; ++i)
      d->push_back(descale(rng) / 16.0f * 4.0f); // dequantized values of order one
  interp::RoundFn round = c.dtype == ElementType::BF16 ? interp::roundToBf16 : interp::roundToF16;
  const Reference ref = reference(p, c, q, k, v, round);
  const double bound = 2 * maxAbsDiff(std::vector<float>(ref.oLowp.begin(), ref.oLowp.end()), ref.o) + 1e-5;

  const int tiles = (c.seqlenK + 31) / 32;
  for (OwningOpRef<ModuleOp> *module : {&*program, &decode})
    for (int splits : {1, 3, tiles + 2}) {
      const bool scheduled = module == &decode;
      if (!scheduled && splits != 1)
        continue;
      p.numSplits = splits;
      std::vector<float> o, lse;
      ASSERT_TRUE(succeeded(interp::run(funcOf(**module), p, q, k, v, o, lse))) << diags.text;
      for (float x : o)
        ASSERT_EQ(x, round(x)) << "O is stored in the dtype";
      const double err = maxAbsDiff(o, ref.o);
      EXPECT_LE(err, bound) << (scheduled ? "decode, " : "unscheduled, ") << splits
                            << " splits: max |O - ref| = " << err << " exceeds 2·max|ref_lowp - ref| + 1e-5";
    }
  // The rule is not vacuous: without k_descale, or without v_descale, the same program breaks it.
  p.numSplits = 3;
  for (bool dropK : {true, false}) {
    interp::Problem wrong = p;
    (dropK ? wrong.kDescale : wrong.vDescale).clear();
    std::vector<float> o, lse;
    ASSERT_TRUE(succeeded(interp::run(funcOf(*decode), wrong, q, k, v, o, lse))) << diags.text;
    EXPECT_GT(maxAbsDiff(o, ref.o), bound) << "dropping " << (dropK ? "k_descale" : "v_descale") << " went unnoticed";
  }
}

std::vector<Fp8KvCase> fp8KvCases() {
  return {{"none", ElementType::BF16, 64, 1, 300, 8, 2},
          {"causal", ElementType::BF16, 64, 4, 257, 8, 2},
          {"softcap", ElementType::BF16, 64, 1, 90, 4, 4},
          {"causal", ElementType::F16, 128, 2, 130, 4, 1},
          {"none", ElementType::F16, 64, 16, 200, 2, 2}};
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8KvInterpreter, ::testing::ValuesIn(fp8KvCases()),
                         [](const ::testing::TestParamInfo<Fp8KvCase> &info) { return info.param.name(); });

TEST(Fp8KvInterpreter, DescalesFollowTheTensorsTheyScale) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, variants::full(), e4m3Cache(ElementType::BF16, 64));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  interp::Problem p = flashtile::testing::problem(2, 1, 8, 2, 1, 64);
  std::vector<float> q(2 * 1 * 2 * 64, 0.5f), kv(2 * 8 * 1 * 64, 0.5f), o, lse;
  p.kDescale = p.vDescale = {0.5f, 2.0f};
  EXPECT_TRUE(succeeded(interp::run(funcOf(**program), p, q, kv, kv, o, lse))) << diags.text;
  p.qDescale = {1.0f, 1.0f};
  EXPECT_TRUE(failed(interp::run(funcOf(**program), p, q, kv, kv, o, lse)));
  EXPECT_NE(diags.text.find("q_descale is given, but descales apply to f8E4M3FN (e4m3) tensors only, and this "
                            "program's Q is bf16"),
            std::string::npos)
      << diags.text;
}

//===----------------------------------------------------------------------===//
// The device functions' arithmetic, replayed on the host
//===----------------------------------------------------------------------===//

/// The value of e4m3 byte `b` (APFloat's float8_e4m3fn).
float e4m3Value(uint8_t b) {
  llvm::APFloat a(llvm::APFloat::Float8E4M3FN(), llvm::APInt(8, b));
  bool lost;
  a.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &lost);
  return a.convertToFloat();
}

float f16Value(uint16_t bits) {
  llvm::APFloat a(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits));
  bool lost;
  a.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &lost);
  return a.convertToFloat();
}

uint16_t f16Bits(float x) {
  llvm::APFloat a(x);
  bool lost;
  a.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven, &lost);
  EXPECT_FALSE(lost) << x << " is not an f16 value";
  return static_cast<uint16_t>(a.bitcastToAPInt().getZExtValue());
}

// sm80::e4m3x2ToF16x2's sm_80 path (the printed kernels' widening where the GPU has no FP8 conversion), one half of
// it: the byte to the f16 bits s.0eeee.mmm0000000, times 2^8 (mul.rn.f16x2, exact here), NaN's pattern made an f16
// NaN. Every byte's result equals its e4m3 value, subnormals, zeros and NaN included.
TEST(Fp8KvWidening, TheSm80PathIsExactForEveryByte) {
  for (unsigned b = 0; b < 256; ++b) {
    const unsigned y = b << 8;
    const unsigned bits = ((y & 0x7f00u) >> 1) | (y & 0x8000u);
    const uint16_t product = f16Bits(f16Value(static_cast<uint16_t>(bits)) * 256.0f);
    const unsigned nan = ((y & 0x7f00u) + 0x0100u) & 0x8000u;
    const uint16_t widened = static_cast<uint16_t>(product | (nan - (nan >> 6)));
    const float want = e4m3Value(static_cast<uint8_t>(b)), got = f16Value(widened);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "byte " << b << ": " << got << " vs "
                                                                             << want;
    }
  }
}

/// appendRoundE4m3 (the append kernel's fp32 -> e4m3, plain C in the printed kernel), as a host function.
uint8_t appendRoundE4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return static_cast<uint8_t>(sign | 0x7fu);
  if (a >= 0x43e00000u)
    return static_cast<uint8_t>(sign | 0x7eu);
  if (a >= 0x3c800000u) {
    const uint32_t r = a - 0x3c000000u;
    return static_cast<uint8_t>(sign | std::min((r + 0x7ffffu + ((r >> 20) & 1u)) >> 20, 0x7eu));
  }
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(std::bit_cast<float>(a) * 512.f)));
}

// The append kernel's rounding is the interpreter's roundToE4m3 (nearest, ties to even, saturating at ±448), which
// Fp8Test.cpp checks against APFloat: on ties, on the subnormal/normal boundary, on saturation and on random floats.
TEST(Fp8KvWidening, TheAppendRoundingIsTheInterpretersE4m3) {
  std::mt19937 rng(static_cast<unsigned>(seedFor("Fp8KvAppendRounding")));
  std::vector<float> xs = {0.0f, 448.0f, 464.0f, 465.0f, 1e9f, std::numeric_limits<float>::infinity(), 0x1p-9f,
                           0x1p-10f, 0x1.8p-10f, 0x1.fp-7f, 0x1p-6f, 0x1.ep-7f, 1.0625f, 1.1875f, 1e-30f};
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(x))
      xs.push_back(x);
    xs.push_back(std::ldexp(float(int(rng() % 32) * 2 + 1), -13 + int(rng() % 18))); // ties
    xs.push_back(std::ldexp(std::normal_distribution<float>(0.0f, 1.0f)(rng), int(rng() % 16) - 8));
  }
  int bad = 0;
  for (float x : xs)
    for (float v : {x, -x}) {
      const float got = e4m3Value(appendRoundE4m3(v)), want = interp::roundToE4m3(v);
      if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && bad++ < 5)
        ADD_FAILURE() << "e4m3(" << v << "): the append kernel's " << got << ", the interpreter's " << want;
    }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(appendRoundE4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

//===----------------------------------------------------------------------===//
// The printed kernels, through NVRTC
//===----------------------------------------------------------------------===//

using Fp8KvCompileConfig = std::tuple<std::string, ElementType, int, int, RotaryMode>; // variant, dtype, hd, hdv

int count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++n;
  return n;
}

class Fp8KvCompiles : public ::testing::TestWithParam<Fp8KvCompileConfig> {};

TEST_P(Fp8KvCompiles, AppendAttentionAndCombineToCubins) {
  auto [variantName, dtype, headDim, headDimV, rotary] = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program =
      buildAttentionProgram(context, *variants::byName(variantName), e4m3Cache(dtype, headDim, headDimV, rotary));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  for (const char *arch : {"sm_80", "sm_90a"}) {
    SCOPED_TRACE(arch);
    // The widening (kv-convert 0; the default converts in registers: Fp8KvConvertRegisters below).
    OwningOpRef<ModuleOp> decode = scheduledWith(**program, "decode", arch, {{"kv-cache", 1}, {"kv-convert", 0}});
    ASSERT_TRUE(decode) << diags.text;
    FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(*decode));
    ASSERT_TRUE(succeeded(kernel)) << diags.text;
    const KernelInfo &info = kernel->info;
    EXPECT_EQ(info.kvDtype, "e4m3");
    EXPECT_EQ(info.dtype, dtype == ElementType::BF16 ? "bf16" : "f16");
    EXPECT_NE(info.entry.find("_kvcache_e4m3"), std::string::npos) << info.entry;
    EXPECT_TRUE(info.verify().ok()) << info.verify().message();
    StatusOr<KernelInfo> parsed = KernelInfo::parse(info.serialize());
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed->kvDtype, "e4m3");
    EXPECT_NE(info.spec().key().find(";kvDtype=e4m3"), std::string::npos);
    ASSERT_EQ(plans::launchedEntries(info),
              (std::vector<std::string>{info.entry + "_append", info.entry, info.entry + "_combine"}));
    // The attention and the append kernels take the descales; the combine does not need them.
    EXPECT_EQ(count(kernel->source, ", const FlashtileFp8Params fp8)"), 2);
    // Every load of a K or V tile (one per loop segment) widens the staged tile first.
    EXPECT_GE(count(kernel->source, "sm80::widenE4m3x16(staged, wide);"), 2);
    EXPECT_EQ(count(kernel->source, "__syncthreads();  // sK holds the widened tile for every warp"),
              count(kernel->source, ": ldmatrix.x4 reads its B fragments inside S = Q·Kᵀ"));
    EXPECT_EQ(count(kernel->source, "__syncthreads();  // sV holds the widened tile for every warp"),
              count(kernel->source, ": ldmatrix.x4.trans reads its B fragments inside P·V"));
    EXPECT_EQ(count(kernel->source, "p.scaleLog2 = params.scaleLog2 * kDescale;"), 1);
    EXPECT_GE(count(kernel->source, "*= vDescale;"), 1);
    EXPECT_EQ(count(kernel->source, "appendRoundE4m3(__fdiv_rn(appendToFloat(x16[e]), descale))"), 1);
    std::string log;
    StatusOr<std::string> cubin = compileCuda(kernel->source, info.entry + ".cu", arch, NvrtcOutput::Cubin, {}, &log);
    ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
    for (const std::string &entry : plans::launchedEntries(info))
      EXPECT_NE(cubin->find(entry), std::string::npos) << entry;
  }
}

std::string fp8KvConfigName(const ::testing::TestParamInfo<Fp8KvCompileConfig> &info) {
  auto [variant, dtype, headDim, headDimV, rotary] = info.param;
  return variant + (dtype == ElementType::BF16 ? "_bf16" : "_f16") + "_d" + std::to_string(headDim) +
         (headDimV != headDim ? "_dv" + std::to_string(headDimV) : "") +
         (rotary == RotaryMode::Halves        ? "_rotary"
          : rotary == RotaryMode::Interleaved ? "_rotary_interleaved"
                                              : "");
}

INSTANTIATE_TEST_SUITE_P(Variants, Fp8KvCompiles,
                         ::testing::Combine(::testing::Values("none", "causal", "causal_top_left", "sliding_window",
                                                              "sliding_window_causal", "softcap", "softcap_causal",
                                                              "alibi", "alibi_per_batch", "alibi_causal", "sinks",
                                                              "sinks_causal", "document_mask"),
                                            ::testing::Values(ElementType::BF16), ::testing::Values(128),
                                            ::testing::Values(128), ::testing::Values(RotaryMode::None)),
                         fp8KvConfigName);
INSTANTIATE_TEST_SUITE_P(HeadDims, Fp8KvCompiles,
                         ::testing::Values(Fp8KvCompileConfig{"causal", ElementType::BF16, 64, 64, RotaryMode::None},
                                           Fp8KvCompileConfig{"causal", ElementType::F16, 96, 96, RotaryMode::None},
                                           Fp8KvCompileConfig{"none", ElementType::F16, 128, 128, RotaryMode::None},
                                           Fp8KvCompileConfig{"causal", ElementType::BF16, 192, 128, RotaryMode::None},
                                           Fp8KvCompileConfig{"none", ElementType::BF16, 256, 256, RotaryMode::None},
                                           Fp8KvCompileConfig{"causal", ElementType::F16, 256, 256, RotaryMode::None}),
                         fp8KvConfigName);
INSTANTIATE_TEST_SUITE_P(
    Rotary, Fp8KvCompiles,
    ::testing::Values(Fp8KvCompileConfig{"causal", ElementType::BF16, 128, 128, RotaryMode::Halves},
                      Fp8KvCompileConfig{"none", ElementType::F16, 64, 64, RotaryMode::Interleaved}),
    fp8KvConfigName);

//===----------------------------------------------------------------------===//
// kv-convert 1: the 8-bit tiles' MMA fragments converted in registers
//===----------------------------------------------------------------------===//

/// The CUDA of the decode KV-cache kernel of `program` on `arch` with `knobs`, or nothing (the diagnostics say why).
std::optional<codegen::EmittedKernel> decodeCuda(ModuleOp program, const std::string &arch, schedule::Knobs knobs) {
  knobs["kv-cache"] = 1;
  OwningOpRef<ModuleOp> decode = scheduledWith(program, "decode", arch, std::move(knobs));
  if (!decode)
    return std::nullopt;
  FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(*decode));
  if (failed(kernel))
    return std::nullopt;
  return *kernel;
}

// variant, dtype, head dim, head dim v, the decode knobs besides kv-convert 1 and kv-cache 1
using Fp8KvRegistersConfig = std::tuple<std::string, ElementType, int, int, schedule::Knobs>;

class Fp8KvConvertRegisters : public ::testing::TestWithParam<Fp8KvRegistersConfig> {};

TEST_P(Fp8KvConvertRegisters, CompilesWithoutSixteenBitTiles) {
  auto [variantName, dtype, headDim, headDimV, knobs] = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, *variants::byName(variantName), e4m3Cache(dtype, headDim, headDimV));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  for (const char *arch : {"sm_80", "sm_90a"}) {
    SCOPED_TRACE(arch);
    schedule::Knobs withRegisters = knobs;
    withRegisters["kv-convert"] = 1;
    std::optional<codegen::EmittedKernel> kernel = decodeCuda(**program, arch, withRegisters);
    ASSERT_TRUE(kernel) << diags.text;
    schedule::Knobs widening = knobs;  // the widening kernel of the same knobs (kv-convert 1 is the default now)
    widening["kv-convert"] = 0;
    std::optional<codegen::EmittedKernel> widened = decodeCuda(**program, arch, widening);
    ASSERT_TRUE(widened) << diags.text;
    const std::string &source = kernel->source;
    // No widening pass and no 16-bit K/V tile: the fragments are converted where the MMAs read them.
    EXPECT_EQ(count(source, "sm80::widenE4m3x16(staged, wide);"), 0);
    EXPECT_EQ(count(source, "holds the widened tile for every warp"), 0);
    EXPECT_EQ(count(source, "sm80::widenE4m3x4(kRaw[i], kFrag);"),
              count(source, ": ldmatrix.x4 reads its 8-bit B fragments inside S = Q·Kᵀ"));
    EXPECT_EQ(count(source, "sm80::widenE4m3x4Trans(vRaw[2 * c], vRaw[2 * c + 1], vEven, vOdd);"),
              count(source, ": ldmatrix.x4.trans reads its 8-bit B fragments inside P·V"));
    EXPECT_EQ(count(source, "---- acc's columns back to the mma C layout"), 1);
    EXPECT_EQ(count(source, "p.scaleLog2 = params.scaleLog2 * kDescale;"), 1);
    // Same entry, spec and plan as the widening kernel; a third of its shared memory at most.
    const KernelInfo &info = kernel->info;
    EXPECT_EQ(info.entry, widened->info.entry);
    EXPECT_EQ(info.spec().key(), widened->info.spec().key());
    EXPECT_EQ(plans::launchedEntries(info), plans::launchedEntries(widened->info));
    EXPECT_TRUE(info.verify().ok()) << info.verify().message();
    auto attentionSmem = [](const KernelInfo &i) {
      for (const PlanLaunch &launch : i.plan.launches)
        if (launch.entry == i.entry)
          return launch.smemBytes;
      return -1;
    };
    EXPECT_GT(attentionSmem(info), 0);
    EXPECT_LT(attentionSmem(info), attentionSmem(widened->info));
    std::string log;
    StatusOr<std::string> cubin = compileCuda(source, info.entry + ".cu", arch, NvrtcOutput::Cubin, {}, &log);
    ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << source;
    for (const std::string &entry : plans::launchedEntries(info))
      EXPECT_NE(cubin->find(entry), std::string::npos) << entry;
  }
}

std::string fp8KvRegistersName(const ::testing::TestParamInfo<Fp8KvRegistersConfig> &info) {
  auto [variant, dtype, headDim, headDimV, knobs] = info.param;
  std::string name = variant + (dtype == ElementType::BF16 ? "_bf16" : "_f16") + "_d" + std::to_string(headDim) +
                     (headDimV != headDim ? "_dv" + std::to_string(headDimV) : "");
  for (const auto &[knob, value] : knobs) {
    name += "_" + knob + std::to_string(value);
    std::replace(name.begin(), name.end(), '-', '_');
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp8KvConvertRegisters,
    ::testing::Values(Fp8KvRegistersConfig{"causal", ElementType::BF16, 128, 128, {}},
                      Fp8KvRegistersConfig{"none", ElementType::F16, 128, 128, {}},
                      Fp8KvRegistersConfig{"causal", ElementType::BF16, 128, 128, {{"stages", 2}}},
                      Fp8KvRegistersConfig{"causal", ElementType::BF16, 128, 128, {{"block-n", 128}}},
                      Fp8KvRegistersConfig{"causal", ElementType::BF16, 128, 128, {{"block-m", 16}, {"warps", 1}}},
                      Fp8KvRegistersConfig{
                          "causal", ElementType::BF16, 128, 128, {{"block-m", 16}, {"warps", 1}, {"stages", 2}}},
                      Fp8KvRegistersConfig{"softcap_causal", ElementType::BF16, 64, 64, {}},
                      Fp8KvRegistersConfig{"sliding_window", ElementType::F16, 96, 96, {}},
                      Fp8KvRegistersConfig{"causal", ElementType::BF16, 192, 128, {}},
                      Fp8KvRegistersConfig{"alibi", ElementType::BF16, 256, 256, {}},
                      Fp8KvRegistersConfig{"sinks", ElementType::F16, 256, 256, {{"pack-gqa", 0}}}),
    fp8KvRegistersName);

// The larger tiles and rings the decode knobs allow compile for the widening kernel too, within shared memory.
TEST(Fp8KvConvertRegisters, WideningKernelsTakeTheLargerTilesAndRings) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, *variants::byName("causal"), e4m3Cache(ElementType::BF16, 128));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  for (const char *arch : {"sm_80", "sm_90a"})
    for (const schedule::Knobs &knobs : std::vector<schedule::Knobs>{
             {{"kv-convert", 0}, {"block-n", 128}},
             {{"kv-convert", 0}, {"stages", 2}},
             {{"kv-convert", 0}, {"block-m", 16}, {"warps", 1}},
             {{"kv-convert", 0}, {"min-blocks-per-sm", 4}}}) {
      SCOPED_TRACE(std::string(arch) + " " + fp8KvRegistersName({{"causal", ElementType::BF16, 128, 128, knobs}, 0}));
      std::optional<codegen::EmittedKernel> kernel = decodeCuda(**program, arch, knobs);
      ASSERT_TRUE(kernel) << diags.text;
      EXPECT_GE(count(kernel->source, "sm80::widenE4m3x16(staged, wide);"), 2);
      std::string log;
      StatusOr<std::string> cubin =
          compileCuda(kernel->source, kernel->info.entry + ".cu", arch, NvrtcOutput::Cubin, {}, &log);
      EXPECT_TRUE(cubin.ok()) << cubin.status().message();
    }
}

// Over an e4m3 cache the default is kv-convert 1 on one warp of 16 rows (measured: bench/NOTES.md v45); block-m or
// warps named keep the knobs' tiling with the conversion in registers; kv-convert 0 names the widening.
TEST(Fp8KvConvertRegisters, TheDefaultConvertsInRegistersOnOneWarpAndSixteenBitKvRefusesTheKnob) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto e4m3 = buildAttentionProgram(context, *variants::byName("causal"), e4m3Cache(ElementType::BF16, 128));
  auto bf16 = buildAttentionProgram(context, *variants::byName("causal"), ProgramOptions{ElementType::BF16, 128, 128});
  ASSERT_TRUE(succeeded(e4m3) && succeeded(bf16)) << diags.text;
  for (const char *arch : {"sm_80", "sm_90a"}) {
    std::optional<codegen::EmittedKernel> plain = decodeCuda(**e4m3, arch, {}),
                                          named = decodeCuda(**e4m3, arch,
                                                             {{"kv-convert", 1}, {"block-m", 16}, {"warps", 1}}),
                                          zero = decodeCuda(**e4m3, arch, {{"kv-convert", 0}}),
                                          widened = decodeCuda(**e4m3, arch,
                                                               {{"kv-convert", 0}, {"block-m", 32}, {"warps", 2}}),
                                          wide = decodeCuda(**e4m3, arch, {{"block-m", 32}}),
                                          wideNamed = decodeCuda(**e4m3, arch, {{"kv-convert", 1}, {"block-m", 32}});
    ASSERT_TRUE(plain && named && zero && widened && wide && wideNamed) << diags.text;
    EXPECT_EQ(plain->source, named->source) << "kv-convert 1 on one warp of 16 rows is the default";
    EXPECT_EQ(zero->source, widened->source) << "kv-convert 0 keeps bf16's tiling";
    EXPECT_EQ(wide->source, wideNamed->source) << "block-m named: the conversion stays in registers";
    EXPECT_NE(plain->source, zero->source);
    EXPECT_EQ(count(plain->source, "sm80::widenE4m3x16(staged, wide);"), 0);
    EXPECT_GE(count(zero->source, "sm80::widenE4m3x16(staged, wide);"), 2);
    // 16-bit K/V have nothing to convert: kv-convert 0 leaves their kernel as it was, 1 is refused by name.
    std::optional<codegen::EmittedKernel> bf16Plain = decodeCuda(**bf16, arch, {}),
                                          bf16Zero = decodeCuda(**bf16, arch, {{"kv-convert", 0}});
    ASSERT_TRUE(bf16Plain && bf16Zero) << diags.text;
    EXPECT_EQ(bf16Plain->source, bf16Zero->source);
    diags.text.clear();
    EXPECT_FALSE(decodeCuda(**bf16, arch, {{"kv-convert", 1}}));
    EXPECT_NE(diags.text.find("decode: kv-convert = 1 is not supported here; accepted: 0"), std::string::npos)
        << diags.text;
  }
}

TEST(Fp8KvConvertRegisters, RefusesWhatItCannotReadByName) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, *variants::byName("none"), e4m3Cache(ElementType::BF16, 128));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  EXPECT_FALSE(decodeCuda(**program, "sm_90a", {{"kv-convert", 1}, {"block-n", 48}}));
  EXPECT_NE(diags.text.find("kv-convert 1 reads 8-bit fragments 32 keys and 32 columns of V at a time: block-n (48)"),
            std::string::npos)
      << diags.text;
  PassManager pm(&context);
  std::string message;
  EXPECT_TRUE(failed(schedule::buildPipeline(
      pm, schedule::Request{"decode", "sm_90a", "default", {{"kv-cache", 1}, {"kv-convert", 2}}}, message)));
  EXPECT_NE(message.find("decode: kv-convert = 2 is out of range; accepted: 0 to 1"), std::string::npos) << message;
}

// The knob changes the printed kernel only: the program the interpreter runs computes the same O, bit for bit.
TEST(Fp8KvConvertRegisters, TheInterpreterSeesTheSameProgram) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, *variants::byName("causal"), e4m3Cache(ElementType::BF16, 64));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  OwningOpRef<ModuleOp> widened =
      scheduledWith(**program, "decode", "sm_90a", {{"kv-cache", 1}, {"block-n", 32}, {"kv-convert", 0}});
  OwningOpRef<ModuleOp> registers =
      scheduledWith(**program, "decode", "sm_90a", {{"kv-cache", 1}, {"block-n", 32}, {"kv-convert", 1}});
  ASSERT_TRUE(widened && registers) << diags.text;
  EXPECT_FALSE(funcOf(*widened)->hasAttr(tile::kKvConvertRegistersAttr));
  EXPECT_TRUE(funcOf(*registers)->hasAttr(tile::kKvConvertRegistersAttr));
  const uint64_t seed = seedFor("Fp8KvConvertRegisters_interpreter");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  interp::Problem p = flashtile::testing::problem(2, 1, 200, 8, 2, 64, {});
  const auto [q, k, v] = randomInputs(p, rng);
  for (std::vector<float> *d : {&p.kDescale, &p.vDescale})
    for (int64_t i = 0; i < int64_t{p.batch} * p.headsKv; ++i)
      d->push_back(0.05f + 0.01f * float(i));
  for (int splits : {1, 3}) {
    p.numSplits = splits;
    std::vector<float> o0, lse0, o1, lse1;
    ASSERT_TRUE(succeeded(interp::run(funcOf(*widened), p, q, k, v, o0, lse0))) << diags.text;
    ASSERT_TRUE(succeeded(interp::run(funcOf(*registers), p, q, k, v, o1, lse1))) << diags.text;
    EXPECT_EQ(o0, o1);
    EXPECT_EQ(lse0, lse1);
  }
}

TEST(Fp8KvCompiles, OtherFamiliesAndPlainKernelsRefuseAnE4m3Cache) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto program = buildAttentionProgram(context, variants::full(), e4m3Cache(ElementType::BF16, 128));
  ASSERT_TRUE(succeeded(program)) << diags.text;
  OwningOpRef<ModuleOp> decode = scheduledWith(**program, "decode", "sm_90a", {{"kv-cache", 1}});
  ASSERT_TRUE(decode) << diags.text;
  // A kernel that reads e4m3 K/V without the cache code cannot be printed (only caches hold e4m3).
  tile::FuncOp func = funcOf(*decode);
  func->removeAttr("tile.kv_cache");
  EXPECT_TRUE(failed(codegen::emitCuda(func)));
  EXPECT_NE(diags.text.find("without reading a KV cache (tile.kv_cache); the CUDA printer reads e4m3 K and V from KV "
                            "caches only"),
            std::string::npos)
      << diags.text;
}

} // namespace

//===----------------------------------------------------------------------===//
// kv-f16-mma 1: a bf16 program's MMAs in f16 over kv-convert 1's e4m3 fragments
//===----------------------------------------------------------------------===//

// Q·Kᵀ and P·V are f16 MMAs (no bf16 MMA is called), the K/V fragments stay f16 (one conversion a pair: no f16 to
// fp32 to bf16 round trip in the prelude), Q's fragments are converted once with the warp's power-of-two scale that
// every S tile undoes, P is rounded to f16, and O still leaves as bf16; the kernels compile for sm_80 and sm_90a.
// Without the knob the kernel is the default's, byte for byte.
TEST(Fp8KvF16Mma, RunsTheMmasInF16AndKeepsTheOutputBf16) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  for (auto [variantName, headDim, knobs] :
       std::vector<std::tuple<const char *, int, schedule::Knobs>>{{"causal", 128, {}},
                                                                   {"none", 64, {{"block-m", 32}, {"warps", 2}}},
                                                                   {"softcap_causal", 128, {{"stages", 2}}}}) {
    SCOPED_TRACE(std::string(variantName) + " d" + std::to_string(headDim));
    auto program =
        buildAttentionProgram(context, *variants::byName(variantName), e4m3Cache(ElementType::BF16, headDim));
    ASSERT_TRUE(succeeded(program)) << diags.text;
    for (const char *arch : {"sm_80", "sm_90a"}) {
      SCOPED_TRACE(arch);
      schedule::Knobs f16 = knobs;
      f16["kv-f16-mma"] = 1;
      std::optional<codegen::EmittedKernel> kernel = decodeCuda(**program, arch, f16),
                                            plain = decodeCuda(**program, arch, knobs),
                                            named = decodeCuda(**program, arch, [&] {
                                              schedule::Knobs off = knobs;
                                              off["kv-f16-mma"] = 0;
                                              return off;
                                            }());
      ASSERT_TRUE(kernel && plain && named) << diags.text;
      EXPECT_EQ(plain->source, named->source);
      const std::string &source = kernel->source;
      EXPECT_EQ(count(source, "sm80::mmaBf16("), 0);
      EXPECT_GE(count(source, "sm80::mmaF16(score[mt][4 * nq + i], "), 1);
      EXPECT_GE(count(source, "sm80::mmaF16(acc[mt][4 * nc + 2 * c], "), 1);
      EXPECT_EQ(count(source, "out[i] = packBf16x2(lo, hi);"), 0);
      EXPECT_EQ(count(source, "const int qShift = "), 1);
      EXPECT_EQ(count(source, "[mt][nt][i] *= qUnscale;"), count(source, "sm80::widenE4m3x4(kRaw[i], kFrag);"));
      EXPECT_GE(count(source, "[mt][k][0] = sm80::packF16x2("), 1);
      EXPECT_EQ(count(source, "[mt][k][0] = sm80::packBf16x2("), 0);
      EXPECT_GE(count(plain->source, "[mt][k][0] = sm80::packBf16x2("), 1);
      EXPECT_EQ(count(source, "sm80::packBf16x2(o0, o1)"), count(plain->source, "sm80::packBf16x2(o0, o1)"));
      std::string log;
      StatusOr<std::string> cubin = compileCuda(source, kernel->info.entry + ".cu", arch, NvrtcOutput::Cubin, {}, &log);
      ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << source;
    }
  }
}

// Refused by name: an f16 program (its MMAs are f16 already), the widening (kv-convert 0), and a Q whose fragments
// do not stay in registers (head dim 256 at 16 rows a warp).
TEST(Fp8KvF16Mma, RefusesWhereItHasNothingToDoByName) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  auto f16 = buildAttentionProgram(context, *variants::byName("causal"), e4m3Cache(ElementType::F16, 128));
  auto bf16 = buildAttentionProgram(context, *variants::byName("causal"), e4m3Cache(ElementType::BF16, 128));
  auto wide = buildAttentionProgram(context, *variants::byName("causal"), e4m3Cache(ElementType::BF16, 256));
  ASSERT_TRUE(succeeded(f16) && succeeded(bf16) && succeeded(wide)) << diags.text;
  EXPECT_FALSE(decodeCuda(**f16, "sm_90a", {{"kv-f16-mma", 1}}));
  EXPECT_NE(diags.text.find("decode: kv-f16-mma = 1 runs a bf16 program's MMAs in f16"), std::string::npos)
      << diags.text;
  diags.text.clear();
  EXPECT_FALSE(decodeCuda(**bf16, "sm_90a", {{"kv-f16-mma", 1}, {"kv-convert", 0}}));
  EXPECT_NE(diags.text.find("accepted: 1 with kv-convert 1"), std::string::npos) << diags.text;
  diags.text.clear();
  EXPECT_FALSE(decodeCuda(**wide, "sm_90a", {{"kv-f16-mma", 1}}));
  EXPECT_NE(diags.text.find("kv-f16-mma converts Q's fragments once, in registers: head_dim (256)"), std::string::npos)
      << diags.text;
}
