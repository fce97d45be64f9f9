// Fp8ArgsTest.cpp — e4m3 calls: what Runtime::validate accepts, and each refusal naming the argument and what is
// accepted (descales without e4m3, unaligned descales, e4m3 strides, e4m3 KV caches, the backward, a launch).
// Pointers are fake (never dereferenced): validation must not touch the GPU.
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <cstdlib>

using namespace flashtile;
using testing::HasSubstr;

namespace {

template <typename T = void> T *fake(uintptr_t address) { return reinterpret_cast<T *>(address); }

AttentionArgs e4m3Args() {
  AttentionArgs args = AttentionArgs::contiguous(DType::E4M3, fake(0x10000), fake(0x20000), fake(0x30000),
                                                 fake(0x40000), fake<float>(0x50000), /*batch=*/2, /*seqlenQ=*/128,
                                                 /*seqlenK=*/256, /*headsQ=*/8, /*headsKv=*/2, /*headDim=*/128);
  args.qDescale = fake<const float>(0x60000);
  args.kDescale = fake<const float>(0x60010);
  args.vDescale = fake<const float>(0x60020);
  return args;
}

TEST(Fp8Args, DtypeNamesBytesAndOutput) {
  EXPECT_EQ(dtypeName(DType::E4M3), "e4m3");
  EXPECT_EQ(dtypeBytes(DType::E4M3), 1);
  EXPECT_EQ(dtypeBytes(DType::BF16), 2);
  EXPECT_EQ(outputDtype(DType::E4M3), DType::BF16);
  EXPECT_EQ(outputDtype(DType::F16), DType::F16);
}

TEST(Fp8Args, AcceptsE4m3WithOrWithoutDescales) {
  AttentionArgs args = e4m3Args();
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
  args.qDescale = args.kDescale = args.vDescale = nullptr;
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
}

TEST(Fp8Args, RefusesByName) {
  struct Case {
    std::string name;
    std::function<void(AttentionArgs &)> mutate;
    std::string message;
  };
  std::vector<Case> cases = {
      {"descales of a bf16 call", [](AttentionArgs &a) { a.dtype = DType::BF16; },
       "qDescale is set but dtype is bf16; descales apply to e4m3 tensors only"},
      {"unaligned descale", [](AttentionArgs &a) { a.vDescale = fake<const float>(0x60022); },
       "vDescale is not 4-byte aligned"},
      {"a stride of 8 e4m3 elements", [](AttentionArgs &a) { a.kStride[2] = 136; },
       "kStride[2] is 136; with dtype e4m3 the batch, seq and head strides of q, k and v must be multiples of 16"},
      {"a KV cache", [](AttentionArgs &a) { a.kvCache.layout = KvCacheLayout::Contiguous; },
       "dtype e4m3 (an e4m3 q) with a KV cache is not built: a KV-cache call takes q in bf16 or f16 (dtype BF16, "
       "F16), with a cache of that dtype or of e4m3"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    AttentionArgs args = e4m3Args();
    c.mutate(args);
    Status s = Runtime::validate(args);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(Fp8Args, RefusesTheBackward) {
  BackwardArgs args;
  args.forward = e4m3Args();
  args.dO = fake(0x70000);
  args.dQ = fake(0x80000);
  args.dK = fake(0x90000);
  args.dV = fake(0xa0000);
  args.dOStride = args.forward.oStride;
  args.dQStride = args.forward.qStride;
  args.dKStride = args.forward.kStride;
  args.dVStride = args.forward.vStride;
  Status s = Runtime::validateBackward(args);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("forward.dtype is e4m3: FP8 calls have no backward (as flash-attn 3's FP8 "
                                     "forward)"));
}

TEST(Fp8Args, PairsE4m3CallsWithE4m3Kernels) {
  // e4m3 kernels take FlashtileFp8Params (Fp8Abi.h) last: an e4m3 call runs one, and no other call does.
  KernelInfo kernel;
  kernel.entry = "flashtile_fa3_none_e4m3";
  kernel.dtype = "e4m3";
  EXPECT_TRUE(Runtime::validateFor(e4m3Args(), kernel).ok());
  AttentionArgs bf16 = e4m3Args();
  bf16.dtype = DType::BF16;
  Status s = Runtime::validateFor(bf16, kernel);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kernel 'flashtile_fa3_none_e4m3' is an e4m3 kernel and the call's dtype is bf16"));
  kernel.dtype = "bf16";
  kernel.entry = "flashtile_fa3_none_bf16";
  s = Runtime::validateFor(e4m3Args(), kernel);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("kernel 'flashtile_fa3_none_bf16' is a bf16 kernel and the call's dtype is e4m3"));
}

} // namespace
