// ScheduleChoiceTest.cpp — which schedule a call runs when it names none, and what happens when a schedule has no
// kernel for it: the dispatch rules' order, the fallback and its one log line, strict mode, forced schedules
// (setSchedule, FLASHTILE_SCHEDULE, the call's own), explain(), and forward() through stand-ins of the driver's calls,
// with a stand-in JIT that has no fa3 kernel at one head dim (no GPU, no compiler).
#include "StandInDriver.h"
#include "TestUtil.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <functional>

using namespace flashtile;
using testing::ElementsAre;
using testing::HasSubstr;

namespace {

TEST(DefaultSchedules, RulesForDecodeSizedCallsComeFirstThenPreferencesThenNames) {
  const std::vector<DispatchRule> rules = test::dispatchRules();
  EXPECT_THAT(defaultSchedules(rules, "sm_90a", false), ElementsAre("fa3", "fa2"));
  EXPECT_THAT(defaultSchedules(rules, "sm_90a", true), ElementsAre("decode", "fa3", "fa2"));
  EXPECT_THAT(defaultSchedules(rules, "sm_80", false), ElementsAre("fa2"));
  EXPECT_THAT(defaultSchedules(rules, "sm_80", true), ElementsAre("decode", "fa2"));
  EXPECT_TRUE(defaultSchedules(rules, "sm_75", false).empty());

  // Preferences are transitive; without one, names decide; a schedule named only when asked for is no candidate;
  // the first rule of a (schedule, arch) counts.
  std::vector<DispatchRule> chain = {
      {"c", "sm_80", DefaultCalls::All, {"b"}}, {"a", "sm_80", DefaultCalls::All, {}},
      {"b", "sm_80", DefaultCalls::All, {"a"}}, {"x", "sm_80", DefaultCalls::None, {"c"}},
      {"z", "sm_80", DefaultCalls::All, {}},    {"z", "sm_80", DefaultCalls::All, {"c"}}};
  EXPECT_THAT(defaultSchedules(chain, "sm_80", false), ElementsAre("c", "b", "a", "z"));
  // A cycle of preferences: by name.
  std::vector<DispatchRule> cycle = {{"p", "sm_80", DefaultCalls::All, {"q"}},
                                     {"q", "sm_80", DefaultCalls::All, {"p"}}};
  EXPECT_THAT(defaultSchedules(cycle, "sm_80", false), ElementsAre("p", "q"));
}

/// A stand-in JIT: a kernel for every spec but fa3's off sm_90a (no lowering there, as the real compiler says) and
/// fa3's at head dim 96 — a planted gap, since the sm90 family prints every head dim the runtime serves
/// (DispatchRuleTest checks that with the real compiler): what these tests check is the fallback itself — and a record
/// of what it was asked for.
struct FakeCompiler {
  static constexpr int kGapHeadDim = 96;
  std::vector<std::string> asked; // "schedule:headDim" per call

  CompileFn fn() {
    return [this](const KernelSpec &spec) -> StatusOr<CachedKernel> {
      asked.push_back(spec.schedule + ":" + std::to_string(spec.headDim));
      if (spec.schedule == "fa3" && spec.arch != "sm_90a")
        return Status::error("schedule fa3 has no lowering for " + spec.arch);
      if (spec.schedule == "fa3" && spec.headDim == kGapHeadDim)
        return Status::error("the fa3 schedule failed on variant '" + spec.variant +
                             "':\nloc(\"program\"): 'tile.func' op stand-in: no fa3 kernel at head_dim " +
                             std::to_string(spec.headDim) + "\n");
      const bool backward = spec.kind == kBackwardKind;
      if (backward && spec.schedule != "fa2")
        return Status::error("schedule " + spec.schedule + " has no backward program");
      // A backward's plan: preprocess, main, postprocess (stand_in::moduleFor).
      return stand_in::moduleFor(spec, "flashtile_" + spec.schedule + "_" + spec.variant + "_d" +
                                           std::to_string(spec.headDim) + (backward ? "_bwd" : ""));
    };
  }
  int askedFor(const std::string &what) const { return static_cast<int>(std::count(asked.begin(), asked.end(), what)); }
};

AttentionArgs callWith(int headDim, int seqlenQ = 4096, int seqlenK = 4096) {
  const auto *base = reinterpret_cast<const char *>(0x100000);
  return AttentionArgs::contiguous(DType::BF16, base, base + 0x100000, base + 0x200000,
                                   const_cast<char *>(base) + 0x300000, reinterpret_cast<float *>(0x500000), 2, seqlenQ,
                                   seqlenK, 8, 8, headDim);
}

/// A runtime with the fake JIT and the built-in schedules' rules, as jit::Jit::install leaves one.
std::unique_ptr<Runtime> jitRuntime(FakeCompiler &compiler) {
  auto runtime = std::make_unique<Runtime>(test::cacheOptions("", false));
  runtime->setCompiler(compiler.fn());
  runtime->setDispatchRules(test::dispatchRules());
  return runtime;
}

TEST(ScheduleChoice, Fa3OnSm90aFa2ElsewhereDecodeForDecodeSizedCalls) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  StatusOr<ScheduleChoice> choice = runtime->explain(callWith(128), "sm_90a");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa3");
  EXPECT_EQ(choice->entry, "flashtile_fa3_none_d128");
  EXPECT_FALSE(choice->aheadOfTime);
  EXPECT_FALSE(choice->fellBack);
  EXPECT_TRUE(choice->forcedBy.empty());
  EXPECT_THAT(choice->order, ElementsAre("fa3", "fa2"));
  EXPECT_EQ(choice->reason, "preferred on sm_90a (order: fa3, fa2)");
  EXPECT_EQ(choice->text(), "schedule=fa3\nentry=flashtile_fa3_none_d128\nsource=jit\norder=fa3,fa2\nforced_by=\n"
                            "fell_back=0\nreason=preferred on sm_90a (order: fa3, fa2)\n");

  choice = runtime->explain(callWith(128), "sm_80");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa2");
  EXPECT_THAT(choice->order, ElementsAre("fa2"));

  for (int seqlenQ : {1, kDecodeMaxSeqlenQ}) {
    choice = runtime->explain(callWith(128, seqlenQ), "sm_90a");
    ASSERT_TRUE(choice.ok()) << choice.status().message();
    EXPECT_EQ(choice->spec.schedule, "decode");
    EXPECT_EQ(choice->reason, "preferred on sm_90a for decode-sized calls (order: decode, fa3, fa2)");
  }
}

TEST(ScheduleChoice, APreferredScheduleWithoutAKernelFallsBackWithOneLogLine) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  test::CapturedWarnings log;
  for (int call = 0; call < 3; ++call) {
    StatusOr<ScheduleChoice> choice = runtime->explain(callWith(96), "sm_90a");
    ASSERT_TRUE(choice.ok()) << choice.status().message();
    EXPECT_EQ(choice->spec.schedule, "fa2");
    EXPECT_EQ(choice->entry, "flashtile_fa2_none_d96");
    EXPECT_TRUE(choice->fellBack);
    EXPECT_THAT(choice->reason, HasSubstr("fell back: schedule 'fa3' (preferred on sm_90a) has no kernel for this "
                                          "call (fa3: the fa3 schedule failed on variant 'none': loc(\"program\"): "
                                          "'tile.func' op stand-in: no fa3 kernel at head_dim 96)"));
  }
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("schedule 'fa3' (preferred on sm_90a) has no kernel for arch=sm_90a;dtype=bf16;"
                                      "headDim=96;headDimV=96;variant=none;schedule=fa3;shapeClass=default ("));
  EXPECT_THAT(log.all()[0], HasSubstr("no fa3 kernel at head_dim 96"));
  EXPECT_THAT(log.all()[0], HasSubstr("running 'fa2' instead (strict schedule mode"));
  EXPECT_EQ(log.all()[0].find('\n'), std::string::npos);
  // The resolution is kept: fa3 is not asked for again.
  EXPECT_EQ(compiler.askedFor("fa3:96"), 1);

  // Head dim 128 is fa3's.
  StatusOr<ScheduleChoice> fa3 = runtime->explain(callWith(128), "sm_90a");
  ASSERT_TRUE(fa3.ok()) << fa3.status().message();
  EXPECT_EQ(fa3->spec.schedule, "fa3");
  EXPECT_EQ(log.all().size(), 1u);
}

TEST(ScheduleChoice, StrictModeMakesTheFallbackAnErrorNamingTheScheduleAndTheReason) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  test::CapturedWarnings log;
  // A fallback taken before: a strict call still fails (the call's own strictness).
  ASSERT_TRUE(runtime->explain(callWith(96), "sm_90a").ok());
  AttentionArgs strictCall = callWith(96);
  strictCall.strictSchedule = true;
  for (int call = 0; call < 2; ++call) {
    StatusOr<ScheduleChoice> refused = runtime->explain(strictCall, "sm_90a");
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(refused.status().message(),
                HasSubstr("schedule 'fa3' (preferred on sm_90a) has no kernel for arch=sm_90a;dtype=bf16;headDim=96;"));
    EXPECT_THAT(refused.status().message(), HasSubstr("no fa3 kernel at head_dim 96"));
    EXPECT_THAT(refused.status().message(), HasSubstr("strict schedule mode (setStrictSchedule, "
                                                      "FLASHTILE_STRICT_SCHEDULE=1) does not fall back to 'fa2'"));
  }

  // The runtime's strictness; a call fa3 serves is fine.
  runtime->setStrictSchedule(true);
  EXPECT_FALSE(runtime->explain(callWith(96), "sm_90a").ok());
  EXPECT_TRUE(runtime->explain(callWith(128), "sm_90a").ok());
  runtime->setStrictSchedule(false);
  EXPECT_TRUE(runtime->explain(callWith(96), "sm_90a").ok());

  // FLASHTILE_STRICT_SCHEDULE=1 at construction.
  test::ScopedEnv strictEnv("FLASHTILE_STRICT_SCHEDULE", "1");
  FakeCompiler other;
  StatusOr<ScheduleChoice> fromEnv = jitRuntime(other)->explain(callWith(96), "sm_90a");
  ASSERT_FALSE(fromEnv.ok());
  EXPECT_THAT(fromEnv.status().message(), HasSubstr("strict schedule mode"));
  EXPECT_EQ(log.all().size(), 1u); // only the first, non-strict call fell back
}

TEST(ScheduleChoice, AForcedScheduleWithoutAKernelFallsBackTheSameWay) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  test::CapturedWarnings log;
  runtime->setSchedule("fa3");
  StatusOr<ScheduleChoice> choice = runtime->explain(callWith(128), "sm_80");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa2");
  EXPECT_EQ(choice->forcedBy, "setSchedule");
  EXPECT_TRUE(choice->fellBack);
  EXPECT_THAT(choice->order, ElementsAre("fa3", "fa2"));
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("schedule 'fa3' (named by setSchedule) has no kernel for arch=sm_80;"));
  EXPECT_THAT(log.all()[0], HasSubstr("no lowering for sm_80"));

  // On sm_90a it runs where it can; strict: an error naming what forced it.
  choice = runtime->explain(callWith(128), "sm_90a");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa3");
  EXPECT_EQ(choice->reason, "named by setSchedule");
  runtime->setStrictSchedule(true);
  StatusOr<ScheduleChoice> refused = runtime->explain(callWith(64), "sm_80");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("schedule 'fa3' (named by setSchedule) has no kernel"));
  runtime->setStrictSchedule(false);

  // A call naming the schedule the rules prefer resolves apart from one naming none: its reason and its log line.
  runtime->setSchedule("");
  ASSERT_TRUE(runtime->explain(callWith(96), "sm_90a").ok());
  AttentionArgs namedFa3 = callWith(96);
  namedFa3.schedule = "fa3";
  choice = runtime->explain(namedFa3, "sm_90a");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->forcedBy, "the call");
  EXPECT_THAT(choice->reason, HasSubstr("fell back: schedule 'fa3' (named by the call) has no kernel"));
  ASSERT_EQ(log.all().size(), 3u);
  EXPECT_THAT(log.all()[2], HasSubstr("schedule 'fa3' (named by the call) has no kernel for arch=sm_90a;"));
  runtime->setSchedule("fa3");

  // The call's own schedule comes before the runtime's; a schedule the rules do not know is tried all the same.
  AttentionArgs named = callWith(128);
  named.schedule = "fa1";
  choice = runtime->explain(named, "sm_90a");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa1");
  EXPECT_EQ(choice->forcedBy, "the call");
  EXPECT_THAT(choice->order, ElementsAre("fa1", "fa3", "fa2"));

  // FLASHTILE_SCHEDULE at construction names the schedule as setSchedule does.
  test::ScopedEnv forcedEnv("FLASHTILE_SCHEDULE", "fa1");
  FakeCompiler other;
  choice = jitRuntime(other)->explain(callWith(128), "sm_90a");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, "fa1");
  EXPECT_EQ(choice->forcedBy, "FLASHTILE_SCHEDULE");
}

TEST(ScheduleChoice, WhenNoScheduleHasAKernelEachOneSaysWhy) {
  FakeCompiler compiler;
  auto runtime = std::make_unique<Runtime>(test::cacheOptions("", false));
  runtime->setCompiler(
      [](const KernelSpec &spec) -> StatusOr<CachedKernel> { return Status::error(spec.schedule + " cannot"); });
  runtime->setDispatchRules(test::dispatchRules());
  StatusOr<ScheduleChoice> none = runtime->explain(callWith(128), "sm_90a");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "no schedule has a kernel for this call (tried fa3, fa2): fa3: fa3 cannot; "
                                     "fa2: fa2 cannot");
  // One reason shared by every schedule (a variant the compiler does not know) is said once.
  runtime->setCompiler([](const KernelSpec &) -> StatusOr<CachedKernel> { return Status::error("not registered"); });
  EXPECT_EQ(runtime->explain(callWith(128), "sm_90a").status().message(), "not registered");
}

using stand_in::device;

/// forward() against the stand-in driver, for one test.
class ForwardWithStandInDriver : public testing::Test {
protected:
  void SetUp() override {
    device = stand_in::Device(); // an sm_90a device and context; launches recorded, nothing run
    device.blocksPerMultiprocessor = 1;
    CudaDriver::useInsteadForTesting(&driver);
  }
  void TearDown() override { CudaDriver::useInsteadForTesting(nullptr); }
  /// The entry of the last launch, after forward(args) succeeded.
  std::string launched(Runtime &runtime, const AttentionArgs &args) {
    size_t before = device.launches.size();
    Status s = runtime.forward(args);
    EXPECT_TRUE(s.ok()) << s.message();
    return device.launches.size() > before ? device.launches.back().entry : "(nothing launched)";
  }
  CudaDriver driver = stand_in::standInDriver();
};

TEST_F(ForwardWithStandInDriver, ForwardRunsTheChosenKernelColdAndWarm) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  test::CapturedWarnings log;
  for (int call = 0; call < 2; ++call) { // the second takes the warm path
    EXPECT_EQ(launched(*runtime, callWith(128)), "flashtile_fa3_none_d128");
    EXPECT_EQ(launched(*runtime, callWith(96)), "flashtile_fa2_none_d96");
    EXPECT_EQ(launched(*runtime, callWith(128, 1)), "flashtile_decode_none_d128");
  }
  EXPECT_EQ(log.all().size(), 1u);
  EXPECT_EQ(compiler.askedFor("fa3:96"), 1);

  // A call naming its schedule is not served by the dispatch of one that named none, and the other way round.
  AttentionArgs named = callWith(128);
  named.schedule = "fa2";
  EXPECT_EQ(launched(*runtime, named), "flashtile_fa2_none_d128");
  EXPECT_EQ(launched(*runtime, callWith(128)), "flashtile_fa3_none_d128");
  // A strict call is not served by a fallback's dispatch: it fails, naming fa3.
  AttentionArgs strictCall = callWith(96);
  strictCall.strictSchedule = true;
  Status refused = runtime->forward(strictCall);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("schedule 'fa3' (preferred on sm_90a) has no kernel"));
  EXPECT_EQ(launched(*runtime, callWith(96)), "flashtile_fa2_none_d96");

  // explain() on this thread's GPU says the same as forward() does.
  StatusOr<ScheduleChoice> choice = runtime->explain(callWith(96));
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->entry, "flashtile_fa2_none_d96");
  EXPECT_TRUE(choice->fellBack);
}

// flash-attn's varlen call with every key sequence empty: total_k = 0 and null K and V (what PyTorch passes for
// empty tensors). The kernel runs (it writes O = 0 and LSE = -inf, as for dense seqlen_k = 0) and reads no key.
TEST_F(ForwardWithStandInDriver, VarlenWithoutKeysRunsWithNullKAndV) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  AttentionArgs dense = callWith(128, 64, 0);
  AttentionArgs args = AttentionArgs::varlen(dense.dtype, dense.q, nullptr, nullptr, dense.o, dense.lse,
                                             reinterpret_cast<const int *>(0x600000),
                                             reinterpret_cast<const int *>(0x700000), /*batch=*/2, /*totalQ=*/64,
                                             /*totalK=*/0, /*maxSeqlenQ=*/32, /*maxSeqlenK=*/0, 8, 8, 128);
  const int offsetsQ[3] = {0, 32, 64}, offsetsK[3] = {0, 0, 0};
  args.cuSeqlensQHost = offsetsQ;
  args.cuSeqlensKHost = offsetsK;
  ASSERT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
  EXPECT_EQ(launched(*runtime, args), "flashtile_fa3_none_d128");
  ASSERT_FALSE(device.launches.empty());
  EXPECT_EQ(device.launches.back().params.k, nullptr);
  EXPECT_EQ(device.launches.back().params.v, nullptr);
  EXPECT_EQ(device.launches.back().params.seqlenK, 0);
  EXPECT_EQ(device.launches.back().params.cuSeqlensK, args.cuSeqlensK);

  // Dense seqlen_k = 0 takes null K and V too; with keys, a null K is still an error naming it.
  dense.k = dense.v = nullptr;
  EXPECT_EQ(launched(*runtime, dense), "flashtile_fa3_none_d128");
  args.seqlenK = 16;
  Status missing = Runtime::validate(args);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("k is null"));
}

// The backward runs the first schedule of the forward's order that has a backward program: a schedule without one
// (here the fake compiler's fa3, which builds forwards only; the real fa3 has a backward at head dims 64 and 128)
// is no fallback worth a log line or a strict-mode error, unless the call named it.
TEST_F(ForwardWithStandInDriver, BackwardRunsTheFirstScheduleWithABackwardProgram) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  runtime->setStrictSchedule(true);
  test::CapturedWarnings log;
  BackwardArgs args = stand_in::backwardOf(callWith(128));
  args.deterministic = true;
  Status s = runtime->backward(args);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(device.launches.size(), 3u);
  EXPECT_EQ(device.launches[0].entry, "flashtile_fa2_none_d128_bwd_pre");
  EXPECT_EQ(device.launches[1].entry, "flashtile_fa2_none_d128_bwd");
  EXPECT_EQ(device.launches[2].entry, "flashtile_fa2_none_d128_bwd_post");
  EXPECT_EQ(device.launches[1].params.dK, args.dK);
  EXPECT_EQ(device.launches[1].params.dKRowStride, 8 * 128);
  EXPECT_EQ(device.launches[1].params.deterministic, 1);
  EXPECT_TRUE(log.all().empty());
  // The forward of the same call still runs fa3.
  EXPECT_EQ(launched(*runtime, args.forward), "flashtile_fa3_none_d128");

  // Named, fa3 is held to the rules: an error in strict mode, else a fallback with its log line.
  args.forward.schedule = "fa3";
  Status refused = runtime->backward(args);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("schedule 'fa3' (named by the call) has no kernel"));
  EXPECT_THAT(refused.message(), HasSubstr("kind=backward"));
  EXPECT_THAT(refused.message(), HasSubstr("has no backward program"));
  runtime->setStrictSchedule(false);
  device.launches.clear();
  ASSERT_TRUE(runtime->backward(args).ok());
  ASSERT_EQ(device.launches.size(), 3u);
  ASSERT_EQ(log.all().size(), 1u);
  EXPECT_THAT(log.all()[0], HasSubstr("running 'fa2' instead"));
}

// explain() of the backward says what backward() would run: the first schedule of the forward's order with a backward
// kernel, and why (the fake compiler's fa3 has none).
TEST(ScheduleChoice, ExplainOfTheBackwardNamesItsScheduleAndWhy) {
  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime = jitRuntime(compiler);
  StatusOr<ScheduleChoice> backward = runtime->explain(callWith(128), "sm_90a", kBackwardKind);
  ASSERT_TRUE(backward.ok()) << backward.status().message();
  EXPECT_EQ(backward->spec.schedule, "fa2");
  EXPECT_EQ(backward->spec.kind, kBackwardKind);
  EXPECT_EQ(backward->entry, "flashtile_fa2_none_d128_bwd");
  EXPECT_TRUE(backward->fellBack);
  EXPECT_THAT(backward->reason, HasSubstr("schedule 'fa3' (preferred on sm_90a) has no kernel for this call (fa3: "
                                          "schedule fa3 has no backward program)"));
  StatusOr<ScheduleChoice> forward = runtime->explain(callWith(128), "sm_90a", kForwardKind);
  ASSERT_TRUE(forward.ok()) << forward.status().message();
  EXPECT_EQ(forward->spec.schedule, "fa3");
  EXPECT_THAT(runtime->explain(callWith(128), "sm_90a", "sideways").status().message(),
              HasSubstr("module kind 'sideways' is not known; known: forward, backward"));
}

TEST(BackwardArgs, RejectsBadArgumentsNamingThem) {
  BackwardArgs good;
  good.forward = callWith(64);
  good.dO = good.dQ = good.dK = good.dV = reinterpret_cast<void *>(0x900000);
  good.dOStride = good.dQStride = good.forward.qStride;
  good.dKStride = good.dVStride = good.forward.kStride;
  ASSERT_TRUE(Runtime::validateBackward(good).ok()) << Runtime::validateBackward(good).message();
  std::vector<std::pair<std::string, std::function<void(BackwardArgs &)>>> cases = {
      {"forward: q is null", [](BackwardArgs &a) { a.forward.q = nullptr; }},
      {"dO is null", [](BackwardArgs &a) { a.dO = nullptr; }},
      {"dK is null", [](BackwardArgs &a) { a.dK = nullptr; }},
      {"dQStride[3]", [](BackwardArgs &a) { a.dQStride[3] = 2; }},
      {"dVStride[1]", [](BackwardArgs &a) { a.dVStride[1] = 7; }},
      {"dK (0x900002) is not 16-byte aligned", [](BackwardArgs &a) { a.dK = reinterpret_cast<void *>(0x900002); }},
      {"inputGrads has 1 entries", [](BackwardArgs &a) { a.inputGrads = {nullptr}; }},
      {"KV-cache mode", [](BackwardArgs &a) { a.forward.kvCache.layout = KvCacheLayout::Contiguous; }},
  };
  for (const auto &[expected, breakIt] : cases) {
    BackwardArgs bad = good;
    breakIt(bad);
    Status s = Runtime::validateBackward(bad);
    ASSERT_FALSE(s.ok()) << expected;
    EXPECT_THAT(s.message(), HasSubstr(expected));
  }
  // Without keys, dK and dV may be null; without queries, dO and dQ.
  BackwardArgs noKeys = good;
  noKeys.forward.seqlenK = 0;
  noKeys.dK = noKeys.dV = nullptr;
  EXPECT_TRUE(Runtime::validateBackward(noKeys).ok()) << Runtime::validateBackward(noKeys).message();
  BackwardArgs noRows = good;
  noRows.forward.seqlenQ = 0;
  noRows.dO = noRows.dQ = nullptr;
  EXPECT_TRUE(Runtime::validateBackward(noRows).ok()) << Runtime::validateBackward(noRows).message();
}

} // namespace
