// KvCacheTest.cpp — calls over a KV cache without a GPU: every rejection of Runtime::validate names the argument and
// what is accepted, the kernel parameters the runtime fills, and the paged address rule the kernels follow.
// Pointers are fake (never dereferenced): validation must not touch the GPU.
#include "TestUtil.h"
#include "runtime/lib/KvCacheInternal.h"

#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/KvCache.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <functional>
#include <vector>

using namespace flashtile;
using testing::HasSubstr;

namespace {

template <class T = void> T *fake(uintptr_t address) { return reinterpret_cast<T *>(address); }

constexpr int kBatch = 3, kPageSize = 64, kPagesPerSeq = 4, kPages = 16, kCacheSeqlen = 1000;

AttentionArgs contiguousArgs() {
  return AttentionArgs::contiguousCache(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000), fake(0x40000),
                                        fake<float>(0x50000), kBatch, /*seqlenQ=*/1, /*cacheBatch=*/kBatch,
                                        kCacheSeqlen, /*headsQ=*/32, /*headsKv=*/8, /*headDim=*/128,
                                        fake<const int>(0x60000));
}

AttentionArgs pagedArgs() {
  return AttentionArgs::pagedCache(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000), fake(0x40000),
                                   fake<float>(0x50000), kBatch, /*seqlenQ=*/4, kPages, kPageSize,
                                   fake<const int>(0x70000), kPagesPerSeq, /*headsQ=*/32, /*headsKv=*/8,
                                   /*headDim=*/128, fake<const int>(0x60000));
}

TEST(KvCache, RefusesStridesWhoseByteOffsetsOverflow64Bits) {
  constexpr long long k2Pow62 = 1ll << 62;
  AttentionArgs contiguous = contiguousArgs(); // cacheBatch rows: k's batch extent is cacheBatch, not batch
  contiguous.kvCache.cacheBatch = 1;
  contiguous.kvCache.cacheBatchIdx = fake<const int>(0x80000);
  contiguous.kStride[0] = k2Pow62;
  EXPECT_TRUE(Runtime::validate(contiguous).ok()) << Runtime::validate(contiguous).message();
  contiguous.kvCache.cacheBatch = 2;
  Status s = Runtime::validate(contiguous);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kStride[0] (batch stride) is 4611686018427387904 over 2 entries"));

  AttentionArgs paged = pagedArgs(); // numPages pages of pageSize keys
  paged.vStride[0] = k2Pow62 / 8;
  s = Runtime::validate(paged);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("vStride[0] (batch stride) is 576460752303423488 over 16 entries"));

  AttentionArgs append = contiguousArgs();
  append.kvCache.append(fake(0x80000), fake(0x90000), 2, 8, 128);
  ASSERT_TRUE(Runtime::validate(append).ok()) << Runtime::validate(append).message();
  append.kvCache.vNewStride[1] = k2Pow62;
  s = Runtime::validate(append);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kvCache.vNewStride[1] (seq stride) is 4611686018427387904 over 2 entries"));
  EXPECT_THAT(s.message(), HasSubstr("does not fit in a signed 64-bit integer"));
}

TEST(KvCache, FactoriesDescribeTheCaches) {
  AttentionArgs contiguous = contiguousArgs();
  EXPECT_EQ(contiguous.kvCache.layout, KvCacheLayout::Contiguous);
  EXPECT_EQ(contiguous.seqlenK, kCacheSeqlen);
  EXPECT_EQ(contiguous.kStride, (std::array<long long, 4>{kCacheSeqlen * 8 * 128, 8 * 128, 128, 1}));
  EXPECT_TRUE(Runtime::validate(contiguous).ok()) << Runtime::validate(contiguous).message();

  AttentionArgs paged = pagedArgs();
  EXPECT_EQ(paged.kvCache.layout, KvCacheLayout::Paged);
  EXPECT_EQ(paged.seqlenK, kPagesPerSeq * kPageSize);
  EXPECT_EQ(paged.kStride, (std::array<long long, 4>{kPageSize * 8 * 128, 8 * 128, 128, 1}));
  EXPECT_TRUE(Runtime::validate(paged).ok()) << Runtime::validate(paged).message();

  paged.kvCache.append(fake(0x80000), fake(0x90000), /*seqlen=*/2, /*headsKv=*/8, /*headDim=*/128);
  EXPECT_EQ(paged.kvCache.kNewStride, (std::array<long long, 4>{2 * 8 * 128, 8 * 128, 128, 1}));
  EXPECT_TRUE(Runtime::validate(paged).ok()) << Runtime::validate(paged).message();
}

TEST(KvCache, CacheCallsRunTheDecodeScheduleAtAnyQueryLength) {
  AttentionArgs args = contiguousArgs();
  args.seqlenQ = 4096;
  EXPECT_TRUE(Runtime::isDecodeCall(args));
  AttentionArgs plain = AttentionArgs::contiguous(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                  fake(0x40000), fake<float>(0x50000), 1, 4096, 4096, 8, 8, 128);
  EXPECT_FALSE(Runtime::isDecodeCall(plain));
}

// Cache calls ask for kernels compiled with the cache code, plain decode calls for kernels without it (distinct
// specs: KernelSpec::kvCache), both of the decode schedule.
TEST(KvCache, CacheCallsAskForKvCacheKernelsAndPlainDecodeCallsForPlainOnes) {
  Runtime rt;
  rt.setDispatchRules(test::dispatchRules());
  for (AttentionArgs cache : {contiguousArgs(), pagedArgs()}) {
    StatusOr<KernelSpec> spec = rt.specFor(cache, "sm_90a");
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    EXPECT_TRUE(spec->kvCache);
    EXPECT_EQ(spec->schedule, "decode");
    EXPECT_THAT(spec->key(), HasSubstr(";kvCache=1"));
  }
  AttentionArgs plain = AttentionArgs::contiguous(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                  fake(0x40000), fake<float>(0x50000), 4, 1, 8192, 32, 8, 128);
  StatusOr<KernelSpec> spec = rt.specFor(plain, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_FALSE(spec->kvCache);
  EXPECT_EQ(spec->schedule, "decode");
  EXPECT_THAT(spec->key(), testing::Not(HasSubstr("kvCache")));
}

TEST(KvCache, PageSizesArePowersOfTwoFrom16To256) {
  for (int size : {16, 32, 64, 128, 256})
    EXPECT_TRUE(isSupportedPageSize(size)) << size;
  for (int size : {0, 1, 8, 48, 96, 255, 512, -64})
    EXPECT_FALSE(isSupportedPageSize(size)) << size;
}

TEST(KvCache, PagedRowRuleMapsKeysThroughTheBlockTableAndClampsPages) {
  const int table[] = {5, 0, 7, -3, 99};
  EXPECT_EQ(pagedCacheRow(table, 16, 8, 0), 5 * 16);
  EXPECT_EQ(pagedCacheRow(table, 16, 8, 15), 5 * 16 + 15);
  EXPECT_EQ(pagedCacheRow(table, 16, 8, 16), 0);
  EXPECT_EQ(pagedCacheRow(table, 16, 8, 33), 7 * 16 + 1);
  // Out-of-range entries are clamped into the pool, as the kernels clamp them: never outside it.
  EXPECT_EQ(pagedCacheRow(table, 16, 8, 48), 0 * 16);
  EXPECT_EQ(pagedCacheRow(table, 16, 8, 64 + 2), 7 * 16 + 2);
}

TEST(KvCache, ParamsDescribeTheCacheToTheKernel) {
  AttentionArgs args = pagedArgs();
  args.kvCache.blockTableStride = 6;
  args.kvCache.append(fake(0x80000), fake(0x90000), 3, 8, 128);
  FlashtileFwdParams params{};
  params.kBatchStride = params.vBatchStride = 123;
  detail::fillKvCacheParams(args, params);
  EXPECT_EQ(params.kvCache, 2);
  EXPECT_EQ(params.kBatchStride, 0);
  EXPECT_EQ(params.vBatchStride, 0);
  EXPECT_EQ(params.kCacheBatchStride, kPageSize * 8 * 128);
  EXPECT_EQ(params.cacheBatches, kPages);
  EXPECT_EQ(params.cacheCapacity, kPagesPerSeq * kPageSize);
  EXPECT_EQ(params.pageShift, 6);
  EXPECT_EQ(params.blockTableStride, 6);
  EXPECT_EQ(params.seqlenNew, 3);
  EXPECT_EQ(params.kNewRowStride, 8 * 128);
  EXPECT_EQ(params.blockTable, fake<const int>(0x70000));

  AttentionArgs contiguous = contiguousArgs();
  FlashtileFwdParams plain{};
  detail::fillKvCacheParams(contiguous, plain);
  EXPECT_EQ(plain.kvCache, 1);
  EXPECT_EQ(plain.cacheBatches, kBatch);
  EXPECT_EQ(plain.cacheCapacity, kCacheSeqlen);
  EXPECT_EQ(plain.blockTable, nullptr);

  AttentionArgs none = AttentionArgs::contiguous(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                 fake(0x40000), fake<float>(0x50000), 1, 1, 64, 8, 8, 128);
  FlashtileFwdParams untouched{};
  detail::fillKvCacheParams(none, untouched);
  EXPECT_EQ(untouched.kvCache, 0);
}

struct Rejection {
  std::string name;
  std::function<AttentionArgs()> make;
  std::string expected;
};

std::vector<Rejection> rejections() {
  static const int seqlensTooLong[kBatch] = {10, 999, 3};
  static const int seqlensOk[kBatch] = {10, 100, 0};
  static const int badIdx[kBatch] = {0, 1, 3};
  static const int badTable[kBatch * kPagesPerSeq] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 11};
  static const int shortSeqlens[kBatch] = {64, 64, 64}; // reads only the first page of each row
  auto contiguous = [](std::function<void(AttentionArgs &)> change) {
    return [change] {
      AttentionArgs a = contiguousArgs();
      change(a);
      return a;
    };
  };
  auto paged = [](std::function<void(AttentionArgs &)> change) {
    return [change] {
      AttentionArgs a = pagedArgs();
      change(a);
      return a;
    };
  };
  return {
      {"bad layout", contiguous([](AttentionArgs &a) { a.kvCache.layout = static_cast<KvCacheLayout>(7); }),
       "kvCache.layout has value 7"},
      {"fields without a layout", contiguous([](AttentionArgs &a) { a.kvCache.layout = KvCacheLayout::None; }),
       "kvCache.layout is None"},
      {"varlen", contiguous([](AttentionArgs &a) {
         a.cuSeqlensQ = a.cuSeqlensK = fake<const int>(0xa0000);
         a.maxSeqlenQ = 1;
       }),
       "takes dense Q"},
      {"empty cache", contiguous([](AttentionArgs &a) { a.seqlenK = 0; }), "seqlenK is 0"},
      {"few cache rows", contiguous([](AttentionArgs &a) { a.kvCache.cacheBatch = 2; }), "kvCache.cacheBatch is 2"},
      {"page size on a contiguous cache", contiguous([](AttentionArgs &a) { a.kvCache.pageSize = 64; }),
       "belong to a paged cache"},
      {"misaligned cache_seqlens",
       contiguous([](AttentionArgs &a) { a.kvCache.cacheSeqlens = fake<const int>(0x60002); }),
       "kvCache.cacheSeqlens is not 4-byte aligned"},
      {"k without v", contiguous([](AttentionArgs &a) {
         a.kvCache.append(fake(0x80000), fake(0x90000), 1, 8, 128);
         a.kvCache.vNew = nullptr;
       }),
       "kvCache.vNew is null"},
      {"append without cache_seqlens", contiguous([](AttentionArgs &a) {
         a.kvCache.append(fake(0x80000), fake(0x90000), 1, 8, 128);
         a.kvCache.cacheSeqlens = nullptr;
       }),
       "cacheSeqlens is null"},
      {"append longer than the cache",
       contiguous([](AttentionArgs &a) { a.kvCache.append(fake(0x80000), fake(0x90000), kCacheSeqlen + 1, 8, 128); }),
       "kvCache.seqlenNew is 1001"},
      {"seqlen_new without k", contiguous([](AttentionArgs &a) { a.kvCache.seqlenNew = 2; }),
       "kvCache.seqlenNew is 2 but kNew/vNew are null"},
      {"misaligned k_new",
       contiguous([](AttentionArgs &a) { a.kvCache.append(fake(0x80008), fake(0x90000), 1, 8, 128); }),
       "kvCache.kNew is not 16-byte aligned"},
      {"k_new stride", contiguous([](AttentionArgs &a) {
         a.kvCache.append(fake(0x80000), fake(0x90000), 1, 8, 128);
         a.kvCache.kNewStride[1] = 100;
       }),
       "kvCache.kNewStride[1] (seq stride) is 100"},
      {"append to an empty query", contiguous([](AttentionArgs &a) {
         a.kvCache.append(fake(0x80000), fake(0x90000), 1, 8, 128);
         a.seqlenQ = 0;
       }),
       "seqlenQ is 0 but kvCache.kNew is set"},
      {"host cache_seqlens past the capacity", contiguous([](AttentionArgs &a) {
         a.kvCache.append(fake(0x80000), fake(0x90000), 2, 8, 128);
         a.kvCache.cacheSeqlensHost = seqlensTooLong;
       }),
       "kvCache.cacheSeqlens[1] = 999; accepted: 0 to seqlenK - seqlenNew = 998"},
      {"host cache_batch_idx out of range", contiguous([](AttentionArgs &a) {
         a.kvCache.cacheBatchIdx = fake<const int>(0xb0000);
         a.kvCache.cacheBatchIdxHost = badIdx;
       }),
       "kvCache.cacheBatchIdx[2] = 3; accepted: 0 to cacheBatch - 1 = 2"},
      {"host copy without the device array", contiguous([](AttentionArgs &a) { a.kvCache.cacheBatchIdxHost = badIdx; }),
       "cacheBatchIdx (the device array) is null"},
      {"page size 48", paged([](AttentionArgs &a) { a.kvCache.pageSize = 48; }),
       "kvCache.pageSize is 48; accepted: 16, 32, 64, 128 or 256"},
      {"page size 512", paged([](AttentionArgs &a) { a.kvCache.pageSize = 512; }), "kvCache.pageSize is 512"},
      {"no block table", paged([](AttentionArgs &a) { a.kvCache.blockTable = nullptr; }), "kvCache.blockTable is null"},
      {"no pages", paged([](AttentionArgs &a) { a.kvCache.numPages = 0; }), "kvCache.numPages is 0"},
      {"narrow block table", paged([](AttentionArgs &a) { a.kvCache.blockTableStride = 3; }),
       "kvCache.blockTableStride is 3"},
      {"seqlen_k not pages x page size", paged([](AttentionArgs &a) { a.seqlenK = 100; }),
       "maxPagesPerSeq x pageSize = 256"},
      {"batch index on a paged cache",
       paged([](AttentionArgs &a) { a.kvCache.cacheBatchIdx = fake<const int>(0xb0000); }),
       "kvCache.cacheBatchIdx is set on a paged cache"},
      {"host block table out of range", paged([](AttentionArgs &a) { a.kvCache.blockTableHost = badTable; }),
       "kvCache.blockTable[2][2] = 16; accepted: a page index from 0 to numPages - 1 = 15"},
      {"host seqlens within the capacity", paged([](AttentionArgs &a) { a.kvCache.cacheSeqlensHost = seqlensOk; }), ""},
      {"unused block-table entries are not checked", paged([](AttentionArgs &a) {
         a.kvCache.blockTableHost = badTable;
         a.kvCache.cacheSeqlensHost = shortSeqlens;
       }),
       ""},
  };
}

TEST(KvCache, RejectionsNameTheArgumentAndTheAcceptedValues) {
  for (const Rejection &r : rejections()) {
    SCOPED_TRACE(r.name);
    Status s = Runtime::validate(r.make());
    if (r.expected.empty()) {
      EXPECT_TRUE(s.ok()) << s.message();
      continue;
    }
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(r.expected));
  }
}

} // namespace
