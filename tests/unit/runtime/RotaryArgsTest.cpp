// RotaryArgsTest.cpp — rotary embedding in KV-cache calls (KvCacheArgs::rotaryDim, flash_attn_with_kvcache's
// rotary_cos/rotary_sin) without a GPU: the checks name each argument, rotary calls ask for rotary kernels (and other
// calls for kernels without the rotation), the kernel parameters carry the tables, and kernel metadata records the
// pairs. Pointers are fake (never dereferenced).
#include "TestUtil.h"

#include "runtime/lib/KvCacheInternal.h"

#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/KvCache.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <functional>
#include <string>
#include <vector>

using namespace flashtile;
using testing::HasSubstr;

namespace {

template <class T = void> T *fake(uintptr_t address) { return reinterpret_cast<T *>(address); }

constexpr int kBatch = 2, kCacheSeqlen = 512, kHeadDim = 128, kSeqlenNew = 2;

/// A contiguous cache call that appends two keys and rotates 64 columns with 512-row tables.
AttentionArgs rotaryArgs() {
  AttentionArgs args = AttentionArgs::contiguousCache(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                      fake(0x40000), fake<float>(0x50000), kBatch,
                                                      /*seqlenQ=*/kSeqlenNew, /*cacheBatch=*/kBatch, kCacheSeqlen,
                                                      /*headsQ=*/16, /*headsKv=*/4, kHeadDim, fake<const int>(0x60000));
  args.kvCache.append(fake(0x80000), fake(0x90000), kSeqlenNew, 4, kHeadDim);
  args.kvCache.rotary(fake(0xa0000), fake(0xb0000), /*seqlenRo=*/kCacheSeqlen, /*rotaryDim=*/64);
  return args;
}

TEST(RotaryArgs, ACallWithTablesIsValid) {
  AttentionArgs args = rotaryArgs();
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
  args.kvCache.rotaryDim = kHeadDim; // the whole head, interleaved
  args.kvCache.rotaryInterleaved = true;
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
  args.kvCache.rotaryDim = 2;
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
}

TEST(RotaryArgs, RotaryCallsAskForRotaryKernels) {
  Runtime rt;
  rt.setDispatchRules(test::dispatchRules());
  AttentionArgs args = rotaryArgs();
  StatusOr<KernelSpec> spec = rt.specFor(args, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->rotary, kRotaryHalves);
  EXPECT_THAT(spec->key(), HasSubstr(";kvCache=1;rotary=halves"));
  args.kvCache.rotaryInterleaved = true;
  spec = rt.specFor(args, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->rotary, kRotaryInterleaved);
  EXPECT_THAT(spec->key(), HasSubstr(";rotary=interleaved"));
  // A cache call without tables asks for a kernel without the rotation.
  AttentionArgs plain = rotaryArgs();
  plain.kvCache.rotary(nullptr, nullptr, 0, 0);
  spec = rt.specFor(plain, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_TRUE(spec->rotary.empty());
  EXPECT_THAT(spec->key(), testing::Not(HasSubstr("rotary")));
}

TEST(RotaryArgs, ParamsCarryTheTables) {
  AttentionArgs args = rotaryArgs();
  FlashtileFwdParams params{};
  detail::fillKvCacheParams(args, params);
  EXPECT_EQ(params.rotaryCos, fake(0xa0000));
  EXPECT_EQ(params.rotarySin, fake(0xb0000));
  EXPECT_EQ(params.rotaryDim, 64);
  EXPECT_EQ(params.seqlenRo, kCacheSeqlen);
}

TEST(RotaryArgs, KernelMetadataRecordsThePairs) {
  KernelInfo info = test::splitKvKernel("flashtile_decode_causal_bf16_d128_kvcache_rotary", false, true);
  info.rotary = std::string(kRotaryHalves);
  ASSERT_TRUE(info.verify().ok()) << info.verify().message();
  StatusOr<KernelInfo> parsed = KernelInfo::parse(info.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->rotary, kRotaryHalves);
  KernelSpec spec = parsed->spec();
  EXPECT_EQ(spec.rotary, kRotaryHalves);
  EXPECT_TRUE(matches(*parsed, spec));
  spec.rotary = std::string(kRotaryInterleaved);
  EXPECT_FALSE(matches(*parsed, spec)) << "a kernel rotates only the pairs it was built for";
  spec.rotary.clear();
  EXPECT_FALSE(matches(*parsed, spec)) << "calls without rotation never run a rotating kernel";

  info.rotary = "sideways";
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'rotary': 'sideways' is not halves or interleaved"));
  info.rotary = std::string(kRotaryHalves);
  info.kvCache = false;
  EXPECT_THAT(info.verify().message(), HasSubstr("on a KV-cache kernel (kvCache=1)"));
}

struct Rejection {
  const char *name;
  std::function<void(AttentionArgs &)> change;
  std::string expected;
};

TEST(RotaryArgs, RejectionsNameTheArgumentAndTheAcceptedValues) {
  static const int shortHost[kBatch] = {400, 510}; // 510 + 2 new rows reach position 511: the tables need 512
  const std::vector<Rejection> rejections = {
      {"odd", [](AttentionArgs &a) { a.kvCache.rotaryDim = 63; },
       "kvCache.rotaryDim is 63; accepted: 0 (no rotary embedding) or an even number from 2 to headDim = 128"},
      {"wider than the head", [](AttentionArgs &a) { a.kvCache.rotaryDim = 130; }, "kvCache.rotaryDim is 130"},
      {"negative", [](AttentionArgs &a) { a.kvCache.rotaryDim = -2; }, "kvCache.rotaryDim is -2"},
      {"no cos", [](AttentionArgs &a) { a.kvCache.rotaryCos = nullptr; },
       "kvCache.rotaryCos is null but rotaryDim is 64; pass the device table (seqlenRo x rotaryDim / 2"},
      {"no sin", [](AttentionArgs &a) { a.kvCache.rotarySin = nullptr; }, "kvCache.rotarySin is null"},
      {"misaligned", [](AttentionArgs &a) { a.kvCache.rotaryCos = fake(0xa0001); },
       "kvCache.rotaryCos is not 2-byte aligned"},
      {"no new keys",
       [](AttentionArgs &a) {
         a.kvCache.kNew = a.kvCache.vNew = nullptr;
         a.kvCache.seqlenNew = 0;
       },
       "kvCache.rotaryDim is 64 but kNew/vNew are null; rotary embedding rotates Q and the keys a call appends"},
      {"empty tables", [](AttentionArgs &a) { a.kvCache.seqlenRo = 0; },
       "kvCache.seqlenRo is 0; the rotary tables have at least one row"},
      {"tables shorter than the cache", [](AttentionArgs &a) { a.kvCache.seqlenRo = kCacheSeqlen - 1; },
       "kvCache.seqlenRo is 511 but the cache holds seqlenK = 512 keys; without cacheSeqlensHost"},
      {"tables shorter than a sequence's positions",
       [](AttentionArgs &a) {
         a.kvCache.cacheSeqlensHost = shortHost;
         a.kvCache.seqlenRo = 511;
       },
       "kvCache.seqlenRo is 511 but sequence 1 rotates rows at positions up to cacheSeqlens[1] + max(seqlenNew, "
       "seqlenQ) - 1 = 511"},
      {"host copies: tables just long enough",
       [](AttentionArgs &a) {
         a.kvCache.cacheSeqlensHost = shortHost;
         a.kvCache.seqlenRo = 512;
       },
       ""},
      {"more query rows than new keys reach further",
       [](AttentionArgs &a) {
         static const int host[kBatch] = {0, 500};
         a.kvCache.cacheSeqlensHost = host;
         a.seqlenQ = 20;
         a.kvCache.seqlenRo = 519;
       },
       "cacheSeqlens[1] + max(seqlenNew, seqlenQ) - 1 = 519"},
      {"tables without rotaryDim", [](AttentionArgs &a) { a.kvCache.rotaryDim = 0; },
       "kvCache.rotaryCos, rotarySin, seqlenRo or rotaryInterleaved is set but rotaryDim is 0"},
      {"rotary without a cache",
       [](AttentionArgs &a) {
         AttentionArgs plain = AttentionArgs::contiguous(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                         fake(0x40000), fake<float>(0x50000), 1, 1, 64, 8, 8, 128);
         plain.kvCache.rotaryDim = 64;
         a = plain;
       },
       "kvCache has fields set but kvCache.layout is None"},
  };
  for (const Rejection &r : rejections) {
    SCOPED_TRACE(r.name);
    AttentionArgs args = rotaryArgs();
    r.change(args);
    Status s = Runtime::validate(args);
    if (r.expected.empty()) {
      EXPECT_TRUE(s.ok()) << s.message();
      continue;
    }
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(r.expected));
  }
}

} // namespace
