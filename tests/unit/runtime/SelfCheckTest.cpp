// SelfCheckTest.cpp — kernels marked "never run on this family" (KernelInfo::neverRunOnArch) run only after a
// first-use self-check against their proven schedule's kernel. The comparison and the seeded problem are tested
// directly; forward() against stand-ins of the driver's calls for an sm_100a device whose "kernels" compute attention
// on the host (the stand-in device memory is host memory), so that an agreeing, a slightly-off, a wrong and a silent
// kernel can be told apart as the runtime would tell them on a GPU. No GPU, no libcuda.
#include "runtime/lib/SelfCheck.h"
#include "StandInDriver.h"
#include "TestUtil.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <bit>
#include <cmath>
#include <limits>
#include <map>

using namespace flashtile;
using testing::HasSubstr;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint16_t bf16(float value) { // round to nearest even
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

TEST(SelfCheckCompare, AgreementWithinTheToleranceAndTheWorstElementOtherwise) {
  // 2 rows x 1 head x 2 dims, bf16: the tolerance is 8 x 2^-8 x max|V| = 0.03125 for max|V| <= 1.
  const std::vector<uint16_t> reference = {bf16(0.5f), bf16(-0.25f), bf16(0.125f), bf16(1.f)};
  const std::vector<float> lse = {1.5f, -kInf};
  EXPECT_TRUE(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, reference, reference, lse, lse).ok());
  std::vector<uint16_t> close = reference;
  close[2] = bf16(0.125f + 0.03f);
  EXPECT_TRUE(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, close, reference, lse, lse).ok());
  std::vector<uint16_t> off = reference;
  off[3] = bf16(1.0625f);
  Status status = detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, off, reference, lse, lse);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "O of row 1, head 0, dim 1 is 1.062, the proven kernel's 1 (max|O - O_proven| = 0.0625 "
                              "> 8 u max|V| = 0.03125, u = 2^-8)");
  // A larger V scales the tolerance: the same difference agrees when max|V| is 4.
  EXPECT_TRUE(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 4.f, off, reference, lse, lse).ok());
  // fp16's unit roundoff is 2^-11: 0.0625 is far outside 8 x 2^-11.
  EXPECT_THAT(detail::compareSelfCheck(DType::F16, 2, 1, 2, 1.f, std::vector<uint16_t>{0x3c00, 0, 0, 0},
                                       std::vector<uint16_t>{0x3c40, 0, 0, 0}, lse, lse)
                  .message(),
              HasSubstr("> 8 u max|V| = 0.003906, u = 2^-11"));

  // NaN never agrees, not even with NaN (a kernel that wrote nothing leaves the poison).
  std::vector<uint16_t> nan = reference;
  nan[0] = 0xffff;
  EXPECT_THAT(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, nan, nan, lse, lse).message(),
              HasSubstr("O of row 0, head 0, dim 0 is nan"));
  // LSE: within 1e-3; infinities must match exactly.
  EXPECT_TRUE(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, reference, reference, {1.5005f, -kInf}, lse).ok());
  EXPECT_EQ(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, reference, reference, {1.502f, -kInf}, lse).message(),
            "LSE of row 0, head 0 is 1.502, the proven kernel's 1.5 (tolerance 0.001)");
  EXPECT_THAT(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, reference, reference, {1.5f, 0.f}, lse).message(),
              HasSubstr("LSE of row 1, head 0 is 0, the proven kernel's -inf"));
  const float nanLse = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(detail::compareSelfCheck(DType::BF16, 2, 1, 2, 1.f, reference, reference, {nanLse, -kInf}, lse).ok());
}

TEST(SelfCheckProblem, IsTheCallCutToOneShortSequenceAndItsInputsAreSeededAndExact) {
  const float slopes = 0;
  AttentionArgs call =
      AttentionArgs::contiguous(DType::F16, &slopes, &slopes, &slopes, nullptr, nullptr, 4, 4096, 200, 16, 4, 192, 128);
  call.variant = "alibi";
  call.variantParams = {0.5f};
  call.inputs = {&slopes};
  call.softmaxScale = 0.1f;
  AttentionArgs problem = detail::selfCheckProblem(call);
  EXPECT_EQ(problem.batch, 1);
  EXPECT_EQ(problem.seqlenQ, detail::kSelfCheckSeqlen);
  EXPECT_EQ(problem.seqlenK, 200) << "no key position the call does not have";
  EXPECT_EQ(problem.headsQ, 16);
  EXPECT_EQ(problem.headsKv, 4);
  EXPECT_EQ(problem.headDim, 192);
  EXPECT_EQ(problem.headDimV, 128);
  EXPECT_EQ(problem.dtype, DType::F16);
  EXPECT_EQ(problem.variant, "alibi");
  EXPECT_EQ(problem.variantParams, call.variantParams);
  EXPECT_EQ(problem.inputs, call.inputs);
  EXPECT_EQ(problem.softmaxScale, 0.1f);
  EXPECT_FALSE(problem.isVarlen());
  // Varlen: the longest sequence bounds the cut.
  AttentionArgs varlen = call;
  varlen.cuSeqlensQ = varlen.cuSeqlensK = reinterpret_cast<const int *>(&slopes);
  varlen.maxSeqlenQ = 100;
  varlen.maxSeqlenK = 1000;
  problem = detail::selfCheckProblem(varlen);
  EXPECT_EQ(problem.seqlenQ, 100);
  EXPECT_EQ(problem.seqlenK, detail::kSelfCheckSeqlen);
  EXPECT_FALSE(problem.isVarlen());

  // The inputs: the same in every process, multiples of 1/128 in [-1, 1], exact in the element type.
  problem = detail::selfCheckProblem(call);
  detail::SelfCheckInputs a = detail::selfCheckInputs(problem), b = detail::selfCheckInputs(problem);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.v, b.v);
  EXPECT_EQ(a.q.size(), size_t(320) * 16 * 192);
  EXPECT_EQ(a.k.size(), size_t(200) * 4 * 192);
  EXPECT_EQ(a.v.size(), size_t(200) * 4 * 128);
  EXPECT_EQ(a.maxAbsV, 1.f);
  int distinct = 0;
  std::map<uint16_t, int> seen;
  for (uint16_t bits : a.k) {
    const float value = detail::elementValue(DType::F16, bits);
    ASSERT_LE(std::fabs(value), 1.f);
    ASSERT_EQ(value * 128, std::round(value * 128)) << value;
    distinct += seen[bits]++ == 0;
  }
  EXPECT_EQ(distinct, 257) << "every k / 128 in [-1, 1] appears";
  // fp16 patterns of known values, and bf16's.
  problem.dtype = DType::BF16;
  detail::SelfCheckInputs asBf16 = detail::selfCheckInputs(problem);
  for (size_t i = 0; i < a.q.size(); ++i)
    ASSERT_EQ(detail::elementValue(DType::F16, a.q[i]), detail::elementValue(DType::BF16, asBf16.q[i]));
  EXPECT_EQ(detail::elementValue(DType::F16, 0x3c00), 1.f);
  EXPECT_EQ(detail::elementValue(DType::F16, 0xb800), -0.5f);
  EXPECT_EQ(detail::elementValue(DType::F16, 0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(detail::elementValue(DType::F16, 0x7c00), kInf);
  EXPECT_EQ(detail::elementValue(DType::BF16, 0x3f80), 1.f);
}

// ---------------------------------------------------------------------------------------------------------------
// forward() on a stand-in sm_100a device (StandInDriver.h: device memory held in host buffers); a launch whose O lies
// in that memory computes plain attention there (variant "none"), with the fault its entry was given.

enum class Fault { None, WithinTolerance, WrongO, WrongLse, Silent };

std::map<std::string, Fault> faults; // by entry

using stand_in::device;

float bf16Value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

/// O and LSE of dense bf16 attention without a mask, as a kernel writes them, then the entry's fault.
void attend(const std::string &entry, const FlashtileFwdParams &p, int headDim, int headDimV) {
  const Fault fault = faults.count(entry) ? faults.at(entry) : Fault::None;
  if (fault == Fault::Silent)
    return;
  const auto *q = reinterpret_cast<const uint16_t *>(stand_in::hostOf(p.q)),
             *k = reinterpret_cast<const uint16_t *>(stand_in::hostOf(p.k)),
             *v = reinterpret_cast<const uint16_t *>(stand_in::hostOf(p.v));
  auto *o = reinterpret_cast<uint16_t *>(stand_in::hostOf(p.o));
  auto *lse = reinterpret_cast<float *>(stand_in::hostOf(p.lse));
  const int group = p.headsQ / p.headsKv;
  for (int h = 0; h < p.headsQ; ++h)
    for (int i = 0; i < p.seqlenQ; ++i) {
      std::vector<double> scores(p.seqlenK);
      double max = -INFINITY;
      for (int j = 0; j < p.seqlenK; ++j) {
        double dot = 0;
        for (int d = 0; d < headDim; ++d)
          dot += bf16Value(q[i * p.qRowStride + h * p.qHeadStride + d]) *
                 bf16Value(k[j * p.kRowStride + h / group * p.kHeadStride + d]);
        scores[j] = dot * p.softmaxScale;
        max = std::max(max, scores[j]);
      }
      double sum = 0;
      for (double &s : scores)
        sum += (s = std::exp(s - max));
      for (int d = 0; d < headDimV; ++d) {
        double acc = 0;
        for (int j = 0; j < p.seqlenK; ++j)
          acc += scores[j] * bf16Value(v[j * p.vRowStride + h / group * p.vHeadStride + d]);
        float out = p.seqlenK ? static_cast<float>(acc / sum) : 0.f;
        if (i == 0 && h == 0 && d == 0)
          out += fault == Fault::WrongO ? 0.25f : fault == Fault::WithinTolerance ? 0.0117f : 0.f;
        o[i * p.oRowStride + h * p.oHeadStride + d] = bf16(out);
      }
      float rowLse = p.seqlenK ? static_cast<float>(max + std::log(sum)) : -kInf;
      lse[h * p.lseHeadStride + i] = rowLse + (fault == Fault::WrongLse && i == 3 ? 0.01f : 0.f);
    }
}

/// The head dims of the kernels the tests compile (the launch sees only the parameter block).
int testHeadDim = 64;

/// An sm_100 device (148 SMs, one block an SM); a launch whose O lies in its memory runs attend().
CudaDriver sm100Device() {
  device = stand_in::Device();
  device.major = 10, device.multiprocessors = 148, device.blocksPerMultiprocessor = 1;
  device.kernel = [](const stand_in::Launch &launch) {
    if (stand_in::hostOf(launch.params.o))
      attend(launch.entry, launch.params, testHeadDim, testHeadDim);
  };
  return stand_in::standInDriver();
}

/// A stand-in JIT: a kernel for every spec, fa2's proven and fa4's marked as the compiler marks them on sm_100a;
/// `refuse` names a schedule it has no kernel for.
struct FakeCompiler {
  std::string refuse;
  /// fa4's kernels are cluster pairs (fa4 two-cta = 1: clusters of two CTAs over an even grid).
  bool ctaPair = false;
  CompileFn fn() {
    return [this](const KernelSpec &spec) -> StatusOr<CachedKernel> {
      if (spec.schedule == refuse)
        return Status::error("schedule " + spec.schedule + " has no kernel here");
      CachedKernel kernel = test::fakeKernel(spec.schedule);
      KernelInfo &info = kernel.info = stand_in::forSpec(kernel.info, spec);
      info.entry = "flashtile_" + spec.schedule + "_" + spec.variant + "_d" + std::to_string(spec.headDim);
      codegen::ModuleFacts facts = test::mainFacts(info, 128, 65536);
      facts.ctaPair = ctaPair && spec.schedule == "fa4";
      info.plan = codegen::planLaunches(facts);
      info.neverRunOnArch = spec.schedule == "fa4";
      info.checkAgainst = info.neverRunOnArch ? "fa2" : "";
      kernel.cubin = test::fakeCubin(100, {info.entry});
      return kernel;
    };
  }
};

/// A bf16 call of 8 query heads over 2 K/V heads, head dim 64, naming fa4; its own pointers are not device memory.
AttentionArgs fa4Call(int seqlenQ = 1024, int seqlenK = 1024) {
  const auto *base = reinterpret_cast<const char *>(0x10000000);
  AttentionArgs args = AttentionArgs::contiguous(DType::BF16, base, base + 0x1000000, base + 0x2000000,
                                                 const_cast<char *>(base) + 0x3000000,
                                                 reinterpret_cast<float *>(0x14000000), 2, seqlenQ, seqlenK, 8, 2, 64);
  args.schedule = "fa4";
  return args;
}

class FirstUseSelfCheck : public testing::Test {
protected:
  void SetUp() override {
    faults.clear();
    driver = sm100Device();
    CudaDriver::useInsteadForTesting(&driver);
    runtime = std::make_unique<Runtime>(test::cacheOptions("", false));
    runtime->setCompiler(compiler.fn());
    runtime->setDispatchRules(test::dispatchRules());
  }
  void TearDown() override {
    runtime.reset();
    CudaDriver::useInsteadForTesting(nullptr);
    EXPECT_TRUE(device.memory.empty()) << "the check frees its buffers";
  }
  /// The entries one forward() launched.
  std::vector<std::string> forward(const AttentionArgs &args) {
    const size_t before = device.launches.size();
    Status s = runtime->forward(args);
    EXPECT_TRUE(s.ok()) << s.message();
    std::vector<std::string> entries;
    for (size_t i = before; i < device.launches.size(); ++i)
      entries.push_back(device.launches[i].entry);
    return entries;
  }
  CudaDriver driver = sm100Device();
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime;
};

using Entries = std::vector<std::string>;

TEST_F(FirstUseSelfCheck, AnAgreeingKernelRunsAfterOneCheckBesideTheProvenOne) {
  test::CapturedWarnings log;
  // The first call: the proven kernel and the candidate on the seeded problem, then the call on the candidate.
  EXPECT_EQ(forward(fa4Call()),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa4_none_d64"}));
  // Later calls of the kernel, warm or cold (other heads): the candidate alone, no check again.
  EXPECT_EQ(forward(fa4Call()), (Entries{"flashtile_fa4_none_d64"}));
  AttentionArgs otherHeads = fa4Call();
  otherHeads.headsKv = 8;
  EXPECT_EQ(forward(otherHeads), (Entries{"flashtile_fa4_none_d64"}));
  // Another kernel (the default shape class's, for long sequences) is checked at its own first use.
  EXPECT_EQ(forward(fa4Call(4096, 4096)),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa4_none_d64"}));
  EXPECT_TRUE(log.all().empty());
  StatusOr<ScheduleChoice> choice = runtime->explain(fa4Call());
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa4");
  EXPECT_FALSE(choice->fellBack);
  EXPECT_EQ(choice->reason, "named by the call; its schedule never ran on sm_100a: the kernel runs only after agreeing "
                            "with schedule 'fa2' in a first-use self-check");
}

TEST_F(FirstUseSelfCheck, ADifferenceWithinTheToleranceAgrees) {
  faults["flashtile_fa4_none_d64"] = Fault::WithinTolerance; // 0.0117 < 8 x 2^-8 = 0.03125, at one element
  EXPECT_EQ(forward(fa4Call()).back(), "flashtile_fa4_none_d64");
}

TEST_F(FirstUseSelfCheck, ADisagreeingKernelFallsBackForTheProcessWithOneLogLineNamingIt) {
  faults["flashtile_fa4_none_d64"] = Fault::WrongO;
  test::CapturedWarnings log;
  EXPECT_EQ(forward(fa4Call()),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa2_none_d64"}));
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("schedule 'fa4' (named by the call) has no kernel for arch=sm_100a;"));
  EXPECT_THAT(log.all()[0], HasSubstr("kernel flashtile_fa4_none_d64 (schedule fa4, never run on sm_100a) disagrees "
                                      "with flashtile_fa2_none_d64 (schedule fa2) in its first-use self-check on a "
                                      "seeded 320 x 320 problem: O of row 0, head 0, dim 0 is "));
  EXPECT_THAT(log.all()[0], HasSubstr("> 8 u max|V| = 0.03125, u = 2^-8)"));
  EXPECT_THAT(log.all()[0], HasSubstr("running 'fa2' instead"));
  EXPECT_EQ(log.all()[0].find('\n'), std::string::npos);
  // The verdict holds for the process: later calls run fa2, nothing is checked again, nothing more is logged.
  for (int call = 0; call < 2; ++call)
    EXPECT_EQ(forward(fa4Call()), (Entries{"flashtile_fa2_none_d64"}));
  StatusOr<ScheduleChoice> choice = runtime->explain(fa4Call());
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa2");
  EXPECT_TRUE(choice->fellBack);
  EXPECT_THAT(choice->reason, HasSubstr("disagrees with flashtile_fa2_none_d64"));
  EXPECT_EQ(log.all().size(), 1u);

  // Strict mode does not fall back: the call fails, naming the kernel and the disagreement.
  AttentionArgs strictCall = fa4Call();
  strictCall.strictSchedule = true;
  Status refused = runtime->forward(strictCall);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("kernel flashtile_fa4_none_d64 (schedule fa4, never run on sm_100a) "
                                           "disagrees"));
  EXPECT_THAT(refused.message(), HasSubstr("does not fall back to 'fa2'"));
}

TEST_F(FirstUseSelfCheck, AWrongLseOrAKernelThatWritesNothingDisagrees) {
  faults["flashtile_fa4_none_d64"] = Fault::WrongLse;
  test::CapturedWarnings log;
  EXPECT_EQ(forward(fa4Call()).back(), "flashtile_fa2_none_d64");
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("LSE of row 3, head 0 is "));
  EXPECT_THAT(log.all()[0], HasSubstr("(tolerance 0.001)"));

  AttentionArgs hd128 = fa4Call();
  hd128.headDim = hd128.headDimV = testHeadDim = 128;
  faults["flashtile_fa4_none_d128"] = Fault::Silent;
  EXPECT_EQ(forward(hd128).back(), "flashtile_fa2_none_d128");
  testHeadDim = 64;
  ASSERT_EQ(log.all().size(), 2u);
  EXPECT_THAT(log.all()[1], HasSubstr("kernel flashtile_fa4_none_d128 (schedule fa4, never run on sm_100a) disagrees"));
  EXPECT_THAT(log.all()[1], HasSubstr("is nan"));
}

TEST_F(FirstUseSelfCheck, TheCheckRunsOnTheCallsShapeCutShortAndOnlyAtFirstUse) {
  // A call of 100 rows over 40 keys is checked on 100 x 40: no position the caller's inputs may lack.
  faults["flashtile_fa4_none_d64"] = Fault::WrongO;
  test::CapturedWarnings log;
  forward(fa4Call(100, 40));
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("on a seeded 100 x 40 problem"));
}

TEST_F(FirstUseSelfCheck, AKernelThatCannotBeCheckedDoesNotRun) {
  // Under CUDA graph capture the check cannot run (it synchronizes): the call falls back, saying why.
  device.capturing = true;
  test::CapturedWarnings log;
  EXPECT_EQ(forward(fa4Call()), (Entries{"flashtile_fa2_none_d64"}));
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("kernel flashtile_fa4_none_d64 (schedule fa4, never run on sm_100a) cannot be "
                                      "used before its first-use self-check against schedule 'fa2', which did not "
                                      "run: the check cannot run under CUDA graph capture"));
  // Not a verdict, and the fallback is not kept: outside capture the next call checks the kernel, which agrees.
  device.capturing = false;
  EXPECT_EQ(forward(fa4Call()),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa4_none_d64"}));
}

TEST_F(FirstUseSelfCheck, WithoutAProvenKernelTheUnprovenOneDoesNotRun) {
  compiler.refuse = "fa2";
  Status status = runtime->forward(fa4Call());
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("fa4: kernel flashtile_fa4_none_d64 (schedule fa4, never run on sm_100a) "
                                          "cannot be used before its first-use self-check against schedule 'fa2', "
                                          "which did not run: schedule fa2 has no kernel here"));
  EXPECT_TRUE(device.launches.empty());
}

} // namespace

namespace {

// A kernel whose plan launches clusters (fa4 two-cta = 1: CTA pairs) goes through the same first-use check: the
// candidate's launches, the check's and the call's, are clusters of two over an even grid, fa2's are plain; a
// disagreeing pair kernel falls back with its log line.
TEST_F(FirstUseSelfCheck, AClusterPairKernelIsCheckedAndLaunchedAsClusters) {
  compiler.ctaPair = true;
  test::CapturedWarnings log;
  EXPECT_EQ(forward(fa4Call()),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa4_none_d64"}));
  ASSERT_EQ(device.launches.size(), 3u);
  EXPECT_EQ(device.launches[0].cluster[0], 1u) << "fa2's kernel launches no cluster";
  for (size_t i : {size_t{1}, size_t{2}}) {
    EXPECT_EQ(device.launches[i].cluster[0], 2u) << "launch " << i;
    EXPECT_EQ(device.launches[i].cluster[1], 1u);
    EXPECT_EQ(device.launches[i].cluster[2], 1u);
    EXPECT_EQ(device.launches[i].grid[0] % 2, 0u) << "grid.x of launch " << i << " is a whole number of pairs";
  }
  EXPECT_TRUE(log.all().empty());

  // The long-sequence shape class's kernel, checked at its own first use, disagrees: fa2 runs the call.
  faults["flashtile_fa4_none_d64"] = Fault::WrongO;
  EXPECT_EQ(forward(fa4Call(4096, 4096)),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa2_none_d64"}));
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("flashtile_fa4_none_d64"));
  ASSERT_EQ(device.launches.size(), 6u);
  EXPECT_EQ(device.launches[4].cluster[0], 2u) << "the checked candidate launched as a cluster pair";
  EXPECT_EQ(device.launches[5].cluster[0], 1u) << "the fallback is fa2's plain launch";
}

TEST_F(FirstUseSelfCheck, AnExplainBeforeTheFirstCallDoesNotSkipTheCheck) {
  // explain() needs no GPU and checks nothing: it names the unproven kernel, and the call that follows checks it.
  faults["flashtile_fa4_none_d64"] = Fault::WrongO;
  test::CapturedWarnings log;
  StatusOr<ScheduleChoice> before = runtime->explain(fa4Call(), "sm_100a");
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_EQ(before->spec.schedule, "fa4");
  EXPECT_TRUE(device.launches.empty());
  EXPECT_EQ(forward(fa4Call()),
            (Entries{"flashtile_fa2_none_d64", "flashtile_fa4_none_d64", "flashtile_fa2_none_d64"}));
  EXPECT_EQ(log.all().size(), 1u);
  StatusOr<ScheduleChoice> after = runtime->explain(fa4Call(), "sm_100a");
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(after->spec.schedule, "fa2");
}

} // namespace
