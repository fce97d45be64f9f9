// AttentionArgsTest.cpp — every rejection of Runtime::validate names the argument and what is accepted.
// Pointers are fake (never dereferenced): validation must not touch the GPU.
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <cmath>
#include <functional>
#include <limits>

using namespace flashtile;
using testing::HasSubstr;

namespace {

const void *fakePointer(uintptr_t address) { return reinterpret_cast<const void *>(address); }

AttentionArgs validArgs() {
  return AttentionArgs::contiguous(DType::BF16, fakePointer(0x10000), fakePointer(0x20000), fakePointer(0x30000),
                                   const_cast<void *>(fakePointer(0x40000)), reinterpret_cast<float *>(0x50000),
                                   /*batch=*/2, /*seqlenQ=*/128,
                                   /*seqlenK=*/256, /*headsQ=*/8, /*headsKv=*/2, /*headDim=*/128);
}

TEST(AttentionArgs, ContiguousFillsPackedStrides) {
  AttentionArgs args = validArgs();
  EXPECT_EQ(args.qStride, (std::array<long long, 4>{128 * 8 * 128, 8 * 128, 128, 1}));
  EXPECT_EQ(args.kStride, (std::array<long long, 4>{256 * 2 * 128, 2 * 128, 128, 1}));
  EXPECT_EQ(args.vStride, args.kStride);
  EXPECT_EQ(args.oStride, args.qStride);
  EXPECT_EQ(args.headDimV, 128);
  EXPECT_EQ(args.variant, "none");
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
}

TEST(AttentionArgs, AcceptsEdgeCases) {
  std::vector<std::pair<std::string, std::function<void(AttentionArgs &)>>> cases = {
      {"empty query", [](AttentionArgs &a) { a.seqlenQ = 0; }},
      {"empty keys", [](AttentionArgs &a) { a.seqlenK = 0; }},
      {"head dim 64", [](AttentionArgs &a) { a.headDim = a.headDimV = 64; }},
      {"fp16", [](AttentionArgs &a) { a.dtype = DType::F16; }},
      {"zero (broadcast) stride", [](AttentionArgs &a) { a.kStride[0] = 0; }},
      {"negative scale", [](AttentionArgs &a) { a.softmaxScale = -0.5f; }},
      {"max params", [](AttentionArgs &a) { a.variantParams.assign(FLASHTILE_MAX_VARIANT_PARAMS, 1.f); }},
      {"jit variant id", [](AttentionArgs &a) { a.variant = "softcap#3f2a9c01"; }},
      {"4-byte aligned lse", [](AttentionArgs &a) { a.lse = reinterpret_cast<float *>(0x50004); }},
  };
  for (auto &[name, mutate] : cases) {
    SCOPED_TRACE(name);
    AttentionArgs args = validArgs();
    mutate(args);
    Status status = Runtime::validate(args);
    EXPECT_TRUE(status.ok()) << status.message();
  }
}

struct Rejection {
  std::string name;
  std::function<void(AttentionArgs &)> mutate;
  std::vector<std::string> expected; // substrings of the message: the argument and what is accepted
};

TEST(AttentionArgs, RejectsBadArgumentsNamingThem) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Rejection> cases = {
      {"null q", [](AttentionArgs &a) { a.q = nullptr; }, {"q is null", "device pointers"}},
      {"null k", [](AttentionArgs &a) { a.k = nullptr; }, {"k is null"}},
      {"null v", [](AttentionArgs &a) { a.v = nullptr; }, {"v is null"}},
      {"null o", [](AttentionArgs &a) { a.o = nullptr; }, {"o is null"}},
      {"null lse", [](AttentionArgs &a) { a.lse = nullptr; }, {"lse is null"}},
      {"dtype", [](AttentionArgs &a) { a.dtype = static_cast<DType>(7); }, {"dtype", "DType::F16, DType::BF16"}},
      {"headDim", [](AttentionArgs &a) { a.headDim = a.headDimV = 96; }, {"headDim 96", "supported: 64, 128"}},
      {"headDimV", [](AttentionArgs &a) { a.headDimV = 64; }, {"headDimV is 64", "must equal headDim (128)"}},
      {"batch", [](AttentionArgs &a) { a.batch = 0; }, {"batch is 0", ">= 1"}},
      {"seqlenQ", [](AttentionArgs &a) { a.seqlenQ = -1; }, {"seqlenQ is -1", ">= 0"}},
      {"seqlenK", [](AttentionArgs &a) { a.seqlenK = -5; }, {"seqlenK is -5", ">= 0"}},
      {"headsQ", [](AttentionArgs &a) { a.headsQ = 0; }, {"headsQ is 0", ">= 1"}},
      {"headsKv", [](AttentionArgs &a) { a.headsKv = 0; }, {"headsKv is 0", ">= 1"}},
      {"gqa ratio",
       [](AttentionArgs &a) {
         a.headsQ = 6;
         a.headsKv = 4;
       },
       {"headsQ (6) must be a multiple of headsKv (4)"}},
      {"batch grid limit", [](AttentionArgs &a) { a.batch = 70000; }, {"batch is 70000", "at most 65535"}},
      {"headsQ grid limit", [](AttentionArgs &a) { a.headsQ = 70000; }, {"headsQ is 70000", "at most 65535"}},
      {"q dim stride", [](AttentionArgs &a) { a.qStride[3] = 2; }, {"qStride[3]", "dim stride", "stride 1"}},
      {"k seq stride",
       [](AttentionArgs &a) { a.kStride[1] = 12; },
       {"kStride[1] (seq stride) is 12", "non-negative multiples of 8"}},
      {"v batch stride", [](AttentionArgs &a) { a.vStride[0] = -8; }, {"vStride[0] (batch stride) is -8"}},
      {"o head stride", [](AttentionArgs &a) { a.oStride[2] = 4; }, {"oStride[2] (head stride) is 4"}},
      {"k dim stride", [](AttentionArgs &a) { a.kStride[3] = 0; }, {"kStride[3]"}},
      {"q alignment", [](AttentionArgs &a) { a.q = fakePointer(0x10008); }, {"q (", "16-byte aligned"}},
      {"k alignment", [](AttentionArgs &a) { a.k = fakePointer(0x20002); }, {"k (", "16-byte aligned"}},
      {"v alignment", [](AttentionArgs &a) { a.v = fakePointer(0x30001); }, {"v (", "16-byte aligned"}},
      {"o alignment",
       [](AttentionArgs &a) { a.o = const_cast<void *>(fakePointer(0x4000c)); },
       {"o (", "16-byte aligned"}},
      {"lse alignment",
       [](AttentionArgs &a) { a.lse = reinterpret_cast<float *>(0x50002); },
       {"lse (", "4-byte aligned"}},
      {"nan scale", [=](AttentionArgs &a) { a.softmaxScale = nan; }, {"softmaxScale", "finite"}},
      {"inf scale", [=](AttentionArgs &a) { a.softmaxScale = inf; }, {"softmaxScale", "finite"}},
      {"too many params",
       [](AttentionArgs &a) { a.variantParams.assign(FLASHTILE_MAX_VARIANT_PARAMS + 1, 0.f); },
       {"variantParams has 9 values", "at most 8"}},
      {"empty variant", [](AttentionArgs &a) { a.variant = ""; }, {"variant ''", "\"causal\""}},
      {"variant with spaces", [](AttentionArgs &a) { a.variant = "sliding window"; }, {"variant 'sliding window'"}},
  };
  for (const Rejection &c : cases) {
    SCOPED_TRACE(c.name);
    AttentionArgs args = validArgs();
    c.mutate(args);
    Status status = Runtime::validate(args);
    ASSERT_FALSE(status.ok());
    for (const std::string &expected : c.expected)
      EXPECT_THAT(status.message(), HasSubstr(expected));
  }
}

TEST(AttentionArgs, DtypeNames) {
  EXPECT_EQ(dtypeName(DType::F16), "f16");
  EXPECT_EQ(dtypeName(DType::BF16), "bf16");
}

} // namespace
