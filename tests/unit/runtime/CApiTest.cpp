// CApiTest.cpp — the C ABI (libflashtile.so): bad calls return -1 with a message naming the argument, before any
// GPU work. Pointers are fake (never dereferenced).
#include "flashtile/runtime/CApi.h"

#include <gmock/gmock.h>

#include <cstdint>

using testing::HasSubstr;

namespace {

template <typename T> T *fake(uintptr_t address) { return reinterpret_cast<T *>(address); }

/// flashtile_forward_varlen on three sequences (total_q 32, total_k 47, longest 27 and 40), 8/2 heads, head dim 128.
int forwardVarlen(flashtile_runtime *rt, const int *cuSeqlensQ, const int *cuSeqlensK, int maxSeqlenQ,
                  int headDim = 128, int headDimV = 0) {
  const long long qStride[3] = {8 * 128, 128, 1}, kvStride[3] = {2 * 128, 128, 1};
  return flashtile_forward_varlen(rt, fake<const void>(0x10000), fake<const void>(0x20000), fake<const void>(0x30000),
                                  fake<void>(0x40000), fake<float>(0x50000), cuSeqlensQ, cuSeqlensK, FLASHTILE_BF16,
                                  /*batch=*/3, /*total_q=*/32, /*total_k=*/47, maxSeqlenQ, /*max_seqlen_k=*/40,
                                  /*heads_q=*/8, /*heads_kv=*/2, headDim, headDimV, qStride, kvStride, kvStride,
                                  qStride, 0.f, "causal", nullptr);
}

TEST(CApi, VarlenRejectsBadArgumentsNamingThem) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  const int *cuQ = fake<const int>(0x60000), *cuK = fake<const int>(0x70000);

  EXPECT_EQ(forwardVarlen(rt, cuQ, nullptr, 27), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("cuSeqlensK is null but cuSeqlensQ is set"));
  EXPECT_EQ(forwardVarlen(rt, fake<const int>(0x60002), cuK, 27), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("4-byte aligned"));
  EXPECT_EQ(forwardVarlen(rt, cuQ, cuK, -1), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("maxSeqlenQ is -1"));
  EXPECT_EQ(forwardVarlen(rt, cuQ, cuK, 27, 128, 64), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("headDimV 64 with headDim 128 is not supported"));
  // Nothing to compute (every query sequence empty): a valid no-op that needs no GPU.
  EXPECT_EQ(forwardVarlen(rt, cuQ, cuK, 0), 0) << flashtile_last_error();
  flashtile_destroy(rt);
}

TEST(CApi, VarlenVariantArgumentsAreChecked) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  const long long qStride[3] = {8 * 128, 128, 1}, kvStride[3] = {2 * 128, 128, 1};
  const void *docStart = fake<const void>(0x80000);
  flashtile_variant_args bad{nullptr, 0, &docStart, -1};
  EXPECT_EQ(flashtile_forward_varlen_variant(rt, fake<const void>(0x10000), fake<const void>(0x20000),
                                             fake<const void>(0x30000), fake<void>(0x40000), fake<float>(0x50000),
                                             fake<const int>(0x60000), fake<const int>(0x70000), FLASHTILE_BF16, 3, 32,
                                             47, 27, 40, 8, 2, 128, 0, qStride, kvStride, kvStride, qStride, 0.f,
                                             "document_mask", &bad, nullptr),
            -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("variant_args: num_params (0) and num_inputs (-1) must be >= 0"));
  flashtile_destroy(rt);
}

/// flashtile_forward on B=2, Sq=Sk=64, 8/2 heads, head dims (headDim, headDimV), packed strides.
int forwardDense(flashtile_runtime *rt, int headDim, int headDimV, int seqlenQ = 64) {
  int dv = headDimV == 0 ? headDim : headDimV;
  const long long qStride[4] = {64LL * 8 * headDim, 8LL * headDim, headDim, 1};
  const long long kStride[4] = {64LL * 2 * headDim, 2LL * headDim, headDim, 1};
  const long long vStride[4] = {64LL * 2 * dv, 2LL * dv, dv, 1};
  const long long oStride[4] = {64LL * 8 * dv, 8LL * dv, dv, 1};
  return flashtile_forward(rt, fake<const void>(0x10000), fake<const void>(0x20000), fake<const void>(0x30000),
                           fake<void>(0x40000), fake<float>(0x50000), FLASHTILE_BF16, 2, seqlenQ, 64, 8, 2, headDim,
                           headDimV, qStride, kStride, vStride, oStride, 0.f, "causal", nullptr);
}

TEST(CApi, DenseTakesTheVHeadDim) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(forwardDense(rt, 128, 64), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("headDimV 64 with headDim 128 is not supported"));
  EXPECT_EQ(forwardDense(rt, 192, 96), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("headDimV 96 with headDim 192"));
  // Supported pairs (192/128, and 0 = head_dim) pass the checks: with no query rows the call is a no-op.
  EXPECT_EQ(forwardDense(rt, 192, 128, /*seqlenQ=*/0), 0) << flashtile_last_error();
  EXPECT_EQ(forwardDense(rt, 128, 0, /*seqlenQ=*/0), 0) << flashtile_last_error();
  flashtile_destroy(rt);
}

} // namespace
