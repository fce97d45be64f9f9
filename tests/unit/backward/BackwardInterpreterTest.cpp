// BackwardInterpreterTest.cpp — the backward's tile programs, as the DSL builds them from each built-in variant's
// hooks, run by the CPU interpreter (interp::runBackward) and compared with the fp64 oracle
// (interpreter/ReferenceBackward.h): dQ, dK, dV and D, for every built-in variant, GQA and MQA, Sq != Sk (both causal
// alignments), varlen with an empty key sequence and an empty query sequence, head dims 32, 64, 128 and 192/128, bf16
// and fp16, whole-sequence tiles and small tiles (several Q tiles per K/V tile, padded rows). Planted errors in the
// programs (a wrong sign in the score hook's derivative, a dropped scale, unmasked probabilities, a wrong D) must fail
// the comparison they affect. The main program also runs with its Q-tile walk bounded by tile-bound-q-loop (the
// inverse of the variant's KV-range rules, in masked and unmasked segments) and pipelined by tile-pipeline-q-loop (its
// GEMMs reordered), which must give the same gradients while
// visiting fewer Q tiles where the variant skips some; a bound that drops tiles or a mask must fail. The fa3 schedule's
// backward (its whole pass pipeline for sm_90a: 64-row Q tiles, 64-key K/V tiles, the bounded and pipelined walk) runs
// for every built-in variant, at head dims 64 and 128, bf16 and fp16, with several tiles and padded rows.
//
// The tolerance is the rounding model's worst case, per element. Both sides get the same Q, K, V and dO (values of
// the dtype) and the interpreter the oracle's O rounded to the dtype and LSE rounded to fp32, as the forward stores
// them. With u the dtype's unit roundoff (bf16 2^-8, fp16 2^-11), the interpreter's result differs from the oracle's
// by at most:
//   - rounding P (before dV += Pᵀ·dO) and dS (before dK += dSᵀ·Q and dQ += dS·K) to the dtype: u·Σ|a|·|b| over each
//     GEMM's products (the oracle's Magnitudes dvAbs, dkAbs, dqAbs);
//   - O rounded (relative u) in D = rowsum(dO∘O), which moves dS_ij by P_ij·|ds/dlogit|·u·Σ|dO_i∘O_i| (viaD);
//   - the result rounded to the dtype: u·|result| <= u·(|ref| + the above);
//   - fp32 arithmetic everywhere else (Q·Kᵀ, the hooks, exp, accumulations of at most a few hundred terms), relative
//     errors below 2^-16 of the tensor's largest magnitude.
// This bound holds whatever the signs of the rounding errors; the worst ratio error / bound is printed.
#include "BackwardTestSupport.h"

#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/ProgramKinds.h"

#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"
#include "codegen/Registry.h"
#include "schedules/Registry.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>

using namespace mlir;
using namespace flashtile;
using namespace flashtile::backward_test;

namespace {

/// The fp32 arithmetic's share of the bound: relative to a tensor's largest magnitude.
constexpr double kFp32Slack = 1.0 / (1 << 16);
/// fp32 sums of an input gradient's terms (a few thousand, summed per instance then across instances): relative to
/// the sum of their magnitudes.
constexpr double kInputSumSlack = 1.0 / (1 << 14);

/// One problem the programs run on.
struct Case {
  std::string variant;
  Shape shape;                      ///< varlen: batch, and seqlenQ/seqlenK the totals
  std::vector<int32_t> cuQ, cuK;    ///< varlen offsets, or empty
  int tileRowsQ = 0, tileRowsK = 0; ///< the unscheduled programs' tile rows (0: whole sequences)
  ElementType dtype = ElementType::BF16;
  /// The main program scheduled with blockM = tileRowsQ, blockN = tileRowsK and its Q-tile walk bounded and pipelined
  /// (tile-bound-q-loop, tile-pipeline-q-loop).
  bool bounded = false;
  /// Scheduled by this registered schedule's backward pipeline for sm_90a (its tiles, not tileRowsQ/K), or none.
  std::string schedule;
  /// The schedule's knobs (block-m 80 at head dim 128: the transposed layout's 80-row Q tiles).
  schedule::Knobs knobs = {};
  std::string name() const {
    std::ostringstream out;
    out << variant << "_b" << shape.batch << "_q" << shape.seqlenQ << "_k" << shape.seqlenK << "_h" << shape.headsQ
        << "x" << shape.headsKv << "_d" << shape.headDim << "x" << shape.headDimV << (cuQ.empty() ? "" : "_varlen")
        << "_t" << tileRowsQ << "x" << tileRowsK << (dtype == ElementType::BF16 ? "_bf16" : "_fp16")
        << (bounded ? "_bounded" : "") << (schedule.empty() ? "" : "_" + schedule);
    for (const auto &[knob, value] : knobs) {
      std::string word = knob;
      std::replace(word.begin(), word.end(), '-', '_');
      out << "_" << word << value;
    }
    return out.str();
  }
};

/// How gtest prints a case in messages: by its name, not as the bytes of the struct.
void PrintTo(const Case &c, std::ostream *out) { *out << c.name(); }

double unitRoundoff(ElementType dtype) { return dtype == ElementType::BF16 ? 1.0 / 256 : 1.0 / 2048; }
interp::RoundFn roundFn(ElementType dtype) {
  return dtype == ElementType::BF16 ? interp::roundToBf16 : interp::roundToF16;
}

/// Values of the dtype, as fp64.
std::vector<double> ofDtype(std::vector<double> x, ElementType dtype) {
  for (double &e : x)
    e = roundFn(dtype)(static_cast<float>(e));
  return x;
}
std::vector<float> asFloats(const std::vector<double> &x) { return std::vector<float>(x.begin(), x.end()); }

/// The oracle's problem for a case: problemFor's parameters and inputs (varlen: f32 inputs over the packed keys,
/// document starts within each sequence), every number exactly an fp32 so that both sides read the same.
interp::ReferenceProblem referenceProblem(const Variant &variant, const Case &c, std::mt19937_64 &rng) {
  interp::ReferenceProblem p = problemFor(variant, c.shape, rng);
  p.softmaxScale = static_cast<float>(p.softmaxScale);
  p.cuSeqlensQ = c.cuQ;
  p.cuSeqlensK = c.cuK;
  for (interp::WideInput &input : p.inputs) {
    if (auto *f32 = std::get_if<std::vector<double>>(&input)) {
      for (double &e : *f32)
        e = static_cast<float>(e);
      continue;
    }
    if (c.cuK.empty())
      continue;
    // Varlen document starts: one per packed key row, positions within its sequence.
    auto &starts = std::get<std::vector<int32_t>>(input);
    starts.assign(c.shape.seqlenK, 0);
    std::bernoulli_distribution newDocument(0.3);
    for (int b = 0; b < c.shape.batch; ++b)
      for (int t = 0, start = 0; t < c.cuK[b + 1] - c.cuK[b]; ++t) {
        if (t > 0 && newDocument(rng))
          start = t;
        starts[c.cuK[b] + t] = start;
      }
  }
  return p;
}

interp::Problem interpreterProblem(const interp::ReferenceProblem &r, const Case &c) {
  interp::Problem p;
  p.batch = r.batch;
  p.seqlenQ = r.seqlenQ;
  p.seqlenK = r.seqlenK;
  p.headsQ = r.headsQ;
  p.headsKv = r.headsKv;
  p.headDim = r.headDim;
  p.headDimV = r.headDimV;
  p.softmaxScale = static_cast<float>(r.softmaxScale);
  p.params.assign(r.params.begin(), r.params.end());
  for (const interp::WideInput &input : r.inputs) {
    if (const auto *f32 = std::get_if<std::vector<double>>(&input))
      p.inputs.push_back(asFloats(*f32));
    else
      p.inputs.push_back(std::get<std::vector<int32_t>>(input));
  }
  p.cuSeqlensQ = c.cuQ;
  p.cuSeqlensK = c.cuK;
  p.tileRowsQ = c.tileRowsQ;
  p.tileRowsK = c.tileRowsK;
  return p;
}

/// The worst element of one comparison against its bound.
struct Comparison {
  std::string what;
  double worstRatio = 0; ///< max error / bound (NaN and a missing value count as infinity)
  size_t worstAt = 0;
  double got = 0, want = 0, bound = 0;
  bool passed() const { return worstRatio <= 1; }
  std::string describe() const {
    std::ostringstream out;
    out << what << "[" << worstAt << "]: interpreter " << got << ", oracle " << want << ", bound " << bound
        << " (error / bound " << worstRatio << ")";
    return out.str();
  }
};

/// Compares `got` with `want` element by element: bound = u·|want| + (1 + u)·u·Σ magnitudes + slack·max magnitude.
Comparison compare(const std::string &what, const std::vector<float> &got, const std::vector<double> &want,
                   const std::vector<const std::vector<double> *> &magnitudes, double u) {
  Comparison c{what};
  if (got.size() != want.size()) {
    c.worstRatio = std::numeric_limits<double>::infinity();
    return c;
  }
  double largest = 0;
  for (const std::vector<double> *m : magnitudes)
    for (double e : *m)
      largest = std::max(largest, e);
  for (double e : want)
    largest = std::max(largest, std::abs(e));
  for (size_t i = 0; i < got.size(); ++i) {
    double mag = 0;
    for (const std::vector<double> *m : magnitudes)
      mag += (*m)[i];
    const double bound = u * std::abs(want[i]) + (1 + u) * u * mag + kFp32Slack * largest;
    const double error = std::abs(double(got[i]) - want[i]);
    const double ratio = std::isnan(error) ? std::numeric_limits<double>::infinity()
                         : bound > 0       ? error / bound
                         : error > 0       ? std::numeric_limits<double>::infinity()
                                           : 0;
    if (ratio > c.worstRatio || (i == 0 && ratio == 0)) {
      c.worstRatio = ratio;
      c.worstAt = i;
      c.got = got[i];
      c.want = want[i];
      c.bound = bound;
    }
  }
  return c;
}

/// Everything one case computes: the oracle's gradients and the interpreter's comparisons (dQ, dK, dV, D).
struct Outcome {
  bool ran = false;
  int64_t qTileVisits = 0; ///< by the main program's loops
  std::vector<Comparison> comparisons;
  const Comparison *find(const std::string &what) const {
    for (const Comparison &c : comparisons)
      if (c.what == what)
        return &c;
    return nullptr;
  }
};

/// A change to the backward module before it runs (a planted error), or none.
using Plant = std::function<bool(ModuleOp)>;

tile::FuncOp mainProgram(ModuleOp module) {
  for (tile::FuncOp func : module.getOps<tile::FuncOp>())
    if (func.getKind() == tile::kBackwardMain)
      return func;
  return {};
}

/// Schedules the main program (blockM x blockN tiles, two Q-tile buffers; what the rest of a schedule sets does not
/// matter here), bounds its Q-tile walk (three segments, head boundary, interior, tail boundary) and pipelines it as
/// fa2 does (tile-pipeline-q-loop: the key-row GEMMs after dS, the loops marked tile.q_buffers = 2).
bool boundQLoop(ModuleOp module, const Case &c) {
  MLIRContext *context = module.getContext();
  std::string text = "#tile.schedule<name = \"interp\", blockM = " + std::to_string(c.tileRowsQ) +
                     ", blockN = " + std::to_string(c.tileRowsK) +
                     ", warps = 1, warpLayout = split_q, warpRows = " + std::to_string(c.tileRowsQ) + ", stages = 2>";
  auto schedule = dyn_cast_or_null<tile::ScheduleAttr>(parseAttribute(text, context));
  tile::FuncOp main = mainProgram(module);
  if (!schedule || !main)
    return false;
  main.setScheduleAttr(schedule);
  PassManager pm(context);
  pm.addNestedPass<tile::FuncOp>(tile::createTileBoundQLoop());
  pm.addNestedPass<tile::FuncOp>(tile::createTilePipelineQLoop());
  if (failed(pm.run(module)))
    return false;
  int segments = 0;
  main.walk([&](tile::QLoopOp loop) { segments += loop.isBounded() && loop->hasAttr(tile::kQBuffersAttr); });
  return segments == 3;
}

/// Runs `schedule`'s backward pipeline for sm_90a on the module (every program scheduled, the main program's walk
/// bounded and pipelined, lowered to the schedule's family there).
bool scheduleWith(ModuleOp module, const std::string &name, const schedule::Knobs &knobs) {
  schedule::registerBuiltinSchedules();
  codegen::registerBuiltinTargets();
  const schedule::Schedule *scheduleDef = schedule::lookupSchedule(name);
  if (!scheduleDef || !scheduleDef->schedulesKind(tile::kBackwardModule))
    return false;
  schedule::Request request;
  request.schedule = name;
  request.arch = "sm_90a";
  request.kind = tile::kBackwardModule;
  request.knobs = knobs;
  PassManager pm(module.getContext());
  scheduleDef->buildPipeline(pm, request);
  if (failed(pm.run(module)))
    return false;
  int segments = 0;
  mainProgram(module).walk([&](tile::QLoopOp loop) { segments += loop.isBounded(); });
  // A knob naming the Q tile's rows must be what the main program got (else the case checks another tiling).
  if (knobs.count("block-m") && mainProgram(module).getScheduleAttr().getBlockM() != knobs.at("block-m"))
    return false;
  return segments > 0 && mainProgram(module).getScheduleAttr().getName() == name;
}

Outcome runCase(const Case &c, const Plant &plant = {}) {
  Outcome outcome;
  std::optional<Variant> variant = variants::byName(c.variant);
  EXPECT_TRUE(variant.has_value()) << c.variant;
  if (!variant)
    return outcome;
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  const ProgramOptions options{c.dtype, c.shape.headDim, c.shape.headDimV};
  auto forward = buildAttentionProgram(context, *variant, options);
  auto backward = buildProgram(context, *variant, options, tile::kBackwardModule);
  EXPECT_TRUE(succeeded(forward) && succeeded(backward)) << diagnostics.text;
  if (failed(forward) || failed(backward))
    return outcome;
  if (c.bounded && !boundQLoop(**backward, c)) {
    ADD_FAILURE() << "bounding the Q-tile walk of " << c.variant << "'s main program failed: " << diagnostics.text;
    return outcome;
  }
  if (!c.schedule.empty() && !scheduleWith(**backward, c.schedule, c.knobs)) {
    ADD_FAILURE() << "the " << c.schedule << " backward pipeline failed on " << c.variant << ": " << diagnostics.text;
    return outcome;
  }
  if (plant && !plant(**backward)) {
    ADD_FAILURE() << "the planted error found nothing to change in " << c.variant << "'s backward programs";
    return outcome;
  }

  std::mt19937_64 rng(flashtile::testing::seedFor(c.name()));
  interp::ReferenceProblem ref = referenceProblem(*variant, c, rng);
  const Shape &s = c.shape;
  const size_t entries = c.cuQ.empty() ? size_t(s.batch) : 1;
  const size_t qRows = entries * s.seqlenQ * s.headsQ, kRows = entries * s.seqlenK * s.headsKv;
  std::vector<double> q = ofDtype(uniform(qRows * s.headDim, -1.5, 1.5, rng), c.dtype);
  std::vector<double> k = ofDtype(uniform(kRows * s.headDim, -1.5, 1.5, rng), c.dtype);
  std::vector<double> v = ofDtype(uniform(kRows * s.headDimV, -1, 1, rng), c.dtype);
  std::vector<double> dO = ofDtype(uniform(qRows * s.headDimV, -1, 1, rng), c.dtype);
  auto want = interp::referenceBackward(funcOf(**forward), ref, q, k, v, dO);
  EXPECT_TRUE(succeeded(want)) << diagnostics.text;
  if (failed(want))
    return outcome;

  // What the forward stored: O of the dtype, LSE in fp32.
  interp::BackwardTensors tensors{asFloats(q),       asFloats(k),  asFloats(v),
                                  asFloats(want->o), asFloats(dO), asFloats(want->lse)};
  interp::Gradients got;
  interp::BackwardStats stats;
  const bool ran = succeeded(interp::runBackward(**backward, interpreterProblem(ref, c), tensors, got, &stats));
  EXPECT_TRUE(ran) << diagnostics.text;
  if (!ran)
    return outcome;
  outcome.ran = true;
  outcome.qTileVisits = stats.qTileVisits;

  const double u = unitRoundoff(c.dtype);
  const auto &m = want->magnitudes;
  outcome.comparisons.push_back(compare("dq", got.dq, want->dq, {&m.dqAbs, &m.dqViaD}, u));
  outcome.comparisons.push_back(compare("dk", got.dk, want->dk, {&m.dkAbs, &m.dkViaD}, u));
  outcome.comparisons.push_back(compare("dv", got.dv, want->dv, {&m.dvAbs}, u));
  // D from O of the dtype: u·Σ|dO∘O| per row (fp32, not rounded).
  std::vector<double> dAbs(want->d.size(), 0.0);
  for (size_t row = 0; row < dAbs.size(); ++row) {
    // LSE's layout (entries x heads x seqlen_q) back to O's rows.
    const size_t i = row % s.seqlenQ, h = row / s.seqlenQ % s.headsQ, b = row / s.seqlenQ / s.headsQ;
    for (int d = 0; d < s.headDimV; ++d) {
      const size_t at = ((b * s.seqlenQ + i) * s.headsQ + h) * s.headDimV + d;
      dAbs[row] += std::abs(dO[at] * want->o[at]);
    }
  }
  outcome.comparisons.push_back(compare("delta", got.delta, want->d, {&dAbs}, u));
  // The f32 inputs' gradients (fp32 results): O's rounding through D (u·viaD), and fp32 sums of the terms, within
  // kInputSumSlack of Σ|terms| (compare's u·mag, so scaled by kInputSumSlack / u).
  for (size_t i = 0; i < want->dInputs.size(); ++i) {
    if (want->dInputs[i].empty())
      continue;
    std::vector<double> sums = m.dInputsAbs[i];
    for (double &e : sums)
      e *= kInputSumSlack / u;
    const std::string name = "d" + cast<tile::InputAttr>(funcOf(**forward).getInputs()[i]).getName().str();
    outcome.comparisons.push_back(
        compare(name, i < got.dInputs.size() ? got.dInputs[i] : std::vector<float>(), want->dInputs[i],
                {&m.dInputsViaD[i], &sums}, u));
  }
  return outcome;
}

void expectAllPass(const Outcome &outcome, const std::string &name) {
  ASSERT_TRUE(outcome.ran) << name;
  for (const Comparison &c : outcome.comparisons) {
    EXPECT_TRUE(c.passed()) << name << ": " << c.describe();
    std::printf("  %-60s %-5s worst error/bound %.3g\n", name.c_str(), c.what.c_str(), c.worstRatio);
  }
}

/// Shapes: GQA 4/2 with Sq < Sk, MQA 4/1 with Sq > Sk (bottom-right causal rows before the first key see nothing),
/// varlen (sequence 1 has no key, sequence 2 no query).
const std::vector<std::string> &allVariants() {
  static const std::vector<std::string> names = {
      "none",    "causal",         "causal_top_left", "sliding_window",  "sliding_window_causal",
      "softcap", "softcap_causal", "alibi",           "alibi_per_batch", "alibi_causal",
      "sinks",   "sinks_causal",   "document_mask"};
  return names;
}

std::vector<Case> matrix() {
  std::vector<Case> cases;
  const Shape headDims[] = {
      {2, 7, 11, 4, 2, 32, 32}, {2, 7, 11, 4, 2, 64, 64}, {2, 7, 11, 4, 2, 128, 128}, {2, 7, 11, 4, 2, 192, 128}};
  int n = 0;
  for (const std::string &variant : allVariants()) {
    // Dense GQA, Sq < Sk, small tiles (several per sequence, the last padded), a head dim per variant in turn.
    cases.push_back({variant, headDims[n++ % 4], {}, {}, 3, 4});
    // Dense MQA, Sq > Sk, whole-sequence tiles.
    cases.push_back({variant, {2, 9, 5, 4, 1, 32, 32}, {}, {}, 0, 0});
    // Varlen GQA: q lengths 5, 4, 0, 7; k lengths 7, 0, 3, 9; tiles of 4 queries and 3 keys.
    cases.push_back({variant, {4, 16, 19, 4, 2, 64, 64}, {0, 5, 9, 9, 16}, {0, 7, 7, 10, 19}, 4, 3});
    // fp16, MHA.
    cases.push_back({variant, {1, 6, 6, 2, 2, 64, 64}, {}, {}, 0, 0, ElementType::F16});
  }
  // Every head dim for the variants with a score hook's derivative or a sink.
  for (const char *variant : {"softcap_causal", "alibi_causal", "sinks_causal"})
    for (const Shape &shape : headDims)
      cases.push_back({variant, shape, {}, {}, 4, 3});
  return cases;
}

/// Every variant with its Q-tile walk bounded: Sq = Sk and Sq != Sk (both causal alignments), GQA, varlen.
std::vector<Case> boundedMatrix() {
  std::vector<Case> cases;
  for (const std::string &variant : allVariants()) {
    cases.push_back({variant, {2, 16, 16, 4, 2, 32, 32}, {}, {}, 4, 4, ElementType::BF16, true});
    cases.push_back({variant, {1, 7, 13, 2, 1, 64, 64}, {}, {}, 2, 3, ElementType::BF16, true});
    cases.push_back({variant, {1, 13, 6, 2, 2, 32, 32}, {}, {}, 3, 2, ElementType::BF16, true});
    cases.push_back(
        {variant, {4, 16, 19, 4, 2, 64, 64}, {0, 5, 9, 9, 16}, {0, 7, 7, 10, 19}, 2, 3, ElementType::BF16, true});
  }
  return cases;
}

/// Every variant under fa3's backward schedule (64 x 64 tiles): sequences of several tiles with padded rows, GQA,
/// Sq != Sk, varlen, head dims 64 and 128, bf16 and fp16.
std::vector<Case> fa3Matrix() {
  std::vector<Case> cases;
  int n = 0;
  for (const std::string &variant : allVariants()) {
    const int headDim = n++ % 2 ? 128 : 64;
    Case dense{variant, {1, 150, 131, 2, 1, headDim, headDim}, {}, {}, 0, 0, ElementType::BF16};
    dense.schedule = "fa3";
    cases.push_back(dense);
    Case varlen{variant, {3, 170, 200, 2, 2, 64, 64}, {0, 70, 70, 170}, {0, 130, 135, 200}, 0, 0, ElementType::F16};
    varlen.schedule = "fa3";
    cases.push_back(varlen);
    // block-m 80 (swap-sdp, dQ transposed) at head dim 128: 80-row Q tiles, the last one partial.
    Case rows80{variant, {1, 170, 131, 2, 1, 128, 128}, {}, {}, 0, 0, ElementType::BF16};
    rows80.schedule = "fa3";
    rows80.knobs = {{"block-m", 80}};
    cases.push_back(rows80);
    Case rows80Varlen{variant, {3, 170, 200, 2, 2, 128, 128}, {0, 70, 70, 170}, {0, 130, 135, 200}, 0, 0,
                      ElementType::F16};
    rows80Varlen.schedule = "fa3";
    rows80Varlen.knobs = {{"block-m", 80}};
    cases.push_back(rows80Varlen);
  }
  return cases;
}

class BackwardInterpreter : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardInterpreter, MatchesTheFp64Oracle) { expectAllPass(runCase(GetParam()), GetParam().name()); }

INSTANTIATE_TEST_SUITE_P(Builtins, BackwardInterpreter, ::testing::ValuesIn(matrix()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name(); });

class Fa3BackwardInterpreter : public ::testing::TestWithParam<Case> {};

TEST_P(Fa3BackwardInterpreter, MatchesTheFp64Oracle) { expectAllPass(runCase(GetParam()), GetParam().name()); }

INSTANTIATE_TEST_SUITE_P(Builtins, Fa3BackwardInterpreter, ::testing::ValuesIn(fa3Matrix()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name(); });

class BoundedBackwardInterpreter : public ::testing::TestWithParam<Case> {};

/// The bounded walk gives what the oracle gives, visiting no more Q tiles than the unbounded one: fewer where the
/// variant's rules let a K/V tile skip some (causal: the Q tiles above the diagonal; windows: those outside).
TEST_P(BoundedBackwardInterpreter, MatchesTheFp64OracleAndSkipsQTiles) {
  const Case &bounded = GetParam();
  Outcome outcome = runCase(bounded);
  expectAllPass(outcome, bounded.name());
  Case unbounded = bounded;
  unbounded.bounded = false;
  Outcome all = runCase(unbounded);
  ASSERT_TRUE(all.ran);
  EXPECT_LE(outcome.qTileVisits, all.qTileVisits);
  const bool skips = bounded.variant.find("causal") != std::string::npos ||
                     bounded.variant.find("window") != std::string::npos || bounded.variant == "document_mask";
  if (skips && bounded.cuQ.empty() && bounded.shape.seqlenQ == 16)
    EXPECT_LT(outcome.qTileVisits, all.qTileVisits) << "the bounded walk skips no Q tile";
  std::printf("  %-60s Q tiles visited %lld of %lld\n", bounded.name().c_str(),
              static_cast<long long>(outcome.qTileVisits), static_cast<long long>(all.qTileVisits));
}

INSTANTIATE_TEST_SUITE_P(Builtins, BoundedBackwardInterpreter, ::testing::ValuesIn(boundedMatrix()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name(); });

//===----------------------------------------------------------------------===//
// Planted errors: each must fail the comparison it affects (and leave the others passing).
//===----------------------------------------------------------------------===//

/// The tile.scale of dS (after tile.softmax_grad / tile.score_grad) and the unscaled dS it reads.
tile::ScaleOp dsScale(ModuleOp module) {
  tile::ScaleOp found;
  mainProgram(module).walk([&](tile::ScaleOp scale) {
    if (scale.getS().getDefiningOp<tile::SoftmaxGradOp>() || scale.getS().getDefiningOp<tile::ScoreGradOp>())
      found = scale;
  });
  return found;
}

void expectFails(const Outcome &outcome, const std::vector<std::string> &failing, const std::string &plant) {
  ASSERT_TRUE(outcome.ran) << plant;
  for (const Comparison &c : outcome.comparisons) {
    bool shouldFail = llvm::is_contained(failing, c.what);
    EXPECT_EQ(c.passed(), !shouldFail) << plant << ": " << c.describe();
    std::printf("  %-45s %-5s worst error/bound %.3g\n", plant.c_str(), c.what.c_str(), c.worstRatio);
  }
}

const Case kPlantCase{"softcap_causal", {2, 7, 11, 4, 2, 64, 64}, {}, {}, 3, 4};

TEST(BackwardInterpreterPlanted, AWrongSignInTheScoreHooksDerivativeFailsDqAndDk) {
  expectFails(runCase(kPlantCase,
                      [](ModuleOp module) {
                        tile::ScoreGradOp grad;
                        mainProgram(module).walk([&](tile::ScoreGradOp op) { grad = op; });
                        if (!grad)
                          return false;
                        auto yield = cast<tile::YieldOp>(grad.getBody().front().getTerminator());
                        OpBuilder b(yield);
                        Value negated = arith::NegFOp::create(b, yield.getLoc(), yield.getValues()[0]);
                        yield->setOperand(0, negated);
                        return true;
                      }),
              {"dq", "dk"}, "d softcap / d score negated");
}

TEST(BackwardInterpreterPlanted, AnUnscaledDsInTheDqAccumulationFailsDq) {
  expectFails(runCase(kPlantCase,
                      [](ModuleOp module) {
                        tile::ScaleOp scale = dsScale(module);
                        tile::AccumulateOp add;
                        mainProgram(module).walk([&](tile::AccumulateOp op) { add = op; });
                        if (!scale || !add || add.getA() != scale.getResult())
                          return false;
                        add.getAMutable().set(scale.getS());
                        return true;
                      }),
              {"dq"}, "dq_accum += dS'·K without softmax_scale");
}

TEST(BackwardInterpreterPlanted, AnUnscaledDsInTheDkGemmFailsDk) {
  expectFails(runCase(kPlantCase,
                      [](ModuleOp module) {
                        tile::ScaleOp scale = dsScale(module);
                        bool changed = false;
                        mainProgram(module).walk([&](tile::DotTnOp op) {
                          if (scale && op.getA() == scale.getResult()) {
                            op.getAMutable().set(scale.getS());
                            changed = true;
                          }
                        });
                        return changed;
                      }),
              {"dk"}, "dK += dS'ᵀ·Q without softmax_scale");
}

TEST(BackwardInterpreterPlanted, UnmaskedProbabilitiesInTheDvGemmFailDv) {
  Case causal = kPlantCase;
  causal.variant = "causal";
  expectFails(runCase(causal,
                      [](ModuleOp module) {
                        bool changed = false;
                        mainProgram(module).walk([&](tile::DotTnOp op) {
                          auto probs = op.getA().getDefiningOp<tile::ProbsOp>();
                          auto mask = probs ? probs.getS().getDefiningOp<tile::MaskOp>() : tile::MaskOp();
                          if (!mask)
                            return;
                          // P of the logits before the mask, for dV alone.
                          OpBuilder b(op);
                          Value unmasked =
                              tile::ProbsOp::create(b, op.getLoc(), probs.getType(), mask.getS(), probs.getLse());
                          op.getAMutable().set(unmasked);
                          changed = true;
                        });
                        return changed;
                      }),
              {"dv"}, "dV += Pᵀ·dO with P of the unmasked logits");
}

TEST(BackwardInterpreterPlanted, ADWithoutDoFailsDeltaDqAndDk) {
  expectFails(runCase(kPlantCase,
                      [](ModuleOp module) {
                        bool changed = false;
                        module.walk([&](tile::RowDotOp op) {
                          // rowsum(O∘O) for rowsum(dO∘O).
                          op->setOperand(1, op.getA());
                          changed = true;
                        });
                        return changed;
                      }),
              {"dq", "dk", "delta"}, "D = rowsum(O∘O)");
}

/// An input gradient with its partial negated: the sink's (preprocess) or ALiBi's (main program).
Plant negatedInputPartial() {
  return [](ModuleOp module) {
    bool changed = false;
    module.walk([&](Operation *op) {
      if (!isa<tile::InputGradOp, tile::SinkGradOp>(op))
        return;
      Block &body = op->getRegion(0).front();
      auto yield = cast<tile::YieldOp>(body.getTerminator());
      OpBuilder b(yield);
      const unsigned last = yield.getValues().size() - 1;
      yield->setOperand(last, arith::NegFOp::create(b, yield.getLoc(), yield.getValues()[last]));
      changed = true;
    });
    return changed;
  };
}

TEST(BackwardInterpreterPlanted, ANegatedSlopePartialFailsDslopes) {
  Case alibi = kPlantCase;
  alibi.variant = "alibi_causal";
  expectFails(runCase(alibi, negatedInputPartial()), {"dslopes"}, "d score / d slope negated");
}

TEST(BackwardInterpreterPlanted, ANegatedSinkPartialFailsDsinks) {
  Case sinks = kPlantCase;
  sinks.variant = "sinks_causal";
  expectFails(runCase(sinks, negatedInputPartial()), {"dsinks"}, "d sink / d sinks[h] negated");
}

/// A score hook that reads an f32 input at a key-dependent index: its gradient cannot be reduced per (batch, head),
/// so the backward names the input instead of building.
TEST(BackwardInterpreterErrors, AnInputReadAtAKeyDependentIndexIsNamed) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  Variant bias = Variant("key_bias")
                     .input("bias", dsl::ElementKind::F32)
                     .score([](dsl::Expr s, const dsl::Coords &c, const dsl::Params &p) {
                       return s + p.load("bias", c.kv);
                     });
  auto module = buildProgram(context, bias, ProgramOptions{ElementType::BF16, 32, 32}, tile::kBackwardModule);
  EXPECT_TRUE(failed(module));
  EXPECT_NE(diagnostics.text.find("cannot take the gradient of input 'bias' of variant 'key_bias'"),
            std::string::npos)
      << diagnostics.text;
}

const Case kBoundedPlantCase{"causal", {2, 16, 16, 4, 2, 32, 32}, {}, {}, 4, 4, ElementType::BF16, true};

TEST(BackwardInterpreterPlanted, ABoundThatDropsTheInteriorQTilesFailsDqDkDv) {
  expectFails(runCase(kBoundedPlantCase,
                      [](ModuleOp module) {
                        bool changed = false;
                        mainProgram(module).walk([&](tile::QLoopOp loop) {
                          if (loop.getSegment() == tile::Segment::Interior) {
                            loop.getUpperMutable().assign(loop.getLower());
                            changed = true;
                          }
                        });
                        return changed;
                      }),
              {"dq", "dk", "dv"}, "interior segment [lo, lo)");
}

TEST(BackwardInterpreterPlanted, AMasklessHeadBoundaryFailsDqDkDv) {
  expectFails(runCase(kBoundedPlantCase,
                      [](ModuleOp module) {
                        bool changed = false;
                        mainProgram(module).walk([&](tile::QLoopOp loop) {
                          if (loop.getSegment() != tile::Segment::HeadBoundary)
                            return;
                          loop.getBody().walk([&](tile::MaskOp mask) {
                            mask.getResult().replaceAllUsesWith(mask.getS());
                            mask.erase();
                            changed = true;
                          });
                        });
                        return changed;
                      }),
              {"dq", "dk", "dv"}, "head boundary without its mask");
}

//===----------------------------------------------------------------------===//
// The interpreter's errors on a backward module
//===----------------------------------------------------------------------===//

TEST(BackwardInterpreterErrors, AModuleWithoutAMainProgramIsAnError) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  auto module = buildProgram(context, *variants::byName("causal"), ProgramOptions{ElementType::BF16, 32, 32},
                             tile::kBackwardModule);
  ASSERT_TRUE(succeeded(module));
  mainProgram(**module).erase();
  interp::Problem p;
  p.seqlenQ = p.seqlenK = 4;
  p.headDim = p.headDimV = 32;
  interp::Gradients out;
  EXPECT_TRUE(failed(interp::runBackward(**module, p, interp::BackwardTensors{}, out)));
  EXPECT_NE(diagnostics.text.find("the backward module has no backward_main program"), std::string::npos)
      << diagnostics.text;
}

TEST(BackwardInterpreterErrors, TensorsOfTheWrongSizeAreNamed) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  auto module = buildProgram(context, *variants::byName("none"), ProgramOptions{ElementType::BF16, 32, 32},
                             tile::kBackwardModule);
  ASSERT_TRUE(succeeded(module));
  interp::Problem p;
  p.seqlenQ = p.seqlenK = 4;
  p.headDim = p.headDimV = 32;
  const size_t n = 4 * 32;
  interp::BackwardTensors t{std::vector<float>(n), std::vector<float>(n),     std::vector<float>(n),
                            std::vector<float>(n), std::vector<float>(n - 1), std::vector<float>(4)};
  interp::Gradients out;
  EXPECT_TRUE(failed(interp::runBackward(**module, p, t, out)));
  EXPECT_NE(diagnostics.text.find("dO holds 127 values"), std::string::npos) << diagnostics.text;
}

TEST(BackwardInterpreterErrors, RunRefusesABackwardProgram) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  auto module = buildProgram(context, *variants::byName("none"), ProgramOptions{ElementType::BF16, 32, 32},
                             tile::kBackwardModule);
  ASSERT_TRUE(succeeded(module));
  interp::Problem p;
  p.seqlenQ = p.seqlenK = 4;
  p.headDim = p.headDimV = 32;
  std::vector<float> q(4 * 32), o, lse;
  EXPECT_TRUE(failed(interp::run(mainProgram(**module), p, q, q, q, o, lse)));
  EXPECT_NE(diagnostics.text.find("interp::runBackward a backward module"), std::string::npos) << diagnostics.text;
}

} // namespace
