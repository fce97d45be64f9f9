// SplitKvTest.cpp — split-KV on the host: the split count heuristic, the workspace layout, the arguments, the
// decode schedule's selection and the kernel metadata of split-KV kernels. No GPU needed.
#include "TestUtil.h"

#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/SplitKv.h"

#include <gmock/gmock.h>

#include <cstdint>

using namespace flashtile;
using testing::HasSubstr;

namespace {

AttentionArgs decodeArgs(int batch, int seqlenK, int headsQ, int headsKv) {
  return AttentionArgs::contiguous(DType::BF16, reinterpret_cast<const void *>(0x10000),
                                   reinterpret_cast<const void *>(0x20000), reinterpret_cast<const void *>(0x30000),
                                   reinterpret_cast<void *>(0x40000), reinterpret_cast<float *>(0x50000), batch, 1,
                                   seqlenK, headsQ, headsKv, 128);
}

TEST(SplitKvHeuristic, AGridThatFillsTheGpuIsNotSplit) {
  EXPECT_EQ(numSplitsHeuristic(/*blocks=*/264, /*slots=*/264, /*kvTiles=*/1024), 1);
  EXPECT_EQ(numSplitsHeuristic(212, 264, 1024), 1); // >= 80% of the slots
  EXPECT_EQ(numSplitsHeuristic(500, 264, 64), 1);   // the second wave 89% full
  EXPECT_EQ(numSplitsHeuristic(32, 264, 1), 1);     // one K/V tile cannot be split
  EXPECT_EQ(numSplitsHeuristic(32, 264, 1024, 1), 1);
  EXPECT_EQ(numSplitsHeuristic(0, 264, 1024), 1);
}

TEST(SplitKvHeuristic, TakesTheSmallestCountWithin85PercentOfTheBestWaveEfficiency) {
  // 32 blocks on 264 slots: 7 splits fill 224 / 264 = 0.848 of a wave. 33 would fill 4 waves exactly but give 32
  // tiles a split as 32 splits do, so it is skipped; the best that remains, 41 splits (0.994), puts 7 within 85%.
  EXPECT_EQ(numSplitsHeuristic(32, 264, 1024), 7);
  // FlashAttention's example: 48 (batch x heads) on 108 SMs: 2 splits (0.89) beat 3 (0.67).
  EXPECT_EQ(numSplitsHeuristic(48, 108, 64), 2);
  // One block and a long walk: within one wave efficiency grows with the count, so the smallest count within 85%
  // of the most the bounds allow (kMaxSplits: 128 / 264; the slots: 64 / 64).
  EXPECT_EQ(numSplitsHeuristic(1, 264, 100000), 109);
  EXPECT_EQ(numSplitsHeuristic(1, 64, 100000), 55);
}

TEST(SplitKvHeuristic, SplitsAGridWhoseLastWaveIsMostlyIdle) {
  // 512 blocks on 396 slots (3 blocks an SM): 1.29 waves, the second 29% full. Two splits fill 2.59 waves (86%).
  EXPECT_EQ(numSplitsHeuristic(512, 396, 64), 2);
  // The same grid on 264 slots is 1.94 waves: not split.
  EXPECT_EQ(numSplitsHeuristic(512, 264, 64), 1);
}

TEST(SplitKvHeuristic, NeverMoreSplitsThanTilesAndSkipsCountsThatOnlyAddEmptySplits) {
  for (int tiles = 1; tiles <= 40; ++tiles)
    for (long long blocks : {1LL, 3LL, 17LL, 100LL}) {
      int splits = numSplitsHeuristic(blocks, 264, tiles);
      EXPECT_GE(splits, 1);
      EXPECT_LE(splits, tiles);
      // The last split has keys: fewer tiles per split would be needed otherwise.
      int perSplit = (tiles + splits - 1) / splits;
      EXPECT_LT((splits - 1) * perSplit, tiles) << tiles << " tiles, " << blocks << " blocks: " << splits;
    }
}

TEST(SplitKvWorkspace, PartialOThenLseAligned) {
  EXPECT_EQ(splitKvWorkspaceBytes(1000, 128, 1), 0u);
  size_t lseOffset = splitKvLseOffset(1000, 128, 3);
  EXPECT_EQ(lseOffset, 3u * 1000 * 128 * 4);
  EXPECT_EQ(lseOffset % 256, 0u);
  EXPECT_EQ(splitKvWorkspaceBytes(1000, 128, 3), lseOffset + 12032); // 3 x 1000 floats, rounded up to 256
  EXPECT_EQ(splitKvLseOffset(3, 8, 2) % 256, 0u);
}

TEST(SplitKvWorkspace, SizesPastSizeTAreSizeMax) {
  // 2 x 2^62 rows x 4 bytes wraps to 0 in 64 bits: a caller would allocate nothing and the kernels write past it.
  EXPECT_EQ(splitKvWorkspaceBytes(1LL << 62, 1, 2), SIZE_MAX);
  EXPECT_EQ(splitKvLseOffset(1LL << 62, 128, 2), SIZE_MAX);
  EXPECT_EQ(splitKvWorkspaceBytes(1LL << 55, 256, 128), SIZE_MAX);
  // The largest that fits still adds up.
  EXPECT_EQ(splitKvWorkspaceBytes(1LL << 40, 1, 2), (size_t(2) << 42) + (size_t(2) << 42));
}

TEST(SplitKvArgs, AreCheckedBeforeTheGpu) {
  AttentionArgs args = decodeArgs(1, 4096, 32, 8);
  args.numSplits = kMaxSplits + 1;
  EXPECT_THAT(Runtime::validate(args).message(),
              HasSubstr("numSplits is 129; accepted: 0 (the runtime chooses) or 1 to 128"));
  args.numSplits = -1;
  EXPECT_FALSE(Runtime::validate(args).ok());
  args.numSplits = 4;
  EXPECT_TRUE(Runtime::validate(args).ok());
  args.workspaceBytes = 100;
  EXPECT_THAT(Runtime::validate(args).message(), HasSubstr("workspace is null"));
  args.workspace = reinterpret_cast<void *>(0x60010);
  EXPECT_THAT(Runtime::validate(args).message(), HasSubstr("256-byte aligned"));
  args.workspace = reinterpret_cast<void *>(0x60000);
  EXPECT_TRUE(Runtime::validate(args).ok());
}

TEST(SplitKvSplits, ForcedOrFromTheHeuristic) {
  KernelInfo info = test::splitKvKernel();
  AttentionArgs args = decodeArgs(1, 131072, 32, 8); // 1024 tiles of 128 keys, 32 blocks
  EXPECT_EQ(Runtime::numSplitsFor(args, info, 132), 7);
  args.numSplits = 3;
  EXPECT_EQ(Runtime::numSplitsFor(args, info, 132), 3);
  args = decodeArgs(64, 8192, 32, 8); // 2048 blocks fill the GPU
  EXPECT_EQ(Runtime::numSplitsFor(args, info, 132), 1);
  KernelInfo unsplit = info;
  unsplit.plan.splits.reset();
  args = decodeArgs(1, 131072, 32, 8);
  EXPECT_EQ(Runtime::numSplitsFor(args, unsplit, 132), 1);
  // GQA packing: one block per K/V head (8), so more splits fill the GPU: 28 splits fill 224 / 264 of a wave.
  KernelInfo packed = test::splitKvKernel("flashtile_decode_causal_bf16_d128", /*pack=*/true);
  EXPECT_EQ(Runtime::numSplitsFor(args, packed, 132), 28);
  // The slots are SMs x the blocks of this kernel an SM holds (the driver's occupancy at launch): at 3 an SM, 43
  // splits of the 8 blocks fill 344 / 396 (the smallest count within 85% of the best wave).
  EXPECT_EQ(Runtime::numSplitsFor(args, packed, 132, 3), 43);
}

TEST(SplitKvSchedule, DecodeSizedCallsAskForTheDecodeSchedule) {
  Runtime runtime(test::cacheOptions("", false));
  runtime.setDispatchRules(test::dispatchRules());
  AttentionArgs args = decodeArgs(2, 4096, 32, 8);
  EXPECT_EQ(runtime.specFor(args, "sm_90a")->schedule, "decode");
  args.seqlenQ = kDecodeMaxSeqlenQ;
  EXPECT_EQ(runtime.specFor(args, "sm_90a")->schedule, "decode");
  args.seqlenQ = kDecodeMaxSeqlenQ + 1;
  EXPECT_EQ(runtime.specFor(args, "sm_80")->schedule, "fa2");
  int offsets[3] = {0, 0, 0};
  AttentionArgs packed = AttentionArgs::varlen(DType::BF16, args.q, args.k, args.v, args.o, args.lse, offsets, offsets,
                                               2, 8, 8000, 4, 4000, 32, 8, 128);
  EXPECT_EQ(runtime.specFor(packed, "sm_90a")->schedule, "decode");
  // A schedule forced on the runtime leaves decode-sized calls to the schedules made for them, unless
  // setDecodeSchedule("") sends them along.
  runtime.setSchedule("fa1");
  args.seqlenQ = 1;
  EXPECT_EQ(runtime.specFor(args, "sm_80")->schedule, "decode");
  runtime.setDecodeSchedule("");
  EXPECT_EQ(runtime.specFor(args, "sm_80")->schedule, "fa1");
  runtime.setSchedule("");
  EXPECT_EQ(runtime.specFor(args, "sm_80")->schedule, "fa2");
}

TEST(SplitKvKernelInfo, ThePlanRoundTripsAndIsChecked) {
  for (bool pack : {false, true}) {
    KernelInfo info = test::splitKvKernel("flashtile_decode_causal_bf16_d128", pack, /*kvCache=*/true);
    ASSERT_TRUE(info.verify().ok()) << info.verify().message();
    StatusOr<KernelInfo> parsed = KernelInfo::parse(info.serialize());
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_TRUE(parsed->splitKv());
    EXPECT_EQ(parsed->plan.serialize(), info.plan.serialize());
    ASSERT_EQ(parsed->plan.launches.size(), 3u); // append, attention, combine
    EXPECT_EQ(parsed->plan.launches[0].entry, info.entry + "_append");
    EXPECT_EQ(parsed->plan.launches[1].grid[1].text(), pack ? "heads_kv" : "heads_q");
    EXPECT_TRUE(parsed->plan.launches[2].dependent);
  }
  KernelInfo bad = test::splitKvKernel();
  bad.plan.splits->occupancyOf = 7;
  EXPECT_THAT(bad.verify().message(), HasSubstr("field 'splits.occupancyOf': 7 is not a launch of the plan"));
  bad = test::splitKvKernel();
  bad.plan.splits.reset(); // rules still read the split count
  EXPECT_THAT(bad.verify().message(), HasSubstr("rules read the split count, but the plan has no split rule"));
  bad = test::splitKvKernel();
  bad.plan.launches[1].threads = 100;
  EXPECT_THAT(bad.verify().message(), HasSubstr("field 'launch.1.threads': 100 is not a multiple of 32"));
  bad = test::splitKvKernel();
  bad.plan.launches[0].dependent = true;
  EXPECT_THAT(bad.verify().message(), HasSubstr("the first launch has no launch before it"));
}

// The plan's partials workspace is the one splitKvWorkspaceBytes (the C ABI's size for callers) describes.
TEST(SplitKvKernelInfo, ThePlanWorkspaceIsSplitKvWorkspaceBytes) {
  KernelInfo info = test::splitKvKernel();
  for (int splits : {2, 3, 7}) {
    PlanSymbols symbols;
    symbols.lseRows = 1000 * 32 + 17;
    symbols.headDimV = 128;
    symbols.splits = splits;
    const PlanWorkspace &partials = info.plan.workspaces.at(0);
    EXPECT_EQ(*partials.bytes.eval(symbols),
              static_cast<long long>(splitKvWorkspaceBytes(symbols.lseRows, 128, splits)));
    EXPECT_EQ(*partials.bind.at(1).second.eval(symbols),
              static_cast<long long>(splitKvLseOffset(symbols.lseRows, 128, splits)));
  }
}

} // namespace
