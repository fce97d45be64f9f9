// KvCache.cpp — calls over a KV cache (flash_attn_with_kvcache): building and checking their arguments, the cache
// fields of the kernel parameters, and the launch of the kernel that appends new keys. Nothing here but the launch
// touches the GPU.
#include "flashtile/runtime/KvCache.h"
#include "KvCacheInternal.h"
#include "flashtile/runtime/KernelInfo.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

namespace {

/// Kernels move K/V rows as 16-byte vectors of 8 fp16/bf16 elements.
constexpr long long kStrideMultipleElements = 8;
constexpr size_t kTensorAlignmentBytes = 16;
constexpr int kChunkElements = 8;

std::string str(long long value) { return std::to_string(value); }

Status checkNewStrides(std::string_view name, const std::array<long long, 4> &stride) {
  static constexpr const char *kNames[] = {"batch", "seq", "head", "dim"};
  if (stride[3] != 1)
    return Status::error("kvCache." + std::string(name) + "[3] (dim stride) is " + str(stride[3]) +
                         "; the last dimension must be contiguous (stride 1)");
  for (int i = 0; i < 3; ++i)
    if (stride[i] < 0 || stride[i] % kStrideMultipleElements != 0)
      return Status::error("kvCache." + std::string(name) + "[" + str(i) + "] (" + kNames[i] + " stride) is " +
                           str(stride[i]) + "; batch, seq and head strides must be non-negative multiples of " +
                           str(kStrideMultipleElements) + " elements (16-byte vector loads)");
  return Status();
}

Status checkAlignment(std::string_view name, const void *pointer, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(pointer) % alignment == 0)
    return Status();
  return Status::error("kvCache." + std::string(name) + " is not " + str(static_cast<long long>(alignment)) +
                       "-byte aligned");
}

/// The pointers and counts only one layout takes must be unset in the other.
Status checkUnset(const KvCacheArgs &c) {
  if (c.layout == KvCacheLayout::Contiguous) {
    if (c.blockTable || c.blockTableHost || c.numPages || c.pageSize || c.maxPagesPerSeq || c.blockTableStride)
      return Status::error("kvCache: blockTable, numPages, pageSize, maxPagesPerSeq and blockTableStride belong to "
                           "a paged cache (layout Paged); a contiguous cache leaves them 0");
    return Status();
  }
  if (c.cacheBatchIdx || c.cacheBatchIdxHost)
    return Status::error("kvCache.cacheBatchIdx is set on a paged cache; it selects rows of a contiguous cache only "
                         "(as flash-attn's cache_batch_idx): a paged cache's rows come from the block table");
  if (c.cacheBatch)
    return Status::error("kvCache.cacheBatch is " + str(c.cacheBatch) +
                         " on a paged cache; it counts the rows of a contiguous cache (a paged one has numPages)");
  return Status();
}

Status checkContiguous(const AttentionArgs &args) {
  const KvCacheArgs &c = args.kvCache;
  if (c.cacheBatch < 1)
    return Status::error("kvCache.cacheBatch is " + str(c.cacheBatch) +
                         "; a contiguous cache has at least one row (its first dimension)");
  if (!c.cacheBatchIdx && c.cacheBatch < args.batch)
    return Status::error("kvCache.cacheBatch is " + str(c.cacheBatch) + " but batch is " + str(args.batch) +
                         "; without cacheBatchIdx batch entry b reads cache row b, so the cache needs >= batch rows");
  if (c.cacheBatchIdxHost && !c.cacheBatchIdx)
    return Status::error("kvCache.cacheBatchIdxHost is set but cacheBatchIdx (the device array) is null");
  if (c.cacheBatchIdxHost)
    for (int b = 0; b < args.batch; ++b)
      if (c.cacheBatchIdxHost[b] < 0 || c.cacheBatchIdxHost[b] >= c.cacheBatch)
        return Status::error("kvCache.cacheBatchIdx[" + str(b) + "] = " + str(c.cacheBatchIdxHost[b]) +
                             "; accepted: 0 to cacheBatch - 1 = " + str(c.cacheBatch - 1));
  return Status();
}

Status checkPaged(const AttentionArgs &args) {
  const KvCacheArgs &c = args.kvCache;
  if (!isSupportedPageSize(c.pageSize))
    return Status::error("kvCache.pageSize is " + str(c.pageSize) +
                         "; accepted: 16, 32, 64, 128 or 256 (a power of "
                         "two, so that the kernels find a key's page with a shift)");
  if (!c.blockTable)
    return Status::error("kvCache.blockTable is null; a paged cache needs the device block table (batch x "
                         "maxPagesPerSeq int32 page indices)");
  if (Status s = checkAlignment("blockTable", c.blockTable, alignof(int)); !s.ok())
    return s;
  if (c.numPages < 1)
    return Status::error("kvCache.numPages is " + str(c.numPages) + "; the pool has at least one page");
  if (c.maxPagesPerSeq < 1)
    return Status::error("kvCache.maxPagesPerSeq is " + str(c.maxPagesPerSeq) +
                         "; the block table has at least one column");
  if (c.blockTableStride != 0 && c.blockTableStride < c.maxPagesPerSeq)
    return Status::error("kvCache.blockTableStride is " + str(c.blockTableStride) +
                         "; accepted: 0 (packed) or >= "
                         "maxPagesPerSeq = " +
                         str(c.maxPagesPerSeq));
  if (static_cast<long long>(c.maxPagesPerSeq) * c.pageSize != args.seqlenK)
    return Status::error("seqlenK is " + str(args.seqlenK) +
                         "; a paged cache's seqlenK is the keys a sequence can "
                         "hold, maxPagesPerSeq x pageSize = " +
                         str(static_cast<long long>(c.maxPagesPerSeq) * c.pageSize));
  if (c.blockTableHost) {
    for (int b = 0; b < args.batch; ++b) {
      const int *row = c.blockTableHost + b * c.blockTableRowStride();
      long long keys = c.cacheSeqlensHost ? static_cast<long long>(c.cacheSeqlensHost[b]) + c.seqlenNew : args.seqlenK;
      long long pages = std::min<long long>((keys + c.pageSize - 1) / c.pageSize, c.maxPagesPerSeq);
      for (long long i = 0; i < pages; ++i)
        if (row[i] < 0 || row[i] >= c.numPages)
          return Status::error("kvCache.blockTable[" + str(b) + "][" + str(i) + "] = " + str(row[i]) +
                               "; accepted: a page index from 0 to numPages - 1 = " + str(c.numPages - 1));
    }
  }
  return Status();
}

/// The rotary fields (KvCacheArgs::rotaryDim > 0): with new keys only, the tables' shape and pointers, and their
/// length against every position a call reads.
Status checkRotary(const AttentionArgs &args) {
  const KvCacheArgs &c = args.kvCache;
  if (c.rotaryDim < 0 || c.rotaryDim % 2 != 0 || c.rotaryDim > args.headDim)
    return Status::error("kvCache.rotaryDim is " + str(c.rotaryDim) +
                         "; accepted: 0 (no rotary embedding) or an even number from 2 to headDim = " +
                         str(args.headDim) + " (columns rotated in pairs)");
  if (c.rotaryDim == 0) {
    if (c.rotaryCos || c.rotarySin || c.seqlenRo || c.rotaryInterleaved)
      return Status::error("kvCache.rotaryCos, rotarySin, seqlenRo or rotaryInterleaved is set but rotaryDim is 0; "
                           "set rotaryDim (even, at most headDim) for rotary embedding, else leave them unset");
    return Status();
  }
  if (!c.kNew)
    return Status::error("kvCache.rotaryDim is " + str(c.rotaryDim) +
                         " but kNew/vNew are null; rotary embedding rotates Q and the keys a call appends (as "
                         "flash_attn_with_kvcache), so it needs new keys");
  for (auto [name, pointer] :
       {std::pair<std::string_view, const void *>{"rotaryCos", c.rotaryCos}, {"rotarySin", c.rotarySin}}) {
    if (!pointer)
      return Status::error("kvCache." + std::string(name) + " is null but rotaryDim is " + str(c.rotaryDim) +
                           "; pass the device table (seqlenRo x rotaryDim / 2, the call's dtype)");
    if (Status s = checkAlignment(name, pointer, 2); !s.ok())
      return s;
  }
  if (c.seqlenRo < 1)
    return Status::error("kvCache.seqlenRo is " + str(c.seqlenRo) + "; the rotary tables have at least one row");
  const long long rows = std::max(c.seqlenNew, args.seqlenQ);
  if (c.cacheSeqlensHost) {
    for (int b = 0; b < args.batch; ++b)
      if (c.cacheSeqlensHost[b] + rows > c.seqlenRo)
        return Status::error("kvCache.seqlenRo is " + str(c.seqlenRo) + " but sequence " + str(b) +
                             " rotates rows at " + "positions up to cacheSeqlens[" + str(b) +
                             "] + max(seqlenNew, seqlenQ) - 1 = " + str(c.cacheSeqlensHost[b] + rows - 1) +
                             "; the tables need that many rows plus one");
  } else if (c.seqlenRo < args.seqlenK) {
    return Status::error("kvCache.seqlenRo is " + str(c.seqlenRo) +
                         " but the cache holds seqlenK = " + str(args.seqlenK) +
                         " keys; without cacheSeqlensHost the rotary tables must cover every "
                         "position the cache holds (as flash-attn asks), or pass cacheSeqlensHost");
  }
  return Status();
}

} // namespace

bool isSupportedPageSize(int pageSize) {
  return pageSize >= kMinPageSize && pageSize <= kMaxPageSize && std::has_single_bit(static_cast<unsigned>(pageSize));
}

void KvCacheArgs::append(const void *k, const void *v, int seqlen, int headsKv, int headDim, int headDimV) {
  if (headDimV == 0)
    headDimV = headDim;
  kNew = k;
  vNew = v;
  seqlenNew = seqlen;
  kNewStride = {static_cast<long long>(seqlen) * headsKv * headDim, static_cast<long long>(headsKv) * headDim, headDim,
                1};
  vNewStride = {static_cast<long long>(seqlen) * headsKv * headDimV, static_cast<long long>(headsKv) * headDimV,
                headDimV, 1};
}

void KvCacheArgs::rotary(const void *cos, const void *sin, int rows, int dim, bool interleaved) {
  rotaryCos = cos;
  rotarySin = sin;
  seqlenRo = rows;
  rotaryDim = dim;
  rotaryInterleaved = interleaved;
}

long long pagedCacheRow(const int *blockTableRow, int pageSize, int numPages, int key) {
  const int page = std::clamp(blockTableRow[key / pageSize], 0, std::max(numPages - 1, 0));
  return static_cast<long long>(page) * pageSize + key % pageSize;
}

AttentionArgs AttentionArgs::contiguousCache(DType dtype, const void *q, const void *kCache, const void *vCache,
                                             void *o, float *lse, int batch, int seqlenQ, int cacheBatch,
                                             int cacheSeqlen, int headsQ, int headsKv, int headDim,
                                             const int *cacheSeqlens, int headDimV) {
  AttentionArgs args =
      contiguous(dtype, q, kCache, vCache, o, lse, batch, seqlenQ, cacheSeqlen, headsQ, headsKv, headDim, headDimV);
  args.kvCache.layout = KvCacheLayout::Contiguous;
  args.kvCache.cacheBatch = cacheBatch;
  args.kvCache.cacheSeqlens = cacheSeqlens;
  return args;
}

AttentionArgs AttentionArgs::pagedCache(DType dtype, const void *q, const void *kCache, const void *vCache, void *o,
                                        float *lse, int batch, int seqlenQ, int numPages, int pageSize,
                                        const int *blockTable, int maxPagesPerSeq, int headsQ, int headsKv, int headDim,
                                        const int *cacheSeqlens, int headDimV) {
  long long capacity = static_cast<long long>(maxPagesPerSeq) * pageSize;
  AttentionArgs args =
      contiguous(dtype, q, kCache, vCache, o, lse, batch, seqlenQ,
                 static_cast<int>(std::min<long long>(capacity, INT_MAX)), headsQ, headsKv, headDim, headDimV);
  // Pages, not sequences, are the caches' first dimension.
  args.kStride[0] = static_cast<long long>(pageSize) * args.kStride[1];
  args.vStride[0] = static_cast<long long>(pageSize) * args.vStride[1];
  args.kvCache.layout = KvCacheLayout::Paged;
  args.kvCache.numPages = numPages;
  args.kvCache.pageSize = pageSize;
  args.kvCache.blockTable = blockTable;
  args.kvCache.maxPagesPerSeq = maxPagesPerSeq;
  args.kvCache.cacheSeqlens = cacheSeqlens;
  return args;
}

namespace detail {

Status checkKvCacheArgs(const AttentionArgs &args) {
  const KvCacheArgs &c = args.kvCache;
  if (!c.enabled()) {
    if (c.layout != KvCacheLayout::None)
      return Status::error("kvCache.layout has value " + str(static_cast<int>(c.layout)) +
                           "; accepted: KvCacheLayout::None, Contiguous, Paged");
    KvCacheArgs unset;
    if (c.cacheSeqlens || c.cacheBatchIdx || c.blockTable || c.kNew || c.vNew || c.seqlenNew || c.cacheBatch ||
        c.numPages || c.pageSize || c.maxPagesPerSeq || c.cacheSeqlensHost || c.cacheBatchIdxHost || c.blockTableHost ||
        c.blockTableStride || c.kNewStride != unset.kNewStride || c.vNewStride != unset.vNewStride || c.rotaryCos ||
        c.rotarySin || c.rotaryDim || c.seqlenRo || c.rotaryInterleaved || c.dtype != KvCacheDtype::Query)
      return Status::error("kvCache has fields set but kvCache.layout is None; set layout to "
                           "KvCacheLayout::Contiguous or Paged for a call over a KV cache");
    return Status();
  }
  if (c.layout != KvCacheLayout::Contiguous && c.layout != KvCacheLayout::Paged)
    return Status::error("kvCache.layout has value " + str(static_cast<int>(c.layout)) +
                         "; accepted: KvCacheLayout::None, Contiguous, Paged");
  if (c.dtype != KvCacheDtype::Query && c.dtype != KvCacheDtype::E4M3)
    return Status::error("kvCache.dtype has value " + str(static_cast<int>(c.dtype)) +
                         "; accepted: KvCacheDtype::Query (the call's dtype), KvCacheDtype::E4M3");
  if (args.isVarlen())
    return Status::error("cuSeqlensQ/cuSeqlensK are set on a KV-cache call; a cache call takes dense Q "
                         "(B x Sq x Hq x D) and per-sequence key counts in kvCache.cacheSeqlens");
  if (args.seqlenK < 1)
    return Status::error("seqlenK is " + str(args.seqlenK) +
                         "; in a KV-cache call it is the keys a sequence's cache can hold (>= 1)");
  if (Status s = checkUnset(c); !s.ok())
    return s;
  if (c.cacheSeqlens)
    if (Status s = checkAlignment("cacheSeqlens", c.cacheSeqlens, alignof(int)); !s.ok())
      return s;
  if (c.cacheBatchIdx)
    if (Status s = checkAlignment("cacheBatchIdx", c.cacheBatchIdx, alignof(int)); !s.ok())
      return s;
  if (c.cacheSeqlensHost && !c.cacheSeqlens)
    return Status::error("kvCache.cacheSeqlensHost is set but cacheSeqlens (the device array) is null");
  // New keys and values.
  if (!c.kNew != !c.vNew)
    return Status::error(std::string("kvCache.") + (c.kNew ? "vNew" : "kNew") + " is null but " +
                         (c.kNew ? "kNew" : "vNew") + " is set; new keys and values come together (both or neither)");
  if (c.kNew) {
    if (c.seqlenNew < 1 || c.seqlenNew > args.seqlenK)
      return Status::error("kvCache.seqlenNew is " + str(c.seqlenNew) + "; with kNew/vNew accepted: 1 to seqlenK = " +
                           str(args.seqlenK) + " (the keys a sequence's cache can hold)");
    if (!c.cacheSeqlens)
      return Status::error("kvCache.kNew is set but cacheSeqlens is null; new keys are written at each sequence's "
                           "cacheSeqlens[b], so pass it");
    if (args.seqlenQ < 1)
      return Status::error("seqlenQ is 0 but kvCache.kNew is set; a call that appends keys attends at least one "
                           "query row");
    for (auto [name, pointer] : {std::pair<std::string_view, const void *>{"kNew", c.kNew}, {"vNew", c.vNew}})
      if (Status s = checkAlignment(name, pointer, kTensorAlignmentBytes); !s.ok())
        return s;
    if (Status s = checkNewStrides("kNewStride", c.kNewStride); !s.ok())
      return s;
    if (Status s = checkNewStrides("vNewStride", c.vNewStride); !s.ok())
      return s;
    const long long chunks = static_cast<long long>(c.seqlenNew) * (args.headDim + args.headDimV) / kChunkElements;
    if ((chunks + FLASHTILE_APPEND_THREADS - 1) / FLASHTILE_APPEND_THREADS > INT_MAX)
      return Status::error("kvCache.seqlenNew is " + str(c.seqlenNew) + "; too many rows for one append launch");
  } else if (c.seqlenNew != 0) {
    return Status::error("kvCache.seqlenNew is " + str(c.seqlenNew) + " but kNew/vNew are null; 0 without new keys");
  }
  if (c.cacheSeqlensHost)
    for (int b = 0; b < args.batch; ++b)
      if (c.cacheSeqlensHost[b] < 0 || c.cacheSeqlensHost[b] > args.seqlenK - c.seqlenNew)
        return Status::error("kvCache.cacheSeqlens[" + str(b) + "] = " + str(c.cacheSeqlensHost[b]) +
                             "; accepted: 0 to seqlenK - seqlenNew = " + str(args.seqlenK - c.seqlenNew) +
                             " (the cache must hold the cached and the new keys)");
  if (Status s = checkRotary(args); !s.ok())
    return s;
  return c.layout == KvCacheLayout::Contiguous ? checkContiguous(args) : checkPaged(args);
}

std::string rotaryPairs(const AttentionArgs &args) {
  if (!args.kvCache.enabled() || args.kvCache.rotaryDim == 0)
    return "";
  return std::string(args.kvCache.rotaryInterleaved ? kRotaryInterleaved : kRotaryHalves);
}

void fillKvCacheParams(const AttentionArgs &args, FlashtileFwdParams &params) {
  const KvCacheArgs &c = args.kvCache;
  if (!c.enabled())
    return;
  const bool paged = c.layout == KvCacheLayout::Paged;
  params.kvCache = paged ? 2 : 1;
  // The kernel's sequence view finds each sequence's cache row (or pages) itself.
  params.kBatchStride = params.vBatchStride = 0;
  params.kCacheBatchStride = args.kStride[0];
  params.vCacheBatchStride = args.vStride[0];
  params.cacheBatches = paged ? c.numPages : c.cacheBatch;
  params.cacheCapacity = args.seqlenK;
  params.pageShift = paged ? std::countr_zero(static_cast<unsigned>(c.pageSize)) : 0;
  params.cacheSeqlens = c.cacheSeqlens;
  params.cacheBatchIdx = c.cacheBatchIdx;
  params.blockTable = c.blockTable;
  params.blockTableStride = paged ? c.blockTableRowStride() : 0;
  params.kNew = c.kNew;
  params.vNew = c.vNew;
  params.seqlenNew = c.seqlenNew;
  params.kNewBatchStride = c.kNewStride[0];
  params.kNewRowStride = c.kNewStride[1];
  params.kNewHeadStride = c.kNewStride[2];
  params.vNewBatchStride = c.vNewStride[0];
  params.vNewRowStride = c.vNewStride[1];
  params.vNewHeadStride = c.vNewStride[2];
  params.rotaryCos = c.rotaryCos;
  params.rotarySin = c.rotarySin;
  params.rotaryDim = c.rotaryDim;
  params.seqlenRo = c.seqlenRo;
}

bool checkKvCacheValuesOnDevice() {
  const char *value = std::getenv("FLASHTILE_CHECK_KVCACHE");
  return value && *value && std::string_view(value) != "0";
}

Status checkDeviceKvCacheValues(const CudaDriver &driver, const AttentionArgs &args) {
  const KvCacheArgs &c = args.kvCache;
  auto copy = [&](const int *device, std::vector<int> &host, size_t count, long long offset,
                  const char *name) -> Status {
    return driver.check(
        driver.cuMemcpyDtoH_v2(host.data() + offset, reinterpret_cast<CUdeviceptr>(device), count * sizeof(int)),
        std::string("cuMemcpyDtoH(") + name + ")");
  };
  const size_t batch = static_cast<size_t>(args.batch);
  std::vector<int> seqlens, batchIdx, table;
  AttentionArgs checked = args;
  if (c.cacheSeqlens) {
    seqlens.resize(batch);
    if (Status s = copy(c.cacheSeqlens, seqlens, batch, 0, "cache_seqlens"); !s.ok())
      return s;
    checked.kvCache.cacheSeqlensHost = seqlens.data();
  }
  if (c.cacheBatchIdx) {
    batchIdx.resize(batch);
    if (Status s = copy(c.cacheBatchIdx, batchIdx, batch, 0, "cache_batch_idx"); !s.ok())
      return s;
    checked.kvCache.cacheBatchIdxHost = batchIdx.data();
  }
  if (c.layout == KvCacheLayout::Paged) {
    // Packed on the host (row stride maxPagesPerSeq): only the entries a sequence may read are copied.
    const size_t columns = static_cast<size_t>(c.maxPagesPerSeq);
    table.resize(batch * columns);
    const bool packed = c.blockTableRowStride() == c.maxPagesPerSeq;
    for (size_t b = 0; b < (packed ? 1 : batch); ++b)
      if (Status s = copy(c.blockTable + b * c.blockTableRowStride(), table, packed ? batch * columns : columns,
                          b * columns, "block_table");
          !s.ok())
        return s;
    checked.kvCache.blockTableHost = table.data();
    checked.kvCache.blockTableStride = 0;
  }
  return checkKvCacheArgs(checked);
}

} // namespace detail

} // namespace flashtile
