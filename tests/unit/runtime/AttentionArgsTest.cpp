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
      {"head dim 32", [](AttentionArgs &a) { a.headDim = a.headDimV = 32; }},
      {"head dim 96", [](AttentionArgs &a) { a.headDim = a.headDimV = 96; }},
      {"head dim 192", [](AttentionArgs &a) { a.headDim = a.headDimV = 192; }},
      {"head dim 256", [](AttentionArgs &a) { a.headDim = a.headDimV = 256; }},
      {"head dims 192/128",
       [](AttentionArgs &a) {
         a.headDim = 192;
         a.headDimV = 128;
       }},
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
      {"dtype", [](AttentionArgs &a) { a.dtype = static_cast<DType>(7); }, {"dtype", "DType::F16, DType::BF16, DType::E4M3"}},
      {"headDim",
       [](AttentionArgs &a) { a.headDim = a.headDimV = 48; },
       {"headDim 48 is not supported", "supported: 32, 64, 96, 128, 192, 256 (headDimV = headDim), or 192/128"}},
      {"headDimV",
       [](AttentionArgs &a) { a.headDimV = 64; },
       {"headDimV 64 with headDim 128 is not supported", "or 192/128 (headDim/headDimV)"}},
      {"headDimV of a pair the other way round",
       [](AttentionArgs &a) {
         a.headDim = 128;
         a.headDimV = 192;
       },
       {"headDimV 192 with headDim 128"}},
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

TEST(AttentionArgs, ContiguousPacksVAndOWithHeadDimV) {
  AttentionArgs args = AttentionArgs::contiguous(DType::BF16, fakePointer(0x10000), fakePointer(0x20000),
                                                 fakePointer(0x30000), const_cast<void *>(fakePointer(0x40000)),
                                                 reinterpret_cast<float *>(0x50000), 2, 128, 256, 8, 2, 192, 128);
  EXPECT_EQ(args.headDim, 192);
  EXPECT_EQ(args.headDimV, 128);
  EXPECT_EQ(args.kStride, (std::array<long long, 4>{256 * 2 * 192, 2 * 192, 192, 1}));
  EXPECT_EQ(args.vStride, (std::array<long long, 4>{256 * 2 * 128, 2 * 128, 128, 1}));
  EXPECT_EQ(args.oStride, (std::array<long long, 4>{128 * 8 * 128, 8 * 128, 128, 1}));
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
}

TEST(AttentionArgs, SupportedHeadDims) {
  for (int d : kSupportedHeadDims)
    EXPECT_TRUE(supportsHeadDims(d, d)) << d;
  EXPECT_TRUE(supportsHeadDims(192, 128));
  EXPECT_FALSE(supportsHeadDims(128, 192));
  EXPECT_FALSE(supportsHeadDims(16, 16));
  EXPECT_FALSE(supportsHeadDims(512, 512));
}

//===----------------------------------------------------------------------===//
// Varlen (flash_attn_varlen_func)
//===----------------------------------------------------------------------===//

/// Three sequences: query lengths 5, 0 and 27 (total 32), key lengths 40, 7 and 0 (total 47).
constexpr int kVarlenBatch = 3;
const int kOffsetsQ[kVarlenBatch + 1] = {0, 5, 5, 32};
const int kOffsetsK[kVarlenBatch + 1] = {0, 40, 47, 47};

AttentionArgs validVarlenArgs() {
  AttentionArgs args = AttentionArgs::varlen(
      DType::BF16, fakePointer(0x10000), fakePointer(0x20000), fakePointer(0x30000),
      const_cast<void *>(fakePointer(0x40000)), reinterpret_cast<float *>(0x50000),
      reinterpret_cast<const int *>(0x60000), reinterpret_cast<const int *>(0x70000), kVarlenBatch, /*totalQ=*/32,
      /*totalK=*/47, /*maxSeqlenQ=*/27, /*maxSeqlenK=*/40, /*headsQ=*/8, /*headsKv=*/2, /*headDim=*/128);
  args.cuSeqlensQHost = kOffsetsQ;
  args.cuSeqlensKHost = kOffsetsK;
  return args;
}

TEST(AttentionArgs, VarlenPacksSequences) {
  AttentionArgs args = validVarlenArgs();
  EXPECT_TRUE(args.isVarlen());
  EXPECT_FALSE(validArgs().isVarlen());
  EXPECT_EQ(args.batch, kVarlenBatch);
  EXPECT_EQ(args.seqlenQ, 32);
  EXPECT_EQ(args.seqlenK, 47);
  EXPECT_EQ(args.maxSeqlenQ, 27);
  EXPECT_EQ(args.maxSeqlenK, 40);
  EXPECT_EQ(args.qStride, (std::array<long long, 4>{0, 8 * 128, 128, 1}));
  EXPECT_EQ(args.kStride, (std::array<long long, 4>{0, 2 * 128, 128, 1}));
  EXPECT_EQ(args.vStride, args.kStride);
  EXPECT_EQ(args.oStride, args.qStride);
  Status status = Runtime::validate(args);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(AttentionArgs, VarlenAcceptsEdgeCases) {
  static const int emptyQ[] = {0, 0, 0, 0}, onlyKeys[] = {0, 10, 20, 47};
  std::vector<std::pair<std::string, std::function<void(AttentionArgs &)>>> cases = {
      {"no host copies (the device offsets are not checked)",
       [](AttentionArgs &a) { a.cuSeqlensQHost = a.cuSeqlensKHost = nullptr; }},
      {"only the query offsets copied", [](AttentionArgs &a) { a.cuSeqlensKHost = nullptr; }},
      {"batch stride ignored", [](AttentionArgs &a) { a.qStride[0] = 3; }},
      {"every query sequence empty",
       [](AttentionArgs &a) {
         a.seqlenQ = a.maxSeqlenQ = 0;
         a.cuSeqlensQHost = emptyQ;
       }},
      {"keys shorter than the packed rows", [](AttentionArgs &a) { a.cuSeqlensKHost = onlyKeys; }},
      {"max seqlens larger than any sequence", [](AttentionArgs &a) { a.maxSeqlenQ = a.maxSeqlenK = 4096; }},
      {"head dims 192/128",
       [](AttentionArgs &a) {
         a.headDim = 192;
         a.headDimV = 128;
       }},
  };
  for (auto &[name, mutate] : cases) {
    SCOPED_TRACE(name);
    AttentionArgs args = validVarlenArgs();
    mutate(args);
    Status status = Runtime::validate(args);
    EXPECT_TRUE(status.ok()) << status.message();
  }
}

TEST(AttentionArgs, VarlenRejectsBadArgumentsNamingThem) {
  static const int decreasingQ[] = {0, 5, 4, 32}, negativeQ[] = {-1, 5, 5, 32}, pastTotalK[] = {0, 40, 47, 48},
                   tooLongQ[] = {0, 30, 30, 32};
  const std::vector<Rejection> cases = {
      {"only cuSeqlensQ",
       [](AttentionArgs &a) { a.cuSeqlensK = nullptr; },
       {"cuSeqlensK is null but cuSeqlensQ is set", "needs both cuSeqlensQ and cuSeqlensK"}},
      {"only cuSeqlensK",
       [](AttentionArgs &a) { a.cuSeqlensQ = nullptr; },
       {"cuSeqlensQ is null but cuSeqlensK is set"}},
      {"misaligned cuSeqlensQ",
       [](AttentionArgs &a) { a.cuSeqlensQ = reinterpret_cast<const int *>(0x60002); },
       {"cuSeqlensQ (", "4-byte aligned"}},
      {"misaligned cuSeqlensK",
       [](AttentionArgs &a) { a.cuSeqlensK = reinterpret_cast<const int *>(0x70001); },
       {"cuSeqlensK (", "4-byte aligned"}},
      {"negative maxSeqlenQ", [](AttentionArgs &a) { a.maxSeqlenQ = -1; }, {"maxSeqlenQ is -1", ">= 0"}},
      {"negative maxSeqlenK", [](AttentionArgs &a) { a.maxSeqlenK = -3; }, {"maxSeqlenK is -3", ">= 0"}},
      {"batch 0", [](AttentionArgs &a) { a.batch = 0; }, {"batch is 0", ">= 1"}},
      {"heads not dividing", [](AttentionArgs &a) { a.headsKv = 3; }, {"headsQ (8) must be a multiple of headsKv (3)"}},
      {"unsupported head dim",
       [](AttentionArgs &a) { a.headDim = a.headDimV = 80; },
       {"headDim 80", "32, 64, 96, 128, 192, 256"}},
      {"decreasing cuSeqlensQ",
       [](AttentionArgs &a) { a.cuSeqlensQHost = decreasingQ; },
       {"cuSeqlensQ is not non-decreasing", "cuSeqlensQ[2] = 4 < cuSeqlensQ[1] = 5"}},
      {"negative offset", [](AttentionArgs &a) { a.cuSeqlensQHost = negativeQ; }, {"cuSeqlensQ[0] = -1"}},
      {"offsets past the packed rows",
       [](AttentionArgs &a) { a.cuSeqlensKHost = pastTotalK; },
       {"cuSeqlensK[3] = 48 is past the packed rows", "seqlenK (the total) is 47"}},
      {"sequence longer than maxSeqlenQ",
       [](AttentionArgs &a) { a.cuSeqlensQHost = tooLongQ; },
       {"cuSeqlensQ: sequence 0 has 30 rows, more than maxSeqlenQ = 27"}},
      {"host copies of a dense call",
       [](AttentionArgs &a) { a.cuSeqlensQ = a.cuSeqlensK = nullptr; },
       {"cuSeqlensQHost/cuSeqlensKHost are set but cuSeqlensQ and cuSeqlensK"}},
      {"q seq stride", [](AttentionArgs &a) { a.qStride[1] = 12; }, {"qStride[1] (seq stride) is 12"}},
  };
  for (const Rejection &c : cases) {
    SCOPED_TRACE(c.name);
    AttentionArgs args = validVarlenArgs();
    c.mutate(args);
    Status status = Runtime::validate(args);
    ASSERT_FALSE(status.ok());
    for (const std::string &expected : c.expected)
      EXPECT_THAT(status.message(), HasSubstr(expected));
  }
}

TEST(AttentionArgs, RefusesStridesWhoseByteOffsetsOverflow64Bits) {
  constexpr long long k2Pow62 = 1ll << 62, k2Pow61 = 1ll << 61;
  struct Case {
    std::string name;
    std::function<void(AttentionArgs &)> mutate;
    std::string message; // "" when accepted
  };
  const std::vector<Case> cases = {
      {"q batch stride 2^62 at batch 2 (2^63 bytes)", [&](AttentionArgs &a) { a.qStride[0] = k2Pow62; },
       "qStride[0] (batch stride) is 4611686018427387904 over 2 entries: the byte offset of q's last element"},
      {"q batch stride 2^62 at batch 1",
       [&](AttentionArgs &a) {
         a.qStride[0] = k2Pow62;
         a.batch = 1;
       },
       ""},
      {"q batch stride 2^61 at batch 2 (2^62 bytes)", [&](AttentionArgs &a) { a.qStride[0] = k2Pow61; }, ""},
      {"terms that fit, a sum that does not",
       [&](AttentionArgs &a) {
         a.qStride[0] = k2Pow61;
         a.qStride[1] = 1ll << 55; // x 127 rows x 2 bytes: just under 2^63 alone
       },
       "qStride[1] (seq stride) is 36028797018963968 over 128 entries"},
      {"k", [&](AttentionArgs &a) { a.kStride[1] = k2Pow61; }, "kStride[1] (seq stride)"},
      {"v", [&](AttentionArgs &a) { a.vStride[2] = k2Pow62; }, "vStride[2] (head stride)"},
      {"o", [&](AttentionArgs &a) { a.oStride[0] = k2Pow62; }, "oStride[0] (batch stride)"},
      {"no keys: k and v address nothing",
       [&](AttentionArgs &a) {
         a.seqlenK = 0;
         a.kStride[1] = k2Pow61;
       },
       ""},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    AttentionArgs args = validArgs();
    c.mutate(args);
    Status s = Runtime::validate(args);
    if (c.message.empty()) {
      EXPECT_TRUE(s.ok()) << s.message();
      continue;
    }
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_THAT(s.message(), HasSubstr("does not fit in a signed 64-bit integer"));
  }

  static const int cuSeqlens[] = {0, 64, 128};
  AttentionArgs varlen =
      AttentionArgs::varlen(DType::BF16, fakePointer(0x10000), fakePointer(0x20000), fakePointer(0x30000),
                            const_cast<void *>(fakePointer(0x40000)), reinterpret_cast<float *>(0x50000),
                            reinterpret_cast<const int *>(0x60000), reinterpret_cast<const int *>(0x70000),
                            /*batch=*/2, /*totalQ=*/128, /*totalK=*/128, /*maxSeqlenQ=*/64, /*maxSeqlenK=*/64,
                            /*headsQ=*/8, /*headsKv=*/2, /*headDim=*/128);
  varlen.cuSeqlensQHost = varlen.cuSeqlensKHost = cuSeqlens;
  varlen.qStride[0] = k2Pow62 * 2 - 8; // ignored: a varlen call has one batch entry
  EXPECT_TRUE(Runtime::validate(varlen).ok()) << Runtime::validate(varlen).message();

  alignas(16) static char tensor[16];
  BackwardArgs backward;
  backward.forward = validArgs();
  backward.dO = backward.dQ = backward.dK = backward.dV = tensor;
  backward.dOStride = backward.forward.oStride;
  backward.dQStride = backward.forward.qStride;
  backward.dKStride = backward.forward.kStride;
  backward.dVStride = backward.forward.vStride;
  ASSERT_TRUE(Runtime::validateBackward(backward).ok()) << Runtime::validateBackward(backward).message();
  backward.dKStride[0] = k2Pow62;
  Status s = Runtime::validateBackward(backward);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("dKStride[0] (batch stride) is 4611686018427387904 over 2 entries"));
}

TEST(AttentionArgs, ABadVariantIdIsNotEchoedWhole) {
  AttentionArgs args = validArgs();
  args.variant = std::string(1 << 20, '!');
  Status s = Runtime::validate(args);
  ASSERT_FALSE(s.ok());
  EXPECT_LT(s.message().size(), 1000u);
  EXPECT_THAT(s.message(), HasSubstr("... (1048576 bytes)' is not a variant id"));
}

TEST(AttentionArgs, DtypeNames) {
  EXPECT_EQ(dtypeName(DType::F16), "f16");
  EXPECT_EQ(dtypeName(DType::BF16), "bf16");
}

} // namespace
