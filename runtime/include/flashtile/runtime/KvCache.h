// KvCache.h — attention over a KV cache (flash_attn_with_kvcache): the arguments a call adds to AttentionArgs.
//
// A cache call is an AttentionArgs whose kvCache.layout is not None. Its K and V (AttentionArgs::k, v, kStride,
// vStride) are the caches:
//   contiguous — (cacheBatch, S_cache, Hkv, D): strides {batch, seq, head, dim}; seqlenK = S_cache, the keys a
//                sequence can hold. Batch entry b reads cache row cacheBatchIdx[b] (b when null);
//   paged      — (numPages, pageSize, Hkv, D): strides {page, row in the page, head, dim}; seqlenK = maxPagesPerSeq
//                x pageSize. Key row r of batch entry b is row r % pageSize of page blockTable[b][r / pageSize].
// Sequence b sees cacheSeqlens[b] cached keys plus seqlenNew new ones (causal and windows align to the bottom
// right of that many keys); with kNew/vNew (B x seqlenNew x Hkv x D) the new rows are written into the cache at
// rows cacheSeqlens[b] ... cacheSeqlens[b] + seqlenNew - 1 by the same call (the cache holds them afterwards).
// Without cacheSeqlens every sequence holds seqlenK keys (and kNew is refused: it has nowhere to go).
//
// Checked on the host (Runtime::validate): shapes, strides, alignment, page size, null pointers and, where the
// caller passes host copies (cacheSeqlensHost, cacheBatchIdxHost, blockTableHost), their values. Device values are
// never trusted to stay in range: kernels clamp cacheSeqlens[b] to [0, seqlenK - seqlenNew], cacheBatchIdx[b] to
// [0, cacheBatch) and block-table entries to [0, numPages), so a bad value gives wrong numbers, never an access
// outside the tensors, and they record the first such value in the runtime's error record (KernelAbi.h:
// FlashtileKvError), which Runtime::checkErrors reports with the call that read it. FLASHTILE_CHECK_KVCACHE=1 copies
// the device values to the host and checks them before every cache call.
#ifndef FLASHTILE_RUNTIME_KVCACHE_H
#define FLASHTILE_RUNTIME_KVCACHE_H

#include <array>

namespace flashtile {

enum class KvCacheLayout { None, Contiguous, Paged };

/// Page sizes of paged caches: powers of two from 16 to 256 keys, so that a key row's page and row within it are a
/// shift and a mask in the kernels' copy loops (vLLM's 16 and 32, flash-attn's 256 and the 64 in between).
inline constexpr int kMinPageSize = 16;
inline constexpr int kMaxPageSize = 256;
bool isSupportedPageSize(int pageSize);

/// The element type of a cache's K and V. Query: the call's dtype (the default). E4M3: float8_e4m3fn while Q is bf16
/// or f16 (AttentionArgs::dtype) — an FP8 KV cache read by a decode step as flash-attn 3 reads one: the cached value
/// of a (batch entry b, K/V head h) is cache · kDescale[b][h] (vDescale for V; AttentionArgs::kDescale/vDescale, null
/// = 1), kDescale joins the softmax scale and vDescale multiplies O. kNew/vNew and the rotary tables stay of the
/// call's dtype: the append kernel writes each new value, rotated first, as e4m3(value / descale) (nearest, ties to
/// even, saturating at ±448). The caches' batch (page), seq and head strides are multiples of 16 elements.
enum class KvCacheDtype { Query, E4M3 };

struct KvCacheArgs {
  KvCacheLayout layout = KvCacheLayout::None;
  /// The caches' element type (KvCacheDtype).
  KvCacheDtype dtype = KvCacheDtype::Query;
  /// Contiguous: rows of the cache (its first dimension); at least AttentionArgs::batch without cacheBatchIdx.
  int cacheBatch = 0;
  /// Paged: pages in the pool (the caches' first dimension) and keys a page (isSupportedPageSize).
  int numPages = 0;
  int pageSize = 0;
  /// Paged: device int32 batch x blockTableStride page indices (the first maxPagesPerSeq of each row are used).
  const int *blockTable = nullptr;
  int maxPagesPerSeq = 0;
  long long blockTableStride = 0; ///< 0 means maxPagesPerSeq (a packed table)
  /// Device int32 (batch): keys already in sequence b's cache; null: every sequence holds seqlenK keys.
  const int *cacheSeqlens = nullptr;
  /// Device int32 (batch): the cache row of batch entry b (contiguous caches only, as in flash-attn); null: b.
  const int *cacheBatchIdx = nullptr;
  /// New keys and values appended at cacheSeqlens (both or neither): device B x seqlenNew x Hkv x D (Dv for V),
  /// strides {batch, seq, head, dim} as AttentionArgs' (contiguous last dim, multiples of 8 elements).
  const void *kNew = nullptr;
  const void *vNew = nullptr;
  int seqlenNew = 0;
  std::array<long long, 4> kNewStride{}, vNewStride{};
  /// Optional host copies, checked by Runtime::validate: cacheSeqlens in [0, seqlenK - seqlenNew], cacheBatchIdx in
  /// [0, cacheBatch), and the block-table entries a sequence reads in [0, numPages) (with cacheSeqlensHost the first
  /// ceil((cacheSeqlens[b] + seqlenNew) / pageSize) of row b, else all maxPagesPerSeq).
  const int *cacheSeqlensHost = nullptr;
  const int *cacheBatchIdxHost = nullptr;
  const int *blockTableHost = nullptr;
  /// Rotary embedding of Q and the new keys (flash_attn_with_kvcache's rotary_cos/rotary_sin), with kNew/vNew only:
  /// rotaryDim > 0 (even, at most headDim) rotates the first rotaryDim columns of each row, in pairs (2i, 2i + 1)
  /// when rotaryInterleaved (GPT-J), else (i, i + rotaryDim / 2) (GPT-NeoX); the other columns and V are not rotated.
  /// Pair i at position `pos` turns by cos = rotaryCos[pos][i], sin = rotarySin[pos][i]: device tables of the call's
  /// dtype, seqlenRo x rotaryDim / 2, packed rows. New key row i sits at cacheSeqlens[b] + i; query row i at
  /// cacheSeqlens[b] + i when the variant masks (causal, windows: flash-attn's causal or local), else every query
  /// row at cacheSeqlens[b]. Checked: seqlenRo covers cacheSeqlens[b] + max(seqlenNew, seqlenQ) for every b given
  /// cacheSeqlensHost, else seqlenRo >= seqlenK (every position the cache holds, as flash-attn asks).
  const void *rotaryCos = nullptr;
  const void *rotarySin = nullptr;
  int rotaryDim = 0;
  int seqlenRo = 0;
  bool rotaryInterleaved = false;

  bool enabled() const { return layout != KvCacheLayout::None; }
  /// A cache of e4m3 (dtype E4M3) in a call over a cache.
  bool e4m3() const { return enabled() && dtype == KvCacheDtype::E4M3; }
  long long blockTableRowStride() const { return blockTableStride ? blockTableStride : maxPagesPerSeq; }
  /// Sets kNew/vNew with packed strides for `batch` x seqlenNew x headsKv x headDim (headDimV) tensors.
  void append(const void *k, const void *v, int seqlen, int headsKv, int headDim, int headDimV = 0);
  /// Sets the rotary tables (seqlenRo x rotaryDim / 2 each) and the pairs.
  void rotary(const void *cos, const void *sin, int seqlenRo, int rotaryDim, bool interleaved = false);
};

/// The key row a paged cache holds key `key` of a sequence at, as the kernels compute it: page
/// blockTableRow[key / pageSize] (clamped to [0, numPages)) times pageSize plus key % pageSize. The tests model
/// the kernels' addressing with it; `blockTableRow` must have key / pageSize + 1 entries.
long long pagedCacheRow(const int *blockTableRow, int pageSize, int numPages, int key);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_KVCACHE_H
