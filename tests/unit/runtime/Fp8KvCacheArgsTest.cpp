// Fp8KvCacheArgsTest.cpp — calls over an e4m3 KV cache (KvCacheArgs::dtype E4M3, docs/fp8.md): what
// Runtime::validate accepts, each refusal naming the argument and what is accepted, the kernel spec such calls ask for
// (;kvDtype=e4m3) and the pairing of calls and kernels (a kernel that reads an e4m3 cache takes FP8 parameters), and
// KernelInfo's kvDtype field. Pointers are fake (never dereferenced): validation must not touch the GPU.
#include "TestUtil.h"

#include "flashtile/runtime/KvCache.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <cstdlib>
#include <functional>

using namespace flashtile;
using testing::HasSubstr;

namespace {

template <typename T = void> T *fake(uintptr_t address) { return reinterpret_cast<T *>(address); }

/// A decode step over a paged e4m3 cache (pages of 64 keys), bf16 q, one appended key, both descales.
AttentionArgs e4m3CacheArgs() {
  AttentionArgs args = AttentionArgs::pagedCache(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                 fake(0x40000), fake<float>(0x50000), /*batch=*/2, /*seqlenQ=*/1,
                                                 /*numPages=*/64, /*pageSize=*/64, fake<const int>(0x60000),
                                                 /*maxPagesPerSeq=*/16, /*headsQ=*/32, /*headsKv=*/8,
                                                 /*headDim=*/128, fake<const int>(0x70000));
  args.kvCache.dtype = KvCacheDtype::E4M3;
  args.kvCache.append(fake(0x80000), fake(0x90000), /*seqlen=*/1, /*headsKv=*/8, /*headDim=*/128);
  args.kDescale = fake<const float>(0xa0000);
  args.vDescale = fake<const float>(0xa0040);
  args.variant = "causal";
  return args;
}

TEST(Fp8KvCacheArgs, AcceptsAnE4m3CacheUnderA16BitQWithOrWithoutDescales) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    AttentionArgs args = e4m3CacheArgs();
    args.dtype = dtype;
    EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
    args.kDescale = args.vDescale = nullptr;
    EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
  }
  // Contiguous caches too.
  AttentionArgs contiguous = AttentionArgs::contiguousCache(
      DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000), fake(0x40000), fake<float>(0x50000), /*batch=*/2,
      /*seqlenQ=*/1, /*cacheBatch=*/2, /*cacheSeqlen=*/4096, /*headsQ=*/32, /*headsKv=*/8, /*headDim=*/128,
      fake<const int>(0x70000));
  contiguous.kvCache.dtype = KvCacheDtype::E4M3;
  contiguous.kDescale = fake<const float>(0xa0000);
  EXPECT_TRUE(Runtime::validate(contiguous).ok()) << Runtime::validate(contiguous).message();
}

TEST(Fp8KvCacheArgs, RefusesByName) {
  struct Case {
    std::string name;
    std::function<void(AttentionArgs &)> mutate;
    std::string message;
  };
  std::vector<Case> cases = {
      {"an e4m3 q", [](AttentionArgs &a) { a.dtype = DType::E4M3; },
       "dtype e4m3 (an e4m3 q) with a KV cache is not built: a KV-cache call takes q in bf16 or f16"},
      {"q_descale", [](AttentionArgs &a) { a.qDescale = fake<const float>(0xa0080); },
       "qDescale is set but q is bf16; over an e4m3 KV cache only kDescale and vDescale apply"},
      {"an unaligned descale", [](AttentionArgs &a) { a.kDescale = fake<const float>(0xa0002); },
       "kDescale is not 4-byte aligned"},
      {"a row stride of 8 e4m3 elements", [](AttentionArgs &a) { a.kStride[1] = 1032; },
       "kStride[1] is 1032; an e4m3 KV cache's page (batch), row and head strides must be multiples of 16 elements"},
      {"a head stride of 8 e4m3 elements", [](AttentionArgs &a) { a.vStride[2] = 136; },
       "vStride[2] is 136; an e4m3 KV cache's page (batch), row and head strides must be multiples of 16"},
      {"descales with a 16-bit cache", [](AttentionArgs &a) { a.kvCache.dtype = KvCacheDtype::Query; },
       "kDescale is set but dtype is bf16; descales apply to e4m3 tensors only"},
      {"a cache dtype out of the enum",
       [](AttentionArgs &a) {
         a.kvCache.dtype = static_cast<KvCacheDtype>(7);
         a.kDescale = a.vDescale = nullptr;
       },
       "kvCache.dtype has value 7; accepted: KvCacheDtype::Query (the call's dtype), KvCacheDtype::E4M3"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    AttentionArgs args = e4m3CacheArgs();
    c.mutate(args);
    Status s = Runtime::validate(args);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // The cache dtype without a cache.
  AttentionArgs plain = AttentionArgs::contiguous(DType::BF16, fake(0x10000), fake(0x20000), fake(0x30000),
                                                  fake(0x40000), fake<float>(0x50000), 2, 1, 256, 8, 2, 128);
  plain.kvCache.dtype = KvCacheDtype::E4M3;
  Status s = Runtime::validate(plain);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kvCache has fields set but kvCache.layout is None"));
}

TEST(Fp8KvCacheArgs, AsksForE4m3CacheKernelsAndPairsThem) {
  AttentionArgs args = e4m3CacheArgs();
  Runtime rt;
  rt.setDispatchRules(test::dispatchRules());
  StatusOr<KernelSpec> found = rt.specFor(args, "sm_90a");
  ASSERT_TRUE(found.ok()) << found.status().message();
  const KernelSpec spec = *found;
  EXPECT_EQ(spec.kvDtype, "e4m3");
  EXPECT_TRUE(spec.kvCache);
  EXPECT_EQ(spec.dtype, "bf16");
  EXPECT_THAT(spec.key(), HasSubstr(";kvCache=1;kvDtype=e4m3"));
  args.kvCache.dtype = KvCacheDtype::Query;
  args.kDescale = args.vDescale = nullptr;
  found = rt.specFor(args, "sm_90a");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(found->kvDtype, "");
  EXPECT_EQ(found->key().find("kvDtype"), std::string::npos);

  KernelInfo kernel;
  kernel.entry = "flashtile_decode_causal_bf16_d128_kvcache_e4m3";
  kernel.dtype = "bf16";
  kernel.kvCache = true;
  kernel.kvDtype = "e4m3";
  EXPECT_TRUE(Runtime::validateFor(e4m3CacheArgs(), kernel).ok())
      << Runtime::validateFor(e4m3CacheArgs(), kernel).message();
  Status s = Runtime::validateFor(args, kernel); // a bf16 cache on the e4m3 cache's kernel
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kernel 'flashtile_decode_causal_bf16_d128_kvcache_e4m3' reads an e4m3 KV cache "
                                     "and the call's cache is bf16"));
  kernel.kvDtype = "";
  kernel.entry = "flashtile_decode_causal_bf16_d128_kvcache";
  s = Runtime::validateFor(e4m3CacheArgs(), kernel);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("reads K/V of its dtype bf16 and the call's cache is e4m3"));
}

TEST(Fp8KvCacheArgs, KernelInfoCarriesTheCacheDtype) {
  KernelInfo info;
  info.kvCache = true;
  info.kvDtype = "e4m3";
  info.dtype = "bf16";
  EXPECT_NE(info.serialize().find("\nkvDtype=e4m3\n"), std::string::npos);
  EXPECT_EQ(info.spec().kvDtype, "e4m3");
  KernelSpec spec = info.spec();
  EXPECT_TRUE(matches(info, spec));
  spec.kvDtype = "";
  EXPECT_FALSE(matches(info, spec)) << "a bf16 cache's call never runs the e4m3 cache's kernel";
  // Without the field, the text form is unchanged.
  info.kvDtype = "";
  EXPECT_EQ(info.serialize().find("kvDtype"), std::string::npos);
}

} // namespace
