// PositionsTest.cpp — calls that are blocks of a larger problem (AttentionArgs::positions): their checks, the module
// they ask for (KernelSpec::positions) and what their launches pass (FlashtilePositions as every kernel's second
// parameter), through a stand-in JIT and the stand-in driver (no GPU, no compiler). Plain calls keep their keys,
// modules and parameters.
#include "StandInDriver.h"
#include "TestUtil.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/PositionsAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>

#include <functional>

using namespace flashtile;
using stand_in::device;
using testing::HasSubstr;

namespace {

AttentionArgs denseCall(int seqlenQ = 256, int seqlenK = 256, int headsQ = 8, int headsKv = 2) {
  const auto *base = reinterpret_cast<const char *>(0x100000);
  return AttentionArgs::contiguous(DType::BF16, base, base + 0x100000, base + 0x200000,
                                   const_cast<char *>(base) + 0x300000, reinterpret_cast<float *>(0x500000), 2, seqlenQ,
                                   seqlenK, headsQ, headsKv, 128);
}

AttentionArgs varlenCall() {
  const auto *base = reinterpret_cast<const char *>(0x100000);
  return AttentionArgs::varlen(DType::BF16, base, base + 0x100000, base + 0x200000, const_cast<char *>(base) + 0x300000,
                               reinterpret_cast<float *>(0x500000), reinterpret_cast<const int *>(0x600000),
                               reinterpret_cast<const int *>(0x700000), /*batch=*/2, /*totalQ=*/300, /*totalK=*/300,
                               /*maxSeqlenQ=*/200, /*maxSeqlenK=*/200, 8, 2, 128);
}

/// A dense block: rows 256..511 of 1024, keys 512..767 of 1024, heads 4..11 of 16 (K/V heads 1..2 of 4).
BlockPositions denseBlock() {
  BlockPositions p;
  p.qOffset = 256;
  p.kOffset = 512;
  p.seqlenQGlobal = 1024;
  p.seqlenKGlobal = 1024;
  p.headOffset = 4;
  p.headsQGlobal = 16;
  p.headsKvGlobal = 4;
  return p;
}

std::string errorOf(const AttentionArgs &args) {
  Status s = Runtime::validate(args);
  return s.ok() ? "" : s.message();
}

TEST(Positions, AValidBlockPassesAndAPlainCallIsUntouched) {
  AttentionArgs plain = denseCall();
  EXPECT_EQ(errorOf(plain), "");
  EXPECT_FALSE(plain.positions.has_value());
  AttentionArgs block = plain;
  block.positions = denseBlock();
  EXPECT_EQ(errorOf(block), "");
  // Zeros everywhere: the block is its own larger problem.
  block.positions = BlockPositions{};
  EXPECT_EQ(errorOf(block), "");
  // The rows may end exactly where the larger problem ends.
  block.positions->qOffset = 768;
  block.positions->seqlenQGlobal = 1024;
  EXPECT_EQ(errorOf(block), "");
}

TEST(Positions, BadDenseBlocksAreRefusedNamingTheFieldAndTheAcceptedValues) {
  std::vector<std::pair<std::string, std::function<void(BlockPositions &)>>> cases = {
      {"positions: qOffset is -1; it must be >= 0", [](BlockPositions &p) { p.qOffset = -1; }},
      {"positions: kOffset is -3; it must be >= 0", [](BlockPositions &p) { p.kOffset = -3; }},
      {"positions: seqlenKGlobal is -5; it must be >= 0 (0: seqlenK, the call's own)",
       [](BlockPositions &p) { p.seqlenKGlobal = -5; }},
      {"positions: qOffset + seqlenQ = 900 + 256 is past the larger problem's seqlenQGlobal = 1024; accepted: "
       "qOffset + seqlenQ <= seqlenQGlobal",
       [](BlockPositions &p) { p.qOffset = 900; }},
      {"kOffset + seqlenK = 512 + 256 is past the larger problem's seqlenKGlobal = 600",
       [](BlockPositions &p) { p.seqlenKGlobal = 600; }},
      // Without a global size the larger problem is the call's own: any offset past 0 leaves it.
      {"qOffset + seqlenQ = 256 + 256 is past the larger problem's seqlenQGlobal = 256 (0: the call's seqlenQ)",
       [](BlockPositions &p) { p.seqlenQGlobal = 0; }},
      {"positions: headOffset is -4; it must be >= 0", [](BlockPositions &p) { p.headOffset = -4; }},
      {"positions: headsQGlobal is -16", [](BlockPositions &p) { p.headsQGlobal = -16; }},
      // Not a whole group of 4 query heads a K/V head.
      {"headOffset (2), headsQGlobal (16) and headsKvGlobal (4) must place the call's 8 query heads inside the larger "
       "problem's, in whole groups of 4",
       [](BlockPositions &p) { p.headOffset = 2; }},
      {"headOffset (12), headsQGlobal (16)", [](BlockPositions &p) { p.headOffset = 12; }},
      // Another group size than the call's.
      {"headsQGlobal / headsKvGlobal = 4", [](BlockPositions &p) { p.headsKvGlobal = 8; }},
      {"qOffsets is set on a dense call; qOffsets, kOffsets, cuSeqlensQGlobal, cuSeqlensKGlobal and their host "
       "copies are for varlen calls",
       [](BlockPositions &p) { p.qOffsets = reinterpret_cast<const int *>(0x800000); }},
      {"cuSeqlensKGlobalHost is set on a dense call",
       [](BlockPositions &p) { p.cuSeqlensKGlobalHost = reinterpret_cast<const int *>(0x800000); }},
  };
  for (const auto &[expected, breakIt] : cases) {
    AttentionArgs bad = denseCall();
    bad.positions = denseBlock();
    breakIt(*bad.positions);
    EXPECT_THAT(errorOf(bad), HasSubstr(expected)) << expected;
  }
  // A KV-cache call takes none.
  AttentionArgs cache = AttentionArgs::contiguousCache(
      DType::BF16, reinterpret_cast<const void *>(0x100000), reinterpret_cast<const void *>(0x200000),
      reinterpret_cast<const void *>(0x300000), reinterpret_cast<void *>(0x400000), reinterpret_cast<float *>(0x500000),
      2, 1, 2, 512, 8, 2, 128, nullptr);
  ASSERT_EQ(errorOf(cache), "");
  cache.positions = BlockPositions{};
  EXPECT_THAT(errorOf(cache),
              HasSubstr("positions: set on a KV-cache call; KV-cache kernels take no position offsets"));
  // Nor an e4m3 call.
  AttentionArgs fp8 = denseCall();
  fp8.dtype = DType::E4M3;
  fp8.positions = denseBlock();
  EXPECT_THAT(errorOf(fp8), HasSubstr("positions: set on an e4m3 call; e4m3 kernels take no position offsets"));
}

TEST(Positions, VarlenBlocksPlaceEachSequenceWithArraysCheckedOnHostCopies) {
  // Sequences of 100 and 200 query rows and keys; the larger problem's are 400 and 300 long.
  const int cuQ[3] = {0, 100, 300}, cuK[3] = {0, 100, 300};
  const int cuGlobal[3] = {0, 400, 700};
  const int qOffsets[2] = {300, 100}, kOffsets[2] = {0, 100};
  AttentionArgs good = varlenCall();
  good.cuSeqlensQHost = cuQ;
  good.cuSeqlensKHost = cuK;
  ASSERT_EQ(errorOf(good), "");
  BlockPositions p;
  p.qOffsets = reinterpret_cast<const int *>(0x800000);
  p.kOffsets = reinterpret_cast<const int *>(0x800100);
  p.cuSeqlensQGlobal = reinterpret_cast<const int *>(0x800200);
  p.cuSeqlensKGlobal = reinterpret_cast<const int *>(0x800300);
  p.qOffsetsHost = qOffsets;
  p.kOffsetsHost = kOffsets;
  p.cuSeqlensQGlobalHost = cuGlobal;
  p.cuSeqlensKGlobalHost = cuGlobal;
  good.positions = p;
  EXPECT_EQ(errorOf(good), "");

  std::vector<std::pair<std::string, std::function<void(AttentionArgs &)>>> cases = {
      {"positions: qOffset is 5 on a varlen call; varlen calls place each sequence with qOffsets, kOffsets, "
       "cuSeqlensQGlobal and cuSeqlensKGlobal",
       [](AttentionArgs &a) { a.positions->qOffset = 5; }},
      {"seqlenKGlobal is 9 on a varlen call", [](AttentionArgs &a) { a.positions->seqlenKGlobal = 9; }},
      {"positions: kOffsets is not 4-byte aligned",
       [](AttentionArgs &a) { a.positions->kOffsets = reinterpret_cast<const int *>(0x800102); }},
      {"positions: qOffsetsHost is set but qOffsets (the device array the kernels read) is null",
       [](AttentionArgs &a) { a.positions->qOffsets = nullptr; }},
      {"positions: qOffsets: sequence 0's rows [301, 401) are not inside the larger problem's sequence of 400 rows "
       "(cuSeqlensQGlobal)",
       [](AttentionArgs &a) {
         static const int shifted[2] = {301, 100};
         a.positions->qOffsetsHost = shifted;
       }},
      {"positions: kOffsetsHost[1] = -1; offsets must be >= 0",
       [](AttentionArgs &a) {
         static const int negative[2] = {0, -1};
         a.positions->kOffsetsHost = negative;
       }},
      {"positions: cuSeqlensKGlobalHost[0] = 4; the larger problem's offsets start at 0",
       [](AttentionArgs &a) {
         static const int shifted[3] = {4, 400, 700};
         a.positions->cuSeqlensKGlobalHost = shifted;
       }},
      {"positions: cuSeqlensQGlobalHost is not non-decreasing: [2] = 350 < [1] = 400",
       [](AttentionArgs &a) {
         static const int decreasing[3] = {0, 400, 350};
         a.positions->cuSeqlensQGlobalHost = decreasing;
       }},
      // Without global offsets a sequence's larger problem is its own length: an offset leaves it.
      {"positions: kOffsets: sequence 1's rows [100, 300) are not inside the larger problem's sequence of 200 rows "
       "(the call's own length: no global offsets)",
       [](AttentionArgs &a) { a.positions->cuSeqlensKGlobalHost = a.positions->cuSeqlensKGlobal = nullptr; }},
  };
  for (const auto &[expected, breakIt] : cases) {
    AttentionArgs bad = good;
    breakIt(bad);
    EXPECT_THAT(errorOf(bad), HasSubstr(expected)) << expected;
  }
}

TEST(Positions, BlocksAskForModulesWithPositionOffsetsAndPlainCallsKeepTheirKeys) {
  Runtime runtime(test::cacheOptions("", false));
  AttentionArgs plain = denseCall();
  plain.variant = "causal";
  plain.schedule = "fa2";
  StatusOr<KernelSpec> spec = runtime.specFor(plain, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_FALSE(spec->positions);
  EXPECT_EQ(spec->key(),
            "arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;variant=causal;schedule=fa2;shapeClass=short");
  AttentionArgs block = plain;
  block.positions = denseBlock();
  spec = runtime.specFor(block, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_TRUE(spec->positions);
  EXPECT_EQ(spec->key(), "arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;variant=causal;schedule=fa2;shapeClass=short;"
                         "positions=1");
}

/// A stand-in JIT: a module for every spec, its kernels named after the spec ("_pos" for position offsets, "_bwd" for
/// the backward, whose plan is preprocess, main and postprocess), KernelInfo::positions as the spec asks.
struct FakeCompiler {
  std::vector<KernelSpec> asked;
  CompileFn fn() {
    return [this](const KernelSpec &spec) -> StatusOr<CachedKernel> {
      asked.push_back(spec);
      const bool backward = spec.kind == kBackwardKind;
      return stand_in::moduleFor(spec, "flashtile_" + spec.schedule + "_" + spec.variant +
                                           (spec.positions ? "_pos" : "") + (backward ? "_bwd" : ""));
    };
  }
};

class PositionsLaunch : public testing::Test {
protected:
  void SetUp() override {
    device = stand_in::Device(); // an sm_90a device and context; launches recorded, nothing run
    CudaDriver::useInsteadForTesting(&driver);
    runtime = std::make_unique<Runtime>(test::cacheOptions("", false));
    runtime->setCompiler(compiler.fn());
    runtime->setDispatchRules(test::dispatchRules());
  }
  void TearDown() override { CudaDriver::useInsteadForTesting(nullptr); }

  /// Runs `args` forward on fa2 and returns its one launch.
  stand_in::Launch forwardLaunch(AttentionArgs args) {
    args.schedule = "fa2";
    args.variant = "causal";
    device.launches.clear();
    Status s = runtime->forward(args);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(device.launches.size(), 1u);
    return device.launches.empty() ? stand_in::Launch{} : device.launches.back();
  }

  /// Every field of a FlashtilePositions, for one comparison that names the fields that differ.
  static std::string describe(const FlashtilePositions &p) {
    auto pointer = [](const void *a) { return std::to_string(reinterpret_cast<uintptr_t>(a)); };
    return "qOffset=" + std::to_string(p.qOffset) + " kOffset=" + std::to_string(p.kOffset) +
           " seqlenQGlobal=" + std::to_string(p.seqlenQGlobal) + " seqlenKGlobal=" + std::to_string(p.seqlenKGlobal) +
           " qOffsets=" + pointer(p.qOffsets) + " kOffsets=" + pointer(p.kOffsets) +
           " cuSeqlensQGlobal=" + pointer(p.cuSeqlensQGlobal) + " cuSeqlensKGlobal=" + pointer(p.cuSeqlensKGlobal) +
           " headOffset=" + std::to_string(p.headOffset) + " headsQGlobal=" + std::to_string(p.headsQGlobal) +
           " headsKvGlobal=" + std::to_string(p.headsKvGlobal);
  }
  /// What the kernels must receive for `p`, written out field by field.
  static std::string describe(const BlockPositions &p) {
    FlashtilePositions abi{p.qOffset,    p.kOffset,      p.seqlenQGlobal,    p.seqlenKGlobal,
                           p.qOffsets,   p.kOffsets,     p.cuSeqlensQGlobal, p.cuSeqlensKGlobal,
                           p.headOffset, p.headsQGlobal, p.headsKvGlobal};
    return describe(abi);
  }
  static void expectPositions(const FlashtilePositions &got, const BlockPositions &want) {
    EXPECT_EQ(describe(got), describe(want));
  }
  static bool allZero(const FlashtilePositions &p) {
    const FlashtilePositions zero{};
    return std::memcmp(&p, &zero, sizeof p) == 0;
  }

  FakeCompiler compiler;
  std::unique_ptr<Runtime> runtime;
  CudaDriver driver = stand_in::standInDriver();
};

TEST_F(PositionsLaunch, ABlockRunsTheModuleWithOffsetsAndPassesItsPositionsSecond) {
  AttentionArgs block = denseCall();
  block.positions = denseBlock();
  for (int call = 0; call < 2; ++call) { // the second takes the warm path
    stand_in::Launch launch = forwardLaunch(block);
    EXPECT_EQ(launch.entry, "flashtile_fa2_causal_pos");
    expectPositions(launch.second, *block.positions);
    // The parameter block is the plain call's: the positions travel on their own.
    EXPECT_EQ(launch.params.seqlenQ, 256);
    EXPECT_EQ(launch.params.headsQ, 8);
  }
  // New offsets reuse the module: positions are arguments, not compile-time constants.
  block.positions->qOffset = 640;
  block.positions->headOffset = 8;
  stand_in::Launch moved = forwardLaunch(block);
  EXPECT_EQ(moved.entry, "flashtile_fa2_causal_pos");
  expectPositions(moved.second, *block.positions);
  ASSERT_EQ(compiler.asked.size(), 1u);
  EXPECT_TRUE(compiler.asked[0].positions);

  // A plain call of the same shape: its own module (compiled now), nothing in the second parameter but its (here
  // empty) tensor maps; the block's warm dispatch does not serve it, nor the plain one the block.
  stand_in::Launch plain = forwardLaunch(denseCall());
  EXPECT_EQ(plain.entry, "flashtile_fa2_causal");
  EXPECT_TRUE(allZero(plain.second));
  ASSERT_EQ(compiler.asked.size(), 2u);
  EXPECT_FALSE(compiler.asked[1].positions);
  EXPECT_EQ(forwardLaunch(block).entry, "flashtile_fa2_causal_pos");
  EXPECT_EQ(forwardLaunch(denseCall()).entry, "flashtile_fa2_causal");

  // Negative control: the comparison this test relies on catches positions lost on the way (the plain launch's zeros
  // in their place) and query and key offsets swapped.
  EXPECT_NONFATAL_FAILURE(expectPositions(plain.second, *block.positions), "qOffset=0");
  FlashtilePositions swapped = moved.second;
  std::swap(swapped.qOffset, swapped.kOffset);
  EXPECT_NONFATAL_FAILURE(expectPositions(swapped, *block.positions), "qOffset=512");
}

TEST_F(PositionsLaunch, VarlenBlocksPassTheirDeviceArrays) {
  BlockPositions p;
  p.qOffsets = reinterpret_cast<const int *>(0x800000);
  p.kOffsets = reinterpret_cast<const int *>(0x800100);
  p.cuSeqlensQGlobal = reinterpret_cast<const int *>(0x800200);
  p.cuSeqlensKGlobal = reinterpret_cast<const int *>(0x800300);
  p.headsQGlobal = 8;
  AttentionArgs block = varlenCall();
  block.positions = p;
  stand_in::Launch launch = forwardLaunch(block);
  EXPECT_EQ(launch.entry, "flashtile_fa2_causal_pos");
  expectPositions(launch.second, p);
  EXPECT_EQ(launch.params.cuSeqlensQ, block.cuSeqlensQ);
}

TEST_F(PositionsLaunch, EveryKernelOfABlocksBackwardGetsItsPositions) {
  AttentionArgs forward = denseCall();
  forward.variant = "causal";
  forward.schedule = "fa2";
  forward.positions = denseBlock();
  BackwardArgs args = stand_in::backwardOf(forward);
  Status s = runtime->backward(args);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(device.launches.size(), 3u);
  const char *entries[] = {"flashtile_fa2_causal_pos_bwd_pre", "flashtile_fa2_causal_pos_bwd",
                           "flashtile_fa2_causal_pos_bwd_post"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(device.launches[i].entry, entries[i]);
    expectPositions(device.launches[i].second, *args.forward.positions);
  }
  ASSERT_EQ(compiler.asked.size(), 1u);
  EXPECT_EQ(compiler.asked[0].kind, kBackwardKind);
  EXPECT_TRUE(compiler.asked[0].positions);

  // The plain backward is unchanged: its own module, no positions.
  device.launches.clear();
  args.forward.positions.reset();
  ASSERT_TRUE(runtime->backward(args).ok());
  ASSERT_EQ(device.launches.size(), 3u);
  EXPECT_EQ(device.launches[1].entry, "flashtile_fa2_causal_bwd");
  for (const stand_in::Launch &launch : device.launches)
    EXPECT_TRUE(allZero(launch.second));

  // A bad block's backward is refused before the GPU, naming the field.
  device.launches.clear();
  args.forward.positions = denseBlock();
  args.forward.positions->kOffset = -1;
  Status refused = runtime->backward(args);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("forward: positions: kOffset is -1; it must be >= 0"));
  EXPECT_TRUE(device.launches.empty());
}

// A module compiled one way never runs a call of the other: the kernels' parameter lists differ, so a mix-up would
// read the tensor maps as positions (or the other way round). validateFor catches it whatever found the kernel.
TEST(Positions, AModuleRunsOnlyCallsOfItsKind) {
  CachedKernel kernel = test::fakeKernel();
  AttentionArgs block = denseCall();
  block.variant = "causal";
  block.positions = denseBlock();
  Status s = Runtime::validateFor(block, kernel.info);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kernel flashtile_fwd_a (schedule fa2) is compiled without position offsets but "
                                     "the call is a block of a larger problem (positions set)"));
  kernel.info.positions = true;
  EXPECT_TRUE(Runtime::validateFor(block, kernel.info).ok());
  block.positions.reset();
  s = Runtime::validateFor(block, kernel.info);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("is compiled with position offsets but the call has no positions"));
}

} // namespace
