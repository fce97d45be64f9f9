// KvCacheGpuTest.cpp — attention over a KV cache (flash_attn_with_kvcache) on a real GPU.
//
// Each case draws the keys and values every sequence will hold (`truth`, B x capacity x Hkv x D), writes the first
// cacheSeqlens[b] of them into a cache — contiguous (rows picked through cache_batch_idx, the others poisoned) or
// paged (pages of a pool in shuffled order through a block table, unused pages poisoned) — and passes the next
// seqlenNew as k_new/v_new. Every split count from 1 to past the K/V tiles (and the runtime's choice) is checked:
//   - against the fp32 reference kernel on each sequence's keys (FlashAttention's rule; none and causal, whose
//     bottom-right alignment is to cacheSeqlens[b] + seqlenNew keys), or, for the other variants, against the
//     decode kernel on the same keys as a plain tensor (4 units of the dtype's rounding at the largest |O|);
//   - the cache afterwards: byte for byte the first calls' cache with the new rows written at cacheSeqlens[b], and
//     nothing else touched (poison stays poison).
// Cache lengths of 0, 1, odd and full; GQA ratios 1-16; page sizes 16, 32, 64, 128 and 256.
// Rotary embedding (rotary_cos/rotary_sin, Rotary cases; tables of capacity + seqlenQ rows): the expected keys and
// Q are rotated on the host
// (HostRotary.h: the new keys at their cache rows, query rows at cacheSeqlens[b] + i under masks, else all at
// cacheSeqlens[b]); the reference reads them, and the cache must then hold the rotated new keys and the unrotated
// new values, bit for bit. Interleaved and not, rotary_dim below and at the head dim, contiguous and paged caches.
//
// Environment (bench/device/run-decode-tests.sh sets them): FLASHTILE_DECODE_AOT_DIR (decode kernels, `flashtile
// aot --schedule decode`), FLASHTILE_REQUIRE_GPU, FLASHTILE_TEST_SEED. Without a GPU every test skips.
#include "GpuReference.h"
#include "GpuTestSupport.h"
#include "HostRotary.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KvCache.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/SplitKv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace flashtile;
using namespace flashtile::gpu_test;

namespace {

using reference::DeviceBuffer;
using reference::Precision;
using reference::synchronize;

constexpr uint16_t kPoison16 = 0xFFFF;

struct Gpu : GpuState {
  std::unique_ptr<Runtime> decode;
};

Gpu makeGpu() {
  Gpu gpu;
  if (!findGpu(gpu, /*withReference=*/true))
    return gpu;
  const std::string dir = envOr("FLASHTILE_DECODE_AOT_DIR", "");
  if (dir.empty()) {
    gpu.setupError = "FLASHTILE_DECODE_AOT_DIR (decode kernels) must be set";
    return gpu;
  }
  if (!loadAotRuntime(gpu, gpu.decode, dir))
    return gpu;
  announceSeed("flashtile-kvcache");
  return gpu;
}

Gpu &gpu() {
  static Gpu instance = makeGpu();
  return instance;
}

struct Case {
  DType dtype;
  int headDim;
  std::string variant;
  KvCacheLayout layout;
  int pageSize;  // paged
  bool batchIdx; // contiguous: rows through cache_batch_idx (reversed, row 0 unused)
  int batch, headsQ, headsKv, seqlenQ;
  int capacity; // keys a sequence's cache holds (paged: a multiple of pageSize)
  int seqlenNew;
  std::vector<int> cached; // cacheSeqlens, one per batch entry
  int index;
  int rotaryDim = 0; // rotary embedding of Q and the new keys over this many columns (0: none)
  bool interleaved = false;
};

/// Variants whose query rows sit at consecutive positions under rotary embedding (they mask: flash-attn's causal or
/// local); the others put every query row at cacheSeqlens[b].
bool rotatesRowsApart(const std::string &variant) {
  return variant.find("causal") != std::string::npos || variant.find("sliding_window") != std::string::npos;
}

std::string caseName(const Case &c) {
  std::ostringstream name;
  name << dtypeName(c.dtype) << "_hd" << c.headDim << "_" << c.variant << "_"
       << (c.layout == KvCacheLayout::Paged ? "paged" + std::to_string(c.pageSize)
                                            : std::string(c.batchIdx ? "contiguous_idx" : "contiguous"))
       << "_B" << c.batch << "_H" << c.headsQ << "x" << c.headsKv << "_Sq" << c.seqlenQ << "_cap" << c.capacity
       << "_new" << c.seqlenNew << "_c";
  for (int s : c.cached)
    name << "_" << s;
  if (c.rotaryDim)
    name << "_rotary" << c.rotaryDim << (c.interleaved ? "_interleaved" : "");
  return name.str();
}

void PrintTo(const Case &c, std::ostream *out) { *out << caseName(c); }

Status upload(DeviceBuffer &buffer, const void *data, size_t bytes) {
  if (Status s = buffer.allocate(bytes); !s.ok())
    return s;
  const CudaDriver &d = *gpu().driver;
  return d.check(d.cuMemcpyHtoD_v2(buffer.address(), data, bytes), "cuMemcpyHtoD");
}

/// Everything one case allocates, and the host copies the checks read.
struct CacheSetup {
  long long rowElems = 0; // Hkv x D of one key row (D = Dv here)
  DeviceBuffer q, o, lse, truth, truthV, kCache, vCache, kNew, vNew, seqlens, batchIdx, table;
  // Rotary cases: the tables (capacity rows), and Q and the keys as the call rotates them (what the reference reads).
  DeviceBuffer rotaryCos, rotarySin, qRotated, truthRotated;
  std::vector<uint16_t> truthHost, truthVHost, kCacheHost, vCacheHost; // caches: as expected after the call
  std::vector<int> rowOf;                                              // contiguous: the cache row of batch entry b
  std::vector<int> tableHost;                                          // paged: B x pagesPerSeq
  int pagesPerSeq = 0, numPages = 0, cacheRows = 0;
  std::vector<DeviceBuffer> arrays; // variant inputs
};

/// The element offset of key row `key` of batch entry b in the cache.
long long cacheRowOffset(const Case &c, const CacheSetup &s, int b, int key) {
  if (c.layout == KvCacheLayout::Paged)
    return pagedCacheRow(&s.tableHost[size_t(b) * s.pagesPerSeq], c.pageSize, s.numPages, key) * s.rowElems;
  return (static_cast<long long>(s.rowOf[b]) * c.capacity + key) * s.rowElems;
}

Status makeSetup(const Case &c, uint64_t seed, CacheSetup &s) {
  const reference::GpuReference &ref = *gpu().reference;
  const long long D = c.headDim, Hkv = c.headsKv;
  s.rowElems = Hkv * D;
  const size_t truthElems = size_t(c.batch) * c.capacity * s.rowElems;
  const size_t qElems = size_t(c.batch) * c.seqlenQ * c.headsQ * D;
  for (auto [buffer, bytes] : {std::pair{&s.q, qElems * 2},
                               {&s.o, qElems * 2},
                               {&s.lse, size_t(c.batch) * c.headsQ * c.seqlenQ * 4},
                               {&s.truth, truthElems * 2},
                               {&s.truthV, truthElems * 2}})
    if (Status st = buffer->allocate(bytes); !st.ok())
      return st;
  const std::array<long long, 4> qStride{c.seqlenQ * c.headsQ * D, c.headsQ * D, D, 1},
      kStride{c.capacity * s.rowElems, s.rowElems, D, 1};
  if (Status st = ref.fill(s.q.as<void>(), c.dtype, c.batch, c.seqlenQ, c.headsQ, c.headDim, qStride, seed * 3);
      !st.ok())
    return st;
  if (Status st =
          ref.fill(s.truth.as<void>(), c.dtype, c.batch, c.capacity, c.headsKv, c.headDim, kStride, seed * 3 + 1);
      !st.ok())
    return st;
  if (Status st =
          ref.fill(s.truthV.as<void>(), c.dtype, c.batch, c.capacity, c.headsKv, c.headDim, kStride, seed * 3 + 2);
      !st.ok())
    return st;
  if (Status st = synchronize("fill_normal"); !st.ok())
    return st;
  if (Status st = s.truth.download(s.truthHost); !st.ok())
    return st;
  if (Status st = s.truthV.download(s.truthVHost); !st.ok())
    return st;
  // The keys the cache holds after the call: rotated where the call appends them (rotary cases).
  std::vector<uint16_t> truthAfter = s.truthHost;
  if (c.rotaryDim) {
    std::vector<uint16_t> cos, sin, qHost;
    // Query rows past the new keys (causal, seqlenQ > seqlenNew) reach seqlenQ - 1 past the last cached row.
    reference::ropeTables(c.capacity + c.seqlenQ, c.rotaryDim, c.dtype, cos, sin);
    if (Status st = upload(s.rotaryCos, cos.data(), cos.size() * 2); !st.ok())
      return st;
    if (Status st = upload(s.rotarySin, sin.data(), sin.size() * 2); !st.ok())
      return st;
    if (Status st = s.q.download(qHost, 0, qElems); !st.ok())
      return st;
    for (int b = 0; b < c.batch; ++b) {
      for (int i = 0; i < c.seqlenQ; ++i)
        for (int h = 0; h < c.headsQ; ++h)
          reference::rotateRow(&qHost[((size_t(b) * c.seqlenQ + i) * c.headsQ + h) * D],
                               c.cached[b] + (rotatesRowsApart(c.variant) ? i : 0), cos, sin, c.rotaryDim,
                               c.interleaved, c.dtype);
      for (int key = c.cached[b]; key < c.cached[b] + c.seqlenNew; ++key)
        for (int h = 0; h < c.headsKv; ++h)
          reference::rotateRow(&truthAfter[(size_t(b) * c.capacity + key) * s.rowElems + h * D], key, cos, sin,
                               c.rotaryDim, c.interleaved, c.dtype);
    }
    if (Status st = upload(s.qRotated, qHost.data(), qHost.size() * 2); !st.ok())
      return st;
    if (Status st = upload(s.truthRotated, truthAfter.data(), truthAfter.size() * 2); !st.ok())
      return st;
  }

  // The cache's shape and where each sequence lives in it.
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 7;
  auto random = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  if (c.layout == KvCacheLayout::Paged) {
    s.pagesPerSeq = c.capacity / c.pageSize;
    s.numPages = c.batch * s.pagesPerSeq + 2; // two pages no sequence uses: they must stay poisoned
    std::vector<int> order(s.numPages);
    for (int i = 0; i < s.numPages; ++i)
      order[i] = i;
    for (int i = s.numPages; i > 1; --i)
      std::swap(order[i - 1], order[random() % i]);
    s.tableHost.assign(order.begin(), order.begin() + size_t(c.batch) * s.pagesPerSeq);
    s.cacheRows = s.numPages * c.pageSize;
  } else {
    s.rowOf.resize(c.batch);
    for (int b = 0; b < c.batch; ++b)
      s.rowOf[b] = c.batchIdx ? c.batch - b : b; // with cache_batch_idx: reversed, row 0 unused
    s.cacheRows = (c.batch + (c.batchIdx ? 1 : 0)) * c.capacity;
  }
  s.kCacheHost.assign(size_t(s.cacheRows) * s.rowElems, kPoison16);
  s.vCacheHost = s.kCacheHost;
  std::vector<uint16_t> kNewHost(size_t(c.batch) * std::max(c.seqlenNew, 1) * s.rowElems), vNewHost(kNewHost.size());
  for (int b = 0; b < c.batch; ++b)
    for (int key = 0; key < c.cached[b] + c.seqlenNew; ++key) {
      const size_t from = (size_t(b) * c.capacity + key) * s.rowElems;
      const long long to = cacheRowOffset(c, s, b, key);
      if (key < c.cached[b]) {
        std::copy_n(&s.truthHost[from], s.rowElems, &s.kCacheHost[to]);
        std::copy_n(&s.truthVHost[from], s.rowElems, &s.vCacheHost[to]);
      } else {
        const size_t at = (size_t(b) * c.seqlenNew + (key - c.cached[b])) * s.rowElems;
        std::copy_n(&s.truthHost[from], s.rowElems, &kNewHost[at]);
        std::copy_n(&s.truthVHost[from], s.rowElems, &vNewHost[at]);
      }
    }
  if (Status st = upload(s.kCache, s.kCacheHost.data(), s.kCacheHost.size() * 2); !st.ok())
    return st;
  if (Status st = upload(s.vCache, s.vCacheHost.data(), s.vCacheHost.size() * 2); !st.ok())
    return st;
  if (Status st = upload(s.kNew, kNewHost.data(), kNewHost.size() * 2); !st.ok())
    return st;
  if (Status st = upload(s.vNew, vNewHost.data(), vNewHost.size() * 2); !st.ok())
    return st;
  if (Status st = upload(s.seqlens, c.cached.data(), c.cached.size() * sizeof(int)); !st.ok())
    return st;
  if (!s.rowOf.empty())
    if (Status st = upload(s.batchIdx, s.rowOf.data(), s.rowOf.size() * sizeof(int)); !st.ok())
      return st;
  if (!s.tableHost.empty())
    if (Status st = upload(s.table, s.tableHost.data(), s.tableHost.size() * sizeof(int)); !st.ok())
      return st;
  // The cache as the call must leave it: the new rows written at cacheSeqlens[b].
  for (int b = 0; b < c.batch; ++b)
    for (int key = c.cached[b]; key < c.cached[b] + c.seqlenNew; ++key) {
      const size_t from = (size_t(b) * c.capacity + key) * s.rowElems;
      std::copy_n(&truthAfter[from], s.rowElems, &s.kCacheHost[cacheRowOffset(c, s, b, key)]);
      std::copy_n(&s.truthVHost[from], s.rowElems, &s.vCacheHost[cacheRowOffset(c, s, b, key)]);
    }
  return Status();
}

/// Variant arguments of the variants the comparison with the plain kernel runs (as DecodeGpuTest's).
Status variantArgs(const Case &c, AttentionArgs &args, std::vector<DeviceBuffer> &arrays) {
  std::vector<float> perHead(c.headsQ);
  auto floats = [&]() -> Status {
    arrays.emplace_back();
    args.inputs.push_back(nullptr);
    if (Status s = upload(arrays.back(), perHead.data(), perHead.size() * sizeof(float)); !s.ok())
      return s;
    args.inputs.back() = arrays.back().as<const void>();
    return Status();
  };
  if (c.variant == "sinks" || c.variant == "sinks_causal") {
    for (int h = 0; h < c.headsQ; ++h)
      perHead[h] = float(h % 5) - 2.0f;
    return floats();
  }
  if (c.variant == "alibi" || c.variant == "alibi_causal") {
    for (int h = 0; h < c.headsQ; ++h)
      perHead[h] = std::exp2(-8.0f * float(h % 8 + 1) / 8.0f);
    return floats();
  }
  if (c.variant == "softcap" || c.variant == "softcap_causal")
    args.variantParams = {30.0f};
  if (c.variant == "sliding_window" || c.variant == "sliding_window_causal")
    args.variantParams =
        c.variant == "sliding_window" ? std::vector<float>{300.f, 40.f} : std::vector<float>{700.f, -1.f};
  return Status();
}

AttentionArgs cacheArgs(const Case &c, CacheSetup &s) {
  AttentionArgs args =
      c.layout == KvCacheLayout::Paged
          ? AttentionArgs::pagedCache(c.dtype, s.q.as<const void>(), s.kCache.as<const void>(),
                                      s.vCache.as<const void>(), s.o.as<void>(), s.lse.as<float>(), c.batch, c.seqlenQ,
                                      s.numPages, c.pageSize, s.table.as<const int>(), s.pagesPerSeq, c.headsQ,
                                      c.headsKv, c.headDim, s.seqlens.as<const int>())
          : AttentionArgs::contiguousCache(c.dtype, s.q.as<const void>(), s.kCache.as<const void>(),
                                           s.vCache.as<const void>(), s.o.as<void>(), s.lse.as<float>(), c.batch,
                                           c.seqlenQ, c.batch + (c.batchIdx ? 1 : 0), c.capacity, c.headsQ, c.headsKv,
                                           c.headDim, s.seqlens.as<const int>());
  if (c.batchIdx)
    args.kvCache.cacheBatchIdx = s.batchIdx.as<const int>();
  if (c.seqlenNew > 0)
    args.kvCache.append(s.kNew.as<const void>(), s.vNew.as<const void>(), c.seqlenNew, c.headsKv, c.headDim);
  if (c.rotaryDim)
    args.kvCache.rotary(s.rotaryCos.as<const void>(), s.rotarySin.as<const void>(), c.capacity + c.seqlenQ, c.rotaryDim,
                        c.interleaved);
  // The host copies are checked too (the device values are what the kernels read).
  args.kvCache.cacheSeqlensHost = c.cached.data();
  if (c.batchIdx)
    args.kvCache.cacheBatchIdxHost = s.rowOf.data();
  if (!s.tableHost.empty())
    args.kvCache.blockTableHost = s.tableHost.data();
  args.variant = c.variant;
  return args;
}

/// The plain (dense, B = 1) arguments of batch entry b over its keys in `truth`.
AttentionArgs sequenceArgs(const Case &c, CacheSetup &s, int b, DeviceBuffer &o, DeviceBuffer &lse) {
  const size_t qOffset = size_t(b) * c.seqlenQ * c.headsQ * c.headDim * 2;
  const size_t kOffset = size_t(b) * c.capacity * s.rowElems * 2;
  const DeviceBuffer &q = c.rotaryDim ? s.qRotated : s.q, &keys = c.rotaryDim ? s.truthRotated : s.truth;
  AttentionArgs args = AttentionArgs::contiguous(c.dtype, q.as<const void>(qOffset), keys.as<const void>(kOffset),
                                                 s.truthV.as<const void>(kOffset), o.as<void>(), lse.as<float>(), 1,
                                                 c.seqlenQ, c.cached[b] + c.seqlenNew, c.headsQ, c.headsKv, c.headDim);
  args.kStride[0] = args.vStride[0] = c.capacity * s.rowElems;
  args.kStride[1] = args.vStride[1] = s.rowElems;
  args.variant = c.variant;
  return args;
}

std::vector<int> splitCounts(const Case &c) {
  const int tiles = std::max(1, (c.capacity + 63) / 64);
  std::vector<int> counts = {0, 1, 2, 3, std::min(tiles, kMaxSplits), std::min(tiles + 3, kMaxSplits), kMaxSplits};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

bool referenceKnows(const std::string &variant) { return variant == "none" || variant == "causal"; }

void checkCase(const Case &c) {
  const uint64_t seed = baseSeed() + 0x9E3779B97F4A7C15ULL * uint64_t(c.index + 1);
  SCOPED_TRACE(caseName(c) + " (seed " + std::to_string(seed) + ")");
  CacheSetup s;
  ASSERT_OK(makeSetup(c, seed, s));
  AttentionArgs args = cacheArgs(c, s);
  ASSERT_OK(variantArgs(c, args, s.arrays));

  // The expected outputs, sequence by sequence over its keys as a plain tensor.
  const size_t oPerSeq = size_t(c.seqlenQ) * c.headsQ * c.headDim, lsePerSeq = size_t(c.headsQ) * c.seqlenQ;
  reference::ReferenceOutputs fp32, lowp, plain;
  for (auto *out : {&fp32, &lowp, &plain}) {
    out->o.assign(oPerSeq * c.batch, 0.f);
    out->lse.assign(lsePerSeq * c.batch, 0.f);
  }
  float largest = 0;
  for (int b = 0; b < c.batch; ++b) {
    DeviceBuffer o, lse;
    ASSERT_OK(o.allocate(oPerSeq * 2));
    ASSERT_OK(lse.allocate(lsePerSeq * 4));
    AttentionArgs seq = sequenceArgs(c, s, b, o, lse);
    if (referenceKnows(c.variant)) {
      for (auto [out, precision] : {std::pair{&fp32, Precision::Fp32}, {&lowp, Precision::Lowp}}) {
        StatusOr<reference::ReferenceOutputs> r = gpu().reference->runToHost(seq, c.variant == "causal", precision);
        ASSERT_OK(r.status());
        std::copy(r->o.begin(), r->o.end(), out->o.begin() + b * oPerSeq);
        std::copy(r->lse.begin(), r->lse.end(), out->lse.begin() + b * lsePerSeq);
      }
      continue;
    }
    seq.inputs = args.inputs;
    seq.variantParams = args.variantParams;
    seq.numSplits = 1;
    ASSERT_OK(gpu().decode->forward(seq));
    ASSERT_OK(synchronize("plain decode forward"));
    std::vector<uint16_t> oRaw;
    std::vector<float> lseHost;
    ASSERT_OK(o.download(oRaw, 0, oPerSeq));
    ASSERT_OK(lse.download(lseHost, 0, lsePerSeq));
    for (size_t i = 0; i < oPerSeq; ++i) {
      plain.o[b * oPerSeq + i] = reference::lowToFloat(oRaw[i], c.dtype);
      largest = std::max(largest, std::fabs(plain.o[b * oPerSeq + i]));
    }
    std::copy(lseHost.begin(), lseHost.end(), plain.lse.begin() + b * lsePerSeq);
  }
  const double ulp = std::ldexp(1.0, std::ilogb(std::max(largest, 1e-30f)) - (c.dtype == DType::BF16 ? 7 : 10));

  bool cacheChecked = false;
  for (int splits : splitCounts(c)) {
    ASSERT_OK(s.o.fill(reference::kPoisonByte));
    ASSERT_OK(s.lse.fill(reference::kPoisonByte));
    args.numSplits = splits;
    ASSERT_OK(gpu().decode->forward(args));
    ASSERT_OK(synchronize("kv-cache forward"));
    std::vector<uint16_t> oRaw;
    std::vector<float> lse;
    ASSERT_OK(s.o.download(oRaw));
    ASSERT_OK(s.lse.download(lse));
    oRaw.resize(oPerSeq * c.batch);
    lse.resize(lsePerSeq * c.batch);
    if (referenceKnows(c.variant)) {
      StatusOr<reference::Comparison> cmp = reference::compare(args, oRaw, lse, fp32, lowp);
      ASSERT_OK(cmp.status());
      std::printf("[flashtile-kvcache] %s splits=%d %s\n", caseName(c).c_str(), splits, cmp->summary().c_str());
      for (const std::string &failure : cmp->failures())
        ADD_FAILURE() << splits << " splits: " << failure;
    } else {
      double errO = 0, errLse = 0;
      long long nans = 0;
      for (size_t i = 0; i < oRaw.size(); ++i) {
        float x = reference::lowToFloat(oRaw[i], c.dtype);
        if (std::isnan(x) || std::isnan(plain.o[i]))
          ++nans;
        else
          errO = std::max(errO, double(std::fabs(x - plain.o[i])));
      }
      for (size_t i = 0; i < lse.size(); ++i)
        if (std::isnan(lse[i]) || (lse[i] != plain.lse[i] && !(std::fabs(lse[i] - plain.lse[i]) <= 1e-3)))
          errLse = std::max(errLse, std::isnan(lse[i]) ? INFINITY : double(std::fabs(lse[i] - plain.lse[i])));
      std::printf("[flashtile-kvcache] %s splits=%d vs plain: max|dO|=%.3e (bound %.3e) max|dLSE|=%.2e nan=%lld\n",
                  caseName(c).c_str(), splits, errO, 4 * ulp, errLse, nans);
      EXPECT_EQ(nans, 0) << splits << " splits";
      EXPECT_LE(errO, 4 * ulp) << splits << " splits";
      EXPECT_LE(errLse, 1e-3) << splits << " splits";
    }
    // Every device value was in range: the kernels recorded nothing (no false alarm, at any split count).
    ASSERT_OK(gpu().decode->checkErrors());
    if (!cacheChecked) {
      // The cache after the call: the new rows at cacheSeqlens[b], every other byte as it was (poison included).
      cacheChecked = true;
      for (auto [buffer, expected, name] :
           {std::tuple{&s.kCache, &s.kCacheHost, "k_cache"}, {&s.vCache, &s.vCacheHost, "v_cache"}}) {
        std::vector<uint16_t> got;
        ASSERT_OK(buffer->download(got, 0, expected->size()));
        size_t mismatches = 0, first = 0;
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] != (*expected)[i] && mismatches++ == 0)
            first = i;
        EXPECT_EQ(mismatches, 0u) << name << ": " << mismatches << " elements differ from the expected cache; first "
                                  << "at key row " << first / s.rowElems << " of the cache, element "
                                  << first % s.rowElems;
      }
    }
  }
}

std::vector<Case> referenceCases() {
  using L = KvCacheLayout;
  struct Shape {
    L layout;
    int pageSize;
    bool batchIdx;
    int batch, hq, hkv, sq, capacity, seqlenNew;
    std::vector<int> cached;
  };
  const Shape shapes[] = {
      {L::Contiguous, 0, false, 3, 32, 8, 1, 1000, 0, {0, 1, 999}},
      {L::Contiguous, 0, true, 4, 16, 1, 4, 4097, 4, {4093, 17, 0, 2048}},
      {L::Paged, 16, false, 2, 8, 8, 1, 16 * 20, 1, {319, 5}},
      {L::Paged, 64, false, 3, 32, 4, 16, 64 * 64, 16, {4000, 63, 1}},
      {L::Paged, 256, false, 2, 12, 4, 2, 256 * 9, 0, {0, 2303}},
      {L::Paged, 64, false, 1, 32, 2, 1, 64 * 512, 1, {32767}},
      // Pages of 32 (two of a thread's row steps at head dim 64, four at 128) and of a whole K/V tile (128): the
      // copies read the block table once a page a thread, and once a tile.
      {L::Paged, 32, false, 2, 16, 2, 1, 32 * 40, 3, {1277, 33}},
      {L::Paged, 128, false, 2, 8, 1, 1, 128 * 10, 1, {129, 1279}},
  };
  std::vector<Case> cases;
  int index = 0;
  for (DType dtype : {DType::BF16, DType::F16})
    for (int headDim : {64, 128})
      for (const char *variant : {"none", "causal"})
        for (const Shape &sh : shapes)
          cases.push_back({dtype, headDim, variant, sh.layout, sh.pageSize, sh.batchIdx, sh.batch, sh.hq, sh.hkv, sh.sq,
                           sh.capacity, sh.seqlenNew, sh.cached, index++});
  return cases;
}

std::vector<Case> variantCases() {
  std::vector<Case> cases;
  int index = 5000;
  for (const char *variant : {"causal_top_left", "sliding_window", "sliding_window_causal", "softcap", "softcap_causal",
                              "alibi", "alibi_causal", "sinks", "sinks_causal"})
    cases.push_back(
        {DType::BF16, 128, variant, KvCacheLayout::Paged, 64, false, 2, 16, 4, 4, 64 * 16, 4, {700, 3}, index++});
  return cases;
}

std::vector<Case> rotaryCases() {
  using L = KvCacheLayout;
  std::vector<Case> cases;
  int index = 7000;
  for (DType dtype : {DType::BF16, DType::F16})
    for (const char *variant : {"none", "causal"})
      for (bool interleaved : {false, true})
        for (int rotaryDim : {128, 64}) {
          // Contiguous with cache_batch_idx (query rows past the new keys under causal), and paged (page 64).
          Case contiguous{dtype, 128, variant, L::Contiguous, 0, true, 3, 16, 4, 4, 1000, 2, {0, 37, 998}, index++};
          Case paged{dtype, 128, variant, L::Paged, 64, false, 2, 32, 8, 1, 64 * 16, 1, {1023, 130}, index++};
          for (Case *c : {&contiguous, &paged}) {
            c->rotaryDim = rotaryDim;
            c->interleaved = interleaved;
            cases.push_back(*c);
          }
        }
  // Head dim 64, a short rotary_dim, and variants checked against the plain decode kernel on the rotated keys.
  cases.push_back(
      {DType::BF16, 64, "causal", L::Paged, 16, false, 2, 8, 2, 3, 16 * 20, 3, {5, 317}, index++, 16, false});
  for (const char *variant : {"sliding_window_causal", "softcap", "alibi_causal"})
    cases.push_back(
        {DType::BF16, 128, variant, L::Paged, 64, false, 2, 16, 4, 4, 64 * 16, 4, {700, 3}, index++, 32, true});
  return cases;
}

class KvCacheGpu : public testing::TestWithParam<Case> {};
TEST_P(KvCacheGpu, EverySplitCountMatchesAndTheCacheHoldsTheNewKeys) {
  REQUIRE_GPU();
  checkCase(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Cases, KvCacheGpu, testing::ValuesIn(referenceCases()),
                         [](const testing::TestParamInfo<Case> &info) { return caseName(info.param); });
INSTANTIATE_TEST_SUITE_P(Variants, KvCacheGpu, testing::ValuesIn(variantCases()),
                         [](const testing::TestParamInfo<Case> &info) { return caseName(info.param); });
INSTANTIATE_TEST_SUITE_P(Rotary, KvCacheGpu, testing::ValuesIn(rotaryCases()),
                         [](const testing::TestParamInfo<Case> &info) { return caseName(info.param); });

// Device values are never trusted: block-table entries and cache_seqlens out of range are clamped, so the call
// reads and writes inside the tensors (compute-sanitizer memcheck runs this one) and its output is finite; the first
// one is recorded and reported once.
TEST(KvCacheGpuBadValues, OutOfRangeDeviceValuesAreClampedNotFollowed) {
  REQUIRE_GPU();
  Case c{DType::BF16, 128, "causal", KvCacheLayout::Paged, 16, false, 2, 8, 2, 1, 16 * 8, 2, {10, 20}, 9000};
  CacheSetup s;
  ASSERT_OK(makeSetup(c, baseSeed(), s));
  // Finite caches everywhere (the clamped reads may land on pages no sequence owns).
  ASSERT_OK(s.kCache.fill(0));
  ASSERT_OK(s.vCache.fill(0));
  const std::vector<int> badTable = {-5, 1000, 3, 2, 1, 0, 7, 1 << 30, 4, 5, 6, 7, 8, 9, 10, -1};
  const std::vector<int> badSeqlens = {-7, 1 << 30};
  ASSERT_OK(upload(s.table, badTable.data(), badTable.size() * sizeof(int)));
  ASSERT_OK(upload(s.seqlens, badSeqlens.data(), badSeqlens.size() * sizeof(int)));
  AttentionArgs args = cacheArgs(c, s);
  args.kvCache.cacheSeqlensHost = nullptr; // unchecked on the host: only the device copies are bad
  args.kvCache.blockTableHost = nullptr;
  for (int splits : {1, 3}) {
    args.numSplits = splits;
    ASSERT_OK(gpu().decode->forward(args));
    ASSERT_OK(synchronize("kv-cache forward with bad device values"));
    std::vector<float> lse;
    ASSERT_OK(s.lse.download(lse));
    lse.resize(size_t(c.batch) * c.headsQ * c.seqlenQ);
    EXPECT_TRUE(std::none_of(lse.begin(), lse.end(), [](float x) { return std::isnan(x); }));
    Status reported = gpu().decode->checkErrors();
    EXPECT_FALSE(reported.ok()) << splits << " splits: the bad values were not reported";
    std::printf("[flashtile-kvcache] bad values, %d splits: %s\n", splits, reported.message().c_str());
    EXPECT_TRUE(gpu().decode->checkErrors().ok()) << "reported once";
  }
}

/// Runs `args` once (one split: one attention block a sequence and head) and returns what checkErrors reports.
std::string reportOf(const AttentionArgs &args) {
  Status launched = gpu().decode->forward(args);
  if (!launched.ok())
    return "forward failed: " + launched.message();
  Status reported = gpu().decode->checkErrors();
  std::printf("[flashtile-kvcache] reported: %s\n", reported.ok() ? "(nothing)" : reported.message().c_str());
  return reported.ok() ? "(nothing)" : reported.message();
}

// One bad value on the device, the host copies left out: the report names the argument, its index, the value and
// the accepted range, and the kernel that read it. The append kernel reads cache_seqlens and the block-table entry of
// the new key first; entries of cached keys only the attention kernel reads.
TEST(KvCacheGpuBadValues, EachBadDeviceValueIsReportedWithItsArgument) {
  REQUIRE_GPU();
  ASSERT_OK(gpu().decode->checkErrors());
  Case c{DType::BF16, 128, "causal", KvCacheLayout::Paged, 16, false, 2, 8, 2, 1, 16 * 16, 1, {150, 20}, 9100};
  CacheSetup s;
  ASSERT_OK(makeSetup(c, baseSeed(), s));
  AttentionArgs args = cacheArgs(c, s);
  args.kvCache.cacheSeqlensHost = nullptr;
  args.kvCache.blockTableHost = nullptr;
  args.numSplits = 1;
  EXPECT_EQ(reportOf(args), "(nothing)");

  // cache_seqlens[1] = -5: the append kernel meets it first (it runs first).
  const std::vector<int> badSeqlens = {40, -5};
  ASSERT_OK(upload(s.seqlens, badSeqlens.data(), badSeqlens.size() * sizeof(int)));
  std::string report = reportOf(args);
  EXPECT_NE(report.find("its append kernel read cache_seqlens[1] = -5; accepted: 0 to seqlen_k - seqlen_new = 255"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("(kernel flashtile_decode_causal_bf16_d128_kvcache, batch 2, seqlen_q 1, a paged cache of"),
            std::string::npos)
      << report;
  ASSERT_OK(upload(s.seqlens, c.cached.data(), c.cached.size() * sizeof(int)));

  // block_table[1][0] = 2^20: a page of sequence 1's cached keys (its new key is on page 1).
  std::vector<int> table = s.tableHost;
  table[size_t(s.pagesPerSeq) + 0] = 1 << 20;
  ASSERT_OK(upload(s.table, table.data(), table.size() * sizeof(int)));
  report = reportOf(args);
  EXPECT_NE(report.find("its attention kernel read block_table[1][0] = 1048576; accepted: a page index from 0 to "
                        "num_pages - 1 = " +
                        std::to_string(s.numPages - 1)),
            std::string::npos)
      << report;
  // ... and at the new key's page (column 150 / 16 = 9 of sequence 0), a negative entry: the append kernel's.
  table = s.tableHost;
  table[9] = -3;
  ASSERT_OK(upload(s.table, table.data(), table.size() * sizeof(int)));
  report = reportOf(args);
  EXPECT_NE(report.find("its append kernel read block_table[0][9] = -3"), std::string::npos) << report;
  // Split calls: each split's blocks check a share of the sequence's block-table entries. Sequence 0's 151 keys
  // are 10 columns, 4 a split: column 5 (keys 80..95) is the second split's.
  table = s.tableHost;
  table[5] = s.numPages + 7;
  ASSERT_OK(upload(s.table, table.data(), table.size() * sizeof(int)));
  args.numSplits = 3;
  report = reportOf(args);
  EXPECT_NE(report.find("its attention kernel read block_table[0][5] = " + std::to_string(s.numPages + 7)),
            std::string::npos)
      << report;
  ASSERT_OK(upload(s.table, s.tableHost.data(), s.tableHost.size() * sizeof(int)));
  EXPECT_EQ(reportOf(args), "(nothing)");

  // A contiguous cache's cache_batch_idx: row 5 of a cache of 3 rows, read by both kernels (the append kernel first).
  Case contiguous{DType::BF16, 64, "none", KvCacheLayout::Contiguous, 0, true, 2, 8, 8, 1, 200, 1, {7, 90}, 9101};
  CacheSetup cs;
  ASSERT_OK(makeSetup(contiguous, baseSeed(), cs));
  AttentionArgs cargs = cacheArgs(contiguous, cs);
  cargs.kvCache.cacheSeqlensHost = nullptr;
  cargs.kvCache.cacheBatchIdxHost = nullptr;
  cargs.numSplits = 1;
  const std::vector<int> badRows = {1, 5};
  ASSERT_OK(upload(cs.batchIdx, badRows.data(), badRows.size() * sizeof(int)));
  report = reportOf(cargs);
  EXPECT_NE(report.find("its append kernel read cache_batch_idx[1] = 5; accepted: a cache row from 0 to "
                        "cache_batch - 1 = 2"),
            std::string::npos)
      << report;
  // Without new keys only the attention kernel reads it.
  cargs.kvCache.kNew = cargs.kvCache.vNew = nullptr;
  cargs.kvCache.seqlenNew = 0;
  cargs.kvCache.kNewStride = cargs.kvCache.vNewStride = {};
  report = reportOf(cargs);
  EXPECT_NE(report.find("its attention kernel read cache_batch_idx[1] = 5"), std::string::npos) << report;

  // FLASHTILE_CHECK_KVCACHE=1: the same values are copied to the host and refused before the launch.
  setenv("FLASHTILE_CHECK_KVCACHE", "1", 1);
  Status refused = gpu().decode->forward(cargs);
  unsetenv("FLASHTILE_CHECK_KVCACHE");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("FLASHTILE_CHECK_KVCACHE: kvCache.cacheBatchIdx[1] = 5; accepted: 0 to "
                                   "cacheBatch - 1 = 2"),
            std::string::npos)
      << refused.message();
  ASSERT_OK(gpu().decode->checkErrors());
}

} // namespace
