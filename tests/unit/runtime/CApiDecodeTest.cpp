// CApiDecodeTest.cpp — the decode part of the C ABI (CApiDecode.h), through libflashtile.so: its errors before
// the GPU and the workspace size it reports. No GPU needed.
#include "flashtile/runtime/CApiDecode.h"

#include <gmock/gmock.h>

using testing::HasSubstr;

namespace {

const long long kStrides[4] = {4096 * 32 * 128, 32 * 128, 128, 1};

TEST(CApiDecode, WorkspaceBytesFollowSplitKvWorkspaceBytes) {
  size_t bytes = 1;
  ASSERT_EQ(flashtile_split_kv_workspace_bytes(32, 128, 1, &bytes), 0) << flashtile_last_error();
  EXPECT_EQ(bytes, 0u);
  ASSERT_EQ(flashtile_split_kv_workspace_bytes(32, 128, 8, &bytes), 0) << flashtile_last_error();
  EXPECT_EQ(bytes, 8u * 32 * 128 * 4 + 1024); // the LSE part: 8 x 32 floats, rounded up to 256 bytes
  EXPECT_EQ(flashtile_split_kv_workspace_bytes(32, 128, 129, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("num_splits (129) in [0, 128]"));
  EXPECT_EQ(flashtile_split_kv_workspace_bytes(32, 128, 2, nullptr), -1);
  bytes = 1;
  EXPECT_EQ(flashtile_split_kv_workspace_bytes(1LL << 62, 128, 2, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("need more bytes than a size_t holds"));
  EXPECT_EQ(bytes, 1u);
}

TEST(CApiDecode, BadArgumentsAreErrorsBeforeTheGpu) {
  EXPECT_EQ(flashtile_set_decode_schedule(nullptr, "decode"), -1);
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_set_decode_schedule(rt, nullptr), 0);
  EXPECT_EQ(flashtile_set_decode_schedule(rt, "decode"), 0);
  const void *q = reinterpret_cast<const void *>(0x10000), *k = reinterpret_cast<const void *>(0x20000);
  void *o = reinterpret_cast<void *>(0x40000);
  float *lse = reinterpret_cast<float *>(0x50000);
  auto forward = [&](int numSplits, void *workspace, size_t bytes) {
    return flashtile_forward_decode(rt, q, k, k, o, lse, FLASHTILE_BF16, 1, 1, 4096, 32, 8, 128, 0, kStrides, kStrides,
                                    kStrides, kStrides, 0.f, "causal", nullptr, numSplits, workspace, bytes, nullptr);
  };
  EXPECT_EQ(forward(-1, nullptr, 0), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("numSplits is -1"));
  EXPECT_EQ(forward(0, reinterpret_cast<void *>(0x60010), 4096), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("256-byte aligned"));
  EXPECT_EQ(forward(0, nullptr, 4096), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("workspace is null"));
  EXPECT_EQ(flashtile_forward_decode(rt, q, k, k, o, lse, 7, 1, 1, 4096, 32, 8, 128, 0, kStrides, kStrides, kStrides,
                                     kStrides, 0.f, "causal", nullptr, 0, nullptr, 0, nullptr),
            -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dtype: 7"));
  flashtile_destroy(rt);
}

} // namespace
