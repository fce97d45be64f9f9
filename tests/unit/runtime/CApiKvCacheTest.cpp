// CApiKvCacheTest.cpp — the KV-cache part of the C ABI (CApiKvCache.h), through libflashtile.so: its errors before
// the GPU name the argument. No GPU needed.
#include "flashtile/runtime/CApiKvCache.h"

#include <gmock/gmock.h>

using testing::HasSubstr;

namespace {

flashtile_kvcache_call pagedCall() {
  flashtile_kvcache_call call{};
  call.size = sizeof(call);
  call.q = reinterpret_cast<const void *>(0x10000);
  call.k_cache = reinterpret_cast<const void *>(0x20000);
  call.v_cache = reinterpret_cast<const void *>(0x30000);
  call.o = reinterpret_cast<void *>(0x40000);
  call.lse = reinterpret_cast<float *>(0x50000);
  call.cache_seqlens = reinterpret_cast<const int *>(0x60000);
  call.block_table = reinterpret_cast<const int *>(0x70000);
  call.dtype = FLASHTILE_BF16;
  call.batch = 2;
  call.seqlen_q = 1;
  call.heads_q = 32;
  call.heads_kv = 8;
  call.head_dim = 128;
  call.num_pages = 64;
  call.page_size = 64;
  call.max_pages_per_seq = 16;
  call.variant = "causal";
  return call;
}

TEST(CApiKvCache, BadArgumentsAreErrorsBeforeTheGpu) {
  flashtile_kvcache_call call = pagedCall();
  EXPECT_EQ(flashtile_forward_kvcache(nullptr, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("rt and call must not be NULL"));
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_forward_kvcache(rt, nullptr), -1);

  call.size = 8;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_kvcache_call.size is 8"));

  call = pagedCall();
  call.page_size = 100;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvCache.pageSize is 100; accepted: 16, 32, 64, 128 or 256"));

  call = pagedCall();
  call.cache_batch_idx = reinterpret_cast<const int *>(0x80000);
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("cacheBatchIdx is set on a paged cache"));

  call = pagedCall();
  const int table[2 * 16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 64};
  call.block_table_host = table;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvCache.blockTable[0][15] = 64"));

  call = pagedCall();
  call.k_new = reinterpret_cast<const void *>(0x90000);
  call.seqlen_new = 1;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvCache.vNew is null"));

  // A contiguous cache (no block table) with paged-only fields is named too.
  call = pagedCall();
  call.block_table = nullptr;
  call.cache_batch = 2;
  call.cache_seqlen = 4096;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("belong to a paged cache"));

  // Rotary embedding: its fields reach the checks, which name them.
  call = pagedCall();
  call.k_new = reinterpret_cast<const void *>(0x90000);
  call.v_new = reinterpret_cast<const void *>(0xa0000);
  call.seqlen_new = 1;
  call.rotary_dim = 65;
  call.rotary_cos = reinterpret_cast<const void *>(0xb0000);
  call.rotary_sin = reinterpret_cast<const void *>(0xc0000);
  call.seqlen_ro = 1024;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvCache.rotaryDim is 65; accepted: 0 (no rotary embedding) or an "
                                                "even number from 2 to headDim = 128"));
  call.rotary_dim = 64;
  call.rotary_sin = nullptr;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvCache.rotarySin is null but rotaryDim is 64"));
  call.rotary_sin = reinterpret_cast<const void *>(0xc0000);
  call.rotary_interleaved = 2;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("rotary_interleaved is 2; accepted: 0 or 1"));
  call.rotary_interleaved = 1;
  call.seqlen_ro = 1000;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvCache.seqlenRo is 1000 but the cache holds seqlenK = 1024"));

  call = pagedCall();
  call.dtype = 9;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dtype: 9"));
  flashtile_destroy(rt);
}

// An e4m3 cache (cache_dtype FLASHTILE_E4M3) reaches the runtime's checks with its descales, which name what is wrong;
// flashtile_explain_kvcache takes the same struct and reports the same errors.
TEST(CApiKvCache, E4m3CachesAreCheckedByName) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  flashtile_kvcache_call call = pagedCall();
  call.cache_dtype = 7;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("cache_dtype: 7 is not accepted; accepted: 0 or the call's dtype (1"));

  call = pagedCall();
  call.k_descale = reinterpret_cast<const float *>(0xb0000);
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kDescale is set but dtype is bf16; descales apply to e4m3 tensors"));

  call.cache_dtype = FLASHTILE_E4M3;
  call.k_cache_stride[0] = 64 * 8 * 128;
  call.k_cache_stride[1] = 8 * 128 + 8; // a row stride of 8 bytes more: not a 16-byte vector of e4m3 values
  call.k_cache_stride[2] = 128;
  call.k_cache_stride[3] = 1;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kStride[1] is 1032; an e4m3 KV cache's page (batch), row and head "
                                                "strides must be multiples of 16 elements"));

  call = pagedCall();
  call.dtype = FLASHTILE_E4M3;
  call.cache_dtype = FLASHTILE_E4M3;
  EXPECT_EQ(flashtile_forward_kvcache(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dtype: FLASHTILE_E4M3 (2): the split-KV and KV-cache kernels read q "
                                                "in bf16 or f16"));

  char text[512];
  call = pagedCall();
  call.cache_dtype = 7;
  EXPECT_EQ(flashtile_explain_kvcache(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("cache_dtype: 7 is not accepted"));
  EXPECT_EQ(flashtile_explain_kvcache(rt, nullptr, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_explain_kvcache: rt, call and buffer must not be NULL"));
  // A valid e4m3-cache call: this library has no compiler and no ahead-of-time kernels, so the kernel it asks for is
  // named as missing, with the e4m3 cache in its spec.
  call = pagedCall();
  call.cache_dtype = FLASHTILE_E4M3;
  call.k_descale = reinterpret_cast<const float *>(0xb0000);
  call.v_descale = reinterpret_cast<const float *>(0xb0040);
  call.schedule = "decode";
  call.strict_schedule = 1;
  EXPECT_EQ(flashtile_explain_kvcache(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kvDtype=e4m3"));
  flashtile_destroy(rt);
}

} // namespace
