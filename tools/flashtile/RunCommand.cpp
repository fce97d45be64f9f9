//===- RunCommand.cpp - run and info: the commands that use the GPU -------===//
//
// `run` checks one forward against the reference (GpuReference.h) and times it. No MLIR here: this file is also
// in the runtime-only build, where kernels come from an ahead-of-time directory.
#include "Commands.h"

#include "GpuReference.h"
#include "HostRotary.h"
#include "flashtile/runtime/ArchNames.h"
#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/SplitKv.h"
#include "flashtile/runtime/Version.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace flashtile::cli {

namespace {

using reference::DeviceBuffer;
using reference::GpuReference;

constexpr int kDefaultIters = 20;
constexpr int kDefaultWarmup = 5;
/// Inputs are N(0, 1) from this seed unless --seed is given, so that two runs of one shape see the same data.
constexpr unsigned long long kDefaultSeed = 1;
/// Input sets smaller than this are replicated and cycled through while timing, so that a call does not find its
/// inputs in L2 (50-60 MB on H100/H200) left there by the previous call.
constexpr size_t kRotationBytes = size_t(200) << 20;

struct RunOptions {
  std::string variant = "none"; // "none" or "causal"
  std::string dtypeName = "bf16";
  DType dtype = DType::BF16;
  int headDim = 128, headDimV = 0, batch = 0, headsQ = 0, headsKv = 0, seqlenQ = 0, seqlenK = 0; // 0: as typed
  int iters = kDefaultIters, warmup = kDefaultWarmup;
  std::string scaleText;
  float scale = 0.f; // 0: 1/sqrt(headDim)
  unsigned long long seed = kDefaultSeed;
  std::string aotDir;         // empty: JIT
  int numSplits = 0;          // split-KV kernels (decode schedule): 0 the runtime's choice, else forced
  std::string cache = "none"; // K/V read from a KV cache: none, contiguous or paged
  int pageSize = 0;           // --cache paged; 0: kDefaultPageSize
  int append = 0;             // --cache: the last `append` keys are new keys the call appends
  int rotaryDim = 0;          // --append: rotary embedding of Q and the appended keys over this many columns
  bool rotaryInterleaved = false;
  bool causal() const { return variant == "causal"; }
  bool usesCache() const { return cache != "none"; }
  bool paged() const { return cache == "paged"; }
};

/// The page size of `run --cache paged` without --page-size: the benchmark page.
constexpr int kDefaultPageSize = 64;

/// Rows of run's rotary tables: every key position, and the query rows a causal call puts past the last key
/// (seqlenQ > --append).
int rotaryRows(const RunOptions &o) { return o.seqlenK + o.seqlenQ; }

/// Limits of `run`'s shape flags: what one GPU's memory could hold, and what the kernels' int arithmetic allows.
constexpr int kMaxDimension = 1 << 24;
constexpr int kMaxIters = 1 << 20;

/// Cross-flag checks the parser cannot do alone.
Status checkRunOptions(RunOptions &o, const std::string &seed) {
  if (!o.headDimV)
    o.headDimV = o.headDim;
  if (!supportsHeadDims(o.headDim, o.headDimV))
    return Status::error("--head-dim " + std::to_string(o.headDim) + " --head-dim-v " + std::to_string(o.headDimV) +
                         " is not supported; accepted: " + supportedHeadDimsText());
  if (!o.headsKv)
    o.headsKv = o.headsQ;
  if (o.headsQ % o.headsKv != 0)
    return Status::error("--heads-kv " + std::to_string(o.headsKv) + " must divide --heads " +
                         std::to_string(o.headsQ) + " (each KV head serves a group of query heads)");
  if (o.pageSize && !o.paged())
    return Status::error("--page-size " + std::to_string(o.pageSize) + " needs --cache paged");
  if (o.paged() && !o.pageSize)
    o.pageSize = kDefaultPageSize;
  if (!o.usesCache() && o.append)
    return Status::error("--append " + std::to_string(o.append) +
                         " needs --cache contiguous or paged (new keys are "
                         "appended to a KV cache)");
  if (o.usesCache() && (o.seqlenK < 1 || o.append > o.seqlenK))
    return Status::error("--cache: --seqlen-k (" + std::to_string(o.seqlenK) + ") must be >= 1 and >= --append (" +
                         std::to_string(o.append) + "): the cache holds seqlen-k keys after the call");
  if (o.rotaryInterleaved && !o.rotaryDim)
    return Status::error("--rotary-interleaved needs --rotary-dim");
  if (o.rotaryDim && (!o.usesCache() || o.append < 1))
    return Status::error("--rotary-dim " + std::to_string(o.rotaryDim) +
                         " needs --cache contiguous or paged and --append >= 1 (Q and the appended keys are rotated, "
                         "as flash_attn_with_kvcache's rotary_cos/rotary_sin)");
  if (o.rotaryDim % 2 != 0 || o.rotaryDim > o.headDim)
    return Status::error("--rotary-dim " + std::to_string(o.rotaryDim) +
                         ": accepted an even number from 2 to "
                         "--head-dim (" +
                         std::to_string(o.headDim) + ")");
  if (!seed.empty()) {
    auto [end, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), o.seed);
    if (ec != std::errc() || end != seed.data() + seed.size())
      return Status::error("--seed: '" + excerpt(seed) + "' is not an integer from 0 to 18446744073709551615");
  }
  return Status();
}

void addRunFlags(CLI::App &command, RunOptions &o, std::string &seed) {
  command.add_option("--variant", o.variant, "none or causal (the reference knows these two)")
      ->check(oneOf("variant", {"none", "causal"}))
      ->capture_default_str();
  command.add_option("--dtype", o.dtypeName, "Element type")
      ->check(oneOf("dtype", {"bf16", "f16"}))
      ->capture_default_str();
  command.add_option("--head-dim", o.headDim, "Head dim of Q and K")->check(intRange(1, 1024))->capture_default_str();
  command.add_option("--head-dim-v", o.headDimV, "Head dim of V and O (default: --head-dim)")->check(intRange(1, 1024));
  command.add_option("--batch", o.batch, "Batch size")->required()->check(intRange(1, kMaxDimension));
  command.add_option("--heads", o.headsQ, "Query heads")->required()->check(intRange(1, kMaxDimension));
  command.add_option("--heads-kv", o.headsKv, "Key/value heads (default: --heads)")->check(intRange(1, kMaxDimension));
  command.add_option("--seqlen-q", o.seqlenQ, "Query rows per sequence")->required()->check(intRange(1, kMaxDimension));
  command.add_option("--seqlen-k", o.seqlenK, "Key rows per sequence")->required()->check(intRange(0, kMaxDimension));
  command.add_option("--aot-dir", o.aotDir, "Run kernels from this library (flashtile aot) instead of the JIT")
      ->check(nonEmpty());
  command.add_option("--iters", o.iters, "Timed forwards")->check(intRange(1, kMaxIters))->capture_default_str();
  command.add_option("--warmup", o.warmup, "Untimed forwards first")
      ->check(intRange(0, kMaxIters))
      ->capture_default_str();
  command.add_option("--scale", o.scaleText, "Softmax scale (default 1/sqrt(head_dim))")
      ->check(CLI::Validator(
          [](std::string &text) -> std::string {
            char *end = nullptr;
            const float scale = std::strtof(text.c_str(), &end);
            if (text.empty() || *end != '\0' || !std::isfinite(scale) || scale <= 0.f)
              return "'" + excerpt(text) + "' is not a positive finite number";
            return "";
          },
          "S"));
  command.add_option("--seed", seed, "Seed of the N(0, 1) inputs (0 to 2^64-1)");
  command
      .add_option("--splits", o.numSplits,
                  "Key-range splits of decode-sized calls (<= " + std::to_string(kDecodeMaxSeqlenQ) +
                      " query rows: the decode schedule); 0: the runtime's choice")
      ->check(intRange(0, kMaxSplits))
      ->capture_default_str();
  command
      .add_option("--cache", o.cache,
                  "Read K/V from a KV cache (flash_attn_with_kvcache): none, contiguous (a cache row a sequence), "
                  "or paged (pages of --page-size keys in shuffled order through a block table)")
      ->check(oneOf("cache layout", {"none", "contiguous", "paged"}))
      ->capture_default_str();
  command
      .add_option("--page-size", o.pageSize,
                  "Keys a page of --cache paged (default " + std::to_string(kDefaultPageSize) + ")")
      ->check(oneOf("page size", {"16", "32", "64", "128", "256"}));
  command
      .add_option("--append", o.append,
                  "With --cache: the last N of the --seqlen-k keys are new keys the call appends to the cache "
                  "(the check then also proves the append)")
      ->check(intRange(0, kMaxDimension))
      ->capture_default_str();
  command
      .add_option("--rotary-dim", o.rotaryDim,
                  "With --append: rotary embedding (RoPE, base 10000 tables of --seqlen-k + --seqlen-q positions) of the first N "
                  "columns of Q and the appended keys; 0: none")
      ->check(intRange(0, kMaxDimension))
      ->capture_default_str();
  addSwitch(command, "--rotary-interleaved", o.rotaryInterleaved,
            "With --rotary-dim: rotate pairs (2i, 2i + 1) (GPT-J) instead of (i, i + N / 2) (GPT-NeoX)");
}

/// The (query, key) pairs a forward attends: all Sq x Sk, or for bottom-right causal masking the keys
/// j <= i + Sk - Sq of each query i.
double attendedPairs(const RunOptions &o) {
  if (!o.causal())
    return double(o.seqlenQ) * o.seqlenK;
  double pairs = 0;
  for (long long i = 0; i < o.seqlenQ; ++i)
    pairs += double(std::clamp<long long>(i + o.seqlenK - o.seqlenQ + 1, 0, o.seqlenK));
  return pairs;
}

/// Q·Kᵀ and P·V: 2 FLOPs per multiply-add, headDim (headDimV) multiply-adds each, per attended pair, batch and
/// query head.
double forwardFlops(const RunOptions &o) {
  return 2.0 * o.batch * o.headsQ * double(o.headDim + o.headDimV) * attendedPairs(o);
}

/// `copies` packed input/output sets side by side (each tensor's copies contiguous), to cycle through in timing.
struct InputSets {
  size_t copies = 0;
  size_t qElems = 0, kElems = 0, vElems = 0, oElems = 0, lseElems = 0; // per set
  DeviceBuffer q, k, v, o, lse;
  // --cache: per set, caches that hold each sequence's first seqlenK - append keys (the rest are appended by the
  // call from k/v), device cache_seqlens and, paged, a shuffled block table.
  size_t kCacheElems = 0, vCacheElems = 0;
  int pagesPerSeq = 0;
  DeviceBuffer kCache, vCache, cacheSeqlens, blockTable;
  DeviceBuffer rotaryCos, rotarySin; // --rotary-dim: seqlenK x rotaryDim / 2 tables, shared by the sets

  AttentionArgs args(const RunOptions &opt, size_t set) const {
    const size_t lowBytes = sizeof(uint16_t);
    if (opt.usesCache())
      return cacheArgs(opt, set);
    AttentionArgs a = AttentionArgs::contiguous(
        opt.dtype, q.as<const void>(set * qElems * lowBytes), k.as<const void>(set * kElems * lowBytes),
        v.as<const void>(set * vElems * lowBytes), o.as<void>(set * oElems * lowBytes),
        lse.as<float>(set * lseElems * sizeof(float)), opt.batch, opt.seqlenQ, opt.seqlenK, opt.headsQ, opt.headsKv,
        opt.headDim, opt.headDimV);
    a.softmaxScale = opt.scale;
    a.variant = opt.variant;
    a.numSplits = opt.numSplits;
    return a;
  }

  AttentionArgs cacheArgs(const RunOptions &opt, size_t set) const {
    const size_t lowBytes = sizeof(uint16_t);
    const int *seqlens = cacheSeqlens.as<const int>(set * opt.batch * sizeof(int));
    const void *kc = kCache.as<const void>(set * kCacheElems * lowBytes),
               *vc = vCache.as<const void>(set * vCacheElems * lowBytes);
    void *out = o.as<void>(set * oElems * lowBytes);
    float *lseOut = lse.as<float>(set * lseElems * sizeof(float));
    const void *query = q.as<const void>(set * qElems * lowBytes);
    AttentionArgs a =
        opt.paged()
            ? AttentionArgs::pagedCache(opt.dtype, query, kc, vc, out, lseOut, opt.batch, opt.seqlenQ,
                                        opt.batch * pagesPerSeq, opt.pageSize,
                                        blockTable.as<const int>(set * opt.batch * pagesPerSeq * sizeof(int)),
                                        pagesPerSeq, opt.headsQ, opt.headsKv, opt.headDim, seqlens, opt.headDimV)
            : AttentionArgs::contiguousCache(opt.dtype, query, kc, vc, out, lseOut, opt.batch, opt.seqlenQ, opt.batch,
                                             opt.seqlenK, opt.headsQ, opt.headsKv, opt.headDim, seqlens, opt.headDimV);
    if (opt.append > 0) {
      // The new keys are the last `append` rows of each sequence of the dense K/V the reference reads.
      const long long rowsK = static_cast<long long>(opt.headsKv) * opt.headDim,
                      rowsV = static_cast<long long>(opt.headsKv) * opt.headDimV;
      const size_t first = size_t(opt.seqlenK - opt.append);
      a.kvCache.kNew = k.as<const void>((set * kElems + first * rowsK) * lowBytes);
      a.kvCache.vNew = v.as<const void>((set * vElems + first * rowsV) * lowBytes);
      a.kvCache.seqlenNew = opt.append;
      a.kvCache.kNewStride = {opt.seqlenK * rowsK, rowsK, opt.headDim, 1};
      a.kvCache.vNewStride = {opt.seqlenK * rowsV, rowsV, opt.headDimV, 1};
    }
    if (opt.rotaryDim > 0)
      a.kvCache.rotary(rotaryCos.as<const void>(), rotarySin.as<const void>(), rotaryRows(opt), opt.rotaryDim,
                       opt.rotaryInterleaved);
    a.softmaxScale = opt.scale;
    a.variant = opt.variant;
    a.numSplits = opt.numSplits;
    return a;
  }
};

/// --cache: fills each set's caches from its dense K/V (the keys before the appended ones), cache_seqlens and, for
/// a paged cache, a block table whose pages are a shuffled permutation of the pool.
Status makeCaches(const RunOptions &opt, InputSets &sets) {
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  const size_t n = sets.copies, B = opt.batch, lowBytes = sizeof(uint16_t);
  const size_t rowK = size_t(opt.headsKv) * opt.headDim * lowBytes,
               rowV = size_t(opt.headsKv) * opt.headDimV * lowBytes;
  sets.pagesPerSeq = opt.paged() ? (opt.seqlenK + opt.pageSize - 1) / opt.pageSize : 0;
  const size_t rowsPerSeq = opt.paged() ? size_t(sets.pagesPerSeq) * opt.pageSize : size_t(opt.seqlenK);
  sets.kCacheElems = B * rowsPerSeq * opt.headsKv * opt.headDim;
  sets.vCacheElems = B * rowsPerSeq * opt.headsKv * opt.headDimV;
  for (auto [buffer, bytes] : {std::pair{&sets.kCache, n * sets.kCacheElems * lowBytes},
                               {&sets.vCache, n * sets.vCacheElems * lowBytes},
                               {&sets.cacheSeqlens, n * B * sizeof(int)},
                               {&sets.blockTable, n * B * std::max(sets.pagesPerSeq, 1) * sizeof(int)}})
    if (Status s = buffer->allocate(bytes); !s.ok())
      return s;
  // Built on the host from the dense K/V (a copy there and back, once). Rows past the cached keys (where the call
  // appends) start as NaN: a missed append fails the check.
  std::vector<unsigned char> kDense, vDense;
  if (Status s = sets.k.download(kDense); !s.ok())
    return s;
  if (Status s = sets.v.download(vDense); !s.ok())
    return s;
  std::vector<unsigned char> kHost(sets.kCache.bytes(), reference::kPoisonByte),
      vHost(sets.vCache.bytes(), reference::kPoisonByte);
  const int cached = opt.seqlenK - opt.append;
  std::vector<int> seqlens(n * B, cached), table(n * B * std::max(sets.pagesPerSeq, 1));
  unsigned long long state = opt.seed * 0x9E3779B97F4A7C15ULL + 1;
  auto random = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  for (size_t set = 0; set < n; ++set) {
    const size_t pages = B * sets.pagesPerSeq;
    std::vector<int> order(pages);
    for (size_t i = 0; i < pages; ++i)
      order[i] = int(i);
    for (size_t i = pages; i > 1; --i)
      std::swap(order[i - 1], order[random() % i]);
    std::copy(order.begin(), order.end(), table.begin() + set * pages);
    for (size_t b = 0; b < B; ++b) {
      // Cached rows [0, cached) of sequence b, a page at a time (or all at once for a contiguous cache).
      const size_t chunk = opt.paged() ? size_t(opt.pageSize) : size_t(opt.seqlenK);
      for (size_t first = 0; first < size_t(cached); first += chunk) {
        const size_t rows = std::min(chunk, size_t(cached) - first);
        const size_t dstRow =
            opt.paged() ? size_t(order[b * sets.pagesPerSeq + first / chunk]) * opt.pageSize : b * rowsPerSeq + first;
        const size_t srcRow = b * opt.seqlenK + first;
        for (auto [dst, src, row, cacheElems, elems] :
             {std::tuple{&kHost, &kDense, rowK, sets.kCacheElems, sets.kElems},
              {&vHost, &vDense, rowV, sets.vCacheElems, sets.vElems}})
          std::copy_n(src->begin() + (set * elems * lowBytes + srcRow * row), rows * row,
                      dst->begin() + (set * cacheElems * lowBytes + dstRow * row));
      }
    }
  }
  for (auto [buffer, host] : {std::pair{&sets.kCache, &kHost}, {&sets.vCache, &vHost}})
    if (Status s = d.check(d.cuMemcpyHtoD_v2(buffer->address(), host->data(), host->size()), "cuMemcpyHtoD (KV cache)");
        !s.ok())
      return s;
  if (Status s = d.check(d.cuMemcpyHtoD_v2(sets.cacheSeqlens.address(), seqlens.data(), seqlens.size() * sizeof(int)),
                         "cuMemcpyHtoD (cache_seqlens)");
      !s.ok())
    return s;
  if (Status s = d.check(d.cuMemcpyHtoD_v2(sets.blockTable.address(), table.data(), table.size() * sizeof(int)),
                         "cuMemcpyHtoD (block table)");
      !s.ok())
    return s;
  if (opt.rotaryDim > 0) {
    std::vector<uint16_t> cos, sin;
    reference::ropeTables(rotaryRows(opt), opt.rotaryDim, opt.dtype, cos, sin);
    for (auto [buffer, host] : {std::pair{&sets.rotaryCos, &cos}, {&sets.rotarySin, &sin}}) {
      if (Status s = buffer->allocate(host->size() * sizeof(uint16_t)); !s.ok())
        return s;
      if (Status s = d.check(d.cuMemcpyHtoD_v2(buffer->address(), host->data(), host->size() * sizeof(uint16_t)),
                             "cuMemcpyHtoD (rotary tables)");
          !s.ok())
        return s;
    }
  }
  return reference::synchronize("KV cache set-up");
}

/// --rotary-dim: set 0's Q and K rotated on the host as the call rotates them (query row i at cached + i under
/// causal masking, else every row at cached; appended key row j >= cached at j), into `q` and `k`.
Status rotatedInputs(const RunOptions &opt, const InputSets &sets, DeviceBuffer &q, DeviceBuffer &k) {
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  std::vector<uint16_t> qHost, kHost, cos, sin;
  if (Status s = sets.q.download(qHost, 0, sets.qElems); !s.ok())
    return s;
  if (Status s = sets.k.download(kHost, 0, sets.kElems); !s.ok())
    return s;
  reference::ropeTables(rotaryRows(opt), opt.rotaryDim, opt.dtype, cos, sin);
  const int cached = opt.seqlenK - opt.append;
  for (int b = 0; b < opt.batch; ++b) {
    for (int i = 0; i < opt.seqlenQ; ++i)
      for (int h = 0; h < opt.headsQ; ++h)
        reference::rotateRow(&qHost[((size_t(b) * opt.seqlenQ + i) * opt.headsQ + h) * opt.headDim],
                             cached + (opt.causal() ? i : 0), cos, sin, opt.rotaryDim, opt.rotaryInterleaved,
                             opt.dtype);
    for (int j = cached; j < opt.seqlenK; ++j)
      for (int h = 0; h < opt.headsKv; ++h)
        reference::rotateRow(&kHost[((size_t(b) * opt.seqlenK + j) * opt.headsKv + h) * opt.headDim], j, cos, sin,
                             opt.rotaryDim, opt.rotaryInterleaved, opt.dtype);
  }
  for (auto [buffer, host] : {std::pair{&q, &qHost}, {&k, &kHost}}) {
    if (Status s = buffer->allocate(host->size() * sizeof(uint16_t)); !s.ok())
      return s;
    if (Status s = d.check(d.cuMemcpyHtoD_v2(buffer->address(), host->data(), host->size() * sizeof(uint16_t)),
                           "cuMemcpyHtoD (rotated Q and K)");
        !s.ok())
      return s;
  }
  return Status();
}

Status makeInputSets(const RunOptions &opt, const GpuReference &ref, InputSets &sets) {
  const size_t B = opt.batch, D = opt.headDim, Dv = opt.headDimV;
  sets.qElems = B * opt.seqlenQ * opt.headsQ * D;
  sets.kElems = B * opt.seqlenK * opt.headsKv * D;
  sets.vElems = B * opt.seqlenK * opt.headsKv * Dv;
  sets.oElems = B * opt.seqlenQ * opt.headsQ * Dv;
  sets.lseElems = B * opt.headsQ * opt.seqlenQ;
  const size_t setBytes =
      (sets.qElems + sets.kElems + sets.vElems + sets.oElems) * sizeof(uint16_t) + sets.lseElems * sizeof(float);
  sets.copies = setBytes >= kRotationBytes ? 1 : (kRotationBytes + setBytes - 1) / setBytes;
  const size_t n = sets.copies;
  for (auto [buffer, bytes] : {std::pair{&sets.q, n * sets.qElems * sizeof(uint16_t)},
                               {&sets.k, n * sets.kElems * sizeof(uint16_t)},
                               {&sets.v, n * sets.vElems * sizeof(uint16_t)},
                               {&sets.o, n * sets.oElems * sizeof(uint16_t)},
                               {&sets.lse, n * sets.lseElems * sizeof(float)}})
    if (Status s = buffer->allocate(bytes); !s.ok())
      return s;
  // O and LSE poisoned (NaN), so that an element the kernel does not write fails the check.
  for (const DeviceBuffer *buffer : {&sets.o, &sets.lse})
    if (Status s = buffer->fill(reference::kPoisonByte); !s.ok())
      return s;
  // Each tensor's copies form one packed tensor of copies x batch batches.
  const int batches = int(n * B);
  const long long Sq = opt.seqlenQ, Sk = opt.seqlenK, Hq = opt.headsQ, Hkv = opt.headsKv, d = opt.headDim,
                  dv = opt.headDimV;
  const std::array<long long, 4> qStride{Sq * Hq * d, Hq * d, d, 1}, kStride{Sk * Hkv * d, Hkv * d, d, 1},
      vStride{Sk * Hkv * dv, Hkv * dv, dv, 1};
  if (Status s = ref.fill(sets.q.as<void>(), opt.dtype, batches, opt.seqlenQ, opt.headsQ, opt.headDim, qStride,
                          opt.seed * 3 + 0);
      !s.ok())
    return s;
  if (Status s = ref.fill(sets.k.as<void>(), opt.dtype, batches, opt.seqlenK, opt.headsKv, opt.headDim, kStride,
                          opt.seed * 3 + 1);
      !s.ok())
    return s;
  if (Status s = ref.fill(sets.v.as<void>(), opt.dtype, batches, opt.seqlenK, opt.headsKv, opt.headDimV, vStride,
                          opt.seed * 3 + 2);
      !s.ok())
    return s;
  if (Status s = reference::synchronize("fill_normal"); !s.ok())
    return s;
  return opt.usesCache() ? makeCaches(opt, sets) : Status();
}

/// Checks set 0's forward output against both references (a cache call against the dense K/V its cache holds).
StatusOr<reference::Comparison> check(const RunOptions &opt, const GpuReference &ref, const InputSets &sets) {
  RunOptions dense = opt;
  dense.cache = "none";
  dense.append = 0;
  dense.rotaryDim = 0;
  AttentionArgs args = sets.args(dense, 0);
  // With rotary embedding the reference reads Q and K as the call rotated them.
  DeviceBuffer rotatedQ, rotatedK;
  if (opt.rotaryDim > 0) {
    if (Status s = rotatedInputs(opt, sets, rotatedQ, rotatedK); !s.ok())
      return s;
    args.q = rotatedQ.as<const void>();
    args.k = rotatedK.as<const void>();
  }
  std::vector<uint16_t> o;
  std::vector<float> lse;
  if (Status s = sets.o.download(o, 0, sets.oElems); !s.ok())
    return s;
  if (Status s = sets.lse.download(lse, 0, sets.lseElems); !s.ok())
    return s;
  StatusOr<reference::ReferenceOutputs> fp32 = ref.runToHost(args, opt.causal(), reference::Precision::Fp32);
  if (!fp32.ok())
    return fp32.status().withContext("reference (fp32)");
  StatusOr<reference::ReferenceOutputs> lowp = ref.runToHost(args, opt.causal(), reference::Precision::Lowp);
  if (!lowp.ok())
    return lowp.status().withContext("reference (lowp)");
  return reference::compare(args, o, lse, *fp32, *lowp);
}

/// CUDA events, destroyed with the object.
class Events {
public:
  explicit Events(const CudaDriver &driver) : d(driver) {}
  Events(const Events &) = delete;
  Events &operator=(const Events &) = delete;
  ~Events() {
    for (CUevent event : events)
      d.cuEventDestroy_v2(event);
  }
  StatusOr<CUevent> create() {
    CUevent event = nullptr;
    if (Status s = d.check(d.cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"); !s.ok())
      return s;
    events.push_back(event);
    return event;
  }

private:
  const CudaDriver &d;
  std::vector<CUevent> events;
};

/// Milliseconds of each of `opt.iters` forwards (after `opt.warmup` untimed ones), cycling through the input sets.
StatusOr<std::vector<float>> timeForwards(const RunOptions &opt, const CudaDriver &d, Runtime &runtime,
                                          const InputSets &sets) {
  size_t set = 0;
  auto next = [&] { return sets.args(opt, set++ % sets.copies); };
  for (int i = 0; i < opt.warmup; ++i)
    if (Status s = runtime.forward(next()); !s.ok())
      return s.withContext("warm-up forward");
  Events events(d);
  std::vector<std::pair<CUevent, CUevent>> marks;
  for (int i = 0; i < opt.iters; ++i) {
    StatusOr<CUevent> start = events.create(), stop = events.create();
    if (!start.ok())
      return start.status();
    if (!stop.ok())
      return stop.status();
    marks.emplace_back(*start, *stop);
  }
  for (auto [start, stop] : marks) {
    if (Status s = d.check(d.cuEventRecord(start, nullptr), "cuEventRecord"); !s.ok())
      return s;
    if (Status s = runtime.forward(next()); !s.ok())
      return s.withContext("timed forward");
    if (Status s = d.check(d.cuEventRecord(stop, nullptr), "cuEventRecord"); !s.ok())
      return s;
  }
  if (Status s = reference::synchronize("timed forwards"); !s.ok())
    return s;
  std::vector<float> ms;
  for (auto [start, stop] : marks) {
    float elapsed = 0;
    if (Status s = d.check(d.cuEventElapsedTime(&elapsed, start, stop), "cuEventElapsedTime"); !s.ok())
      return s;
    ms.push_back(elapsed);
  }
  return ms;
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (double(values[n / 2 - 1]) + values[n / 2]);
}

/// Where the first call's kernel came from, from the JIT cache's counters before and after it.
std::string kernelSource(const KernelCache::Stats &before, const KernelCache::Stats &after) {
  if (after.misses > before.misses)
    return "JIT compiled: cache miss";
  if (after.diskHits > before.diskHits)
    return "JIT kernel from the disk cache";
  if (after.memoryHits > before.memoryHits)
    return "JIT kernel from memory";
  return "ahead-of-time kernel";
}

int runCommand(RunOptions &opt, const std::string &seed) {
  if (Status s = checkRunOptions(opt, seed); !s.ok())
    return fail(s);
  opt.dtype = opt.dtypeName == "bf16" ? DType::BF16 : DType::F16;
  if (!opt.scaleText.empty())
    opt.scale = std::strtof(opt.scaleText.c_str(), nullptr);

  if (opt.aotDir.empty() && !hasCompiler())
    return fail(Status::error("run: this flashtile is runtime-only (no compiler): give --aot-dir DIR, a directory "
                              "of kernels made with `flashtile aot --arch ARCH --out DIR` (`flashtile info` shows "
                              "this GPU's ARCH)"));

  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return fail(driver.status().withContext("run needs an NVIDIA GPU"));
  const CudaDriver &d = **driver;
  if (StatusOr<CUdevice> device = d.currentDevice(); !device.ok())
    return fail(device.status().withContext("run needs an NVIDIA GPU"));
  StatusOr<std::string> arch = d.detectArch();
  if (!arch.ok())
    return fail(arch.status().withContext("this GPU cannot run flashtile kernels"));

  Runtime runtime;
  std::string kernels;
  if (!opt.aotDir.empty()) {
    if (Status s = runtime.loadAotDirectory(opt.aotDir); !s.ok())
      return fail(s);
    kernels = "kernels from " + opt.aotDir;
  } else {
    installCompiler(runtime);
    kernels = "JIT kernels";
  }
  StatusOr<GpuReference> ref = GpuReference::create();
  if (!ref.ok())
    return fail(ref.status().withContext("setting up the reference kernels"));

  const std::string headDims =
      std::to_string(opt.headDim) + (opt.headDimV != opt.headDim ? "/" + std::to_string(opt.headDimV) : "");
  const std::string cache = !opt.usesCache() ? ""
                            : opt.paged()
                                ? fmt::format(", paged KV cache (page {}, {} appended)", opt.pageSize, opt.append)
                                : fmt::format(", contiguous KV cache ({} appended)", opt.append);
  fmt::print("flashtile {}: {} {} hd={} B={} Hq={} Hkv={} Sq={} Sk={}{} on {}, {}\n", compilerVersion(), opt.variant,
             dtypeName(opt.dtype), headDims, opt.batch, opt.headsQ, opt.headsKv, opt.seqlenQ, opt.seqlenK, cache, *arch,
             kernels);
  std::fflush(stdout);

  InputSets sets;
  if (Status s = makeInputSets(opt, *ref, sets); !s.ok())
    return fail(s.withContext("preparing inputs"));

  // First call: kernel lookup (a JIT compile on a cache miss), module load and the forward itself.
  const KernelCache::Stats before = runtime.cache().stats();
  const auto firstStart = std::chrono::steady_clock::now();
  if (Status s = runtime.forward(sets.args(opt, 0)); !s.ok())
    return fail(s);
  if (Status s = reference::synchronize("flashtile forward"); !s.ok())
    return fail(s);
  const double firstMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - firstStart).count();
  fmt::print("first call: {:.1f} ms ({})\n", firstMs, kernelSource(before, runtime.cache().stats()));
  if (StatusOr<ScheduleChoice> choice = runtime.explain(sets.args(opt, 0)); choice.ok())
    fmt::print("kernel: {} (schedule {}: {})\n", choice->entry, choice->spec.schedule, choice->reason);

  bool pass = false;
  StatusOr<reference::Comparison> compared = check(opt, *ref, sets);
  if (!compared.ok()) {
    fmt::print("check: not done: {}\n", compared.status().message());
  } else {
    pass = compared->pass();
    fmt::print("check: {}\n", compared->summary());
    for (const std::string &failure : compared->failures())
      fmt::print("  {}\n", failure);
  }
  std::fflush(stdout);

  StatusOr<std::vector<float>> ms = timeForwards(opt, d, runtime, sets);
  if (!ms.ok())
    return fail(ms.status());
  const double medianMs = median(*ms);
  const double flops = forwardFlops(opt);
  fmt::print("time: median {:.4f} ms (min {:.4f}, max {:.4f}) over {} iterations after {} warm-up, {} input set{} "
             "rotated\n",
             medianMs, *std::min_element(ms->begin(), ms->end()), *std::max_element(ms->begin(), ms->end()), opt.iters,
             opt.warmup, sets.copies, sets.copies == 1 ? "" : "s");
  fmt::print("throughput: {:.1f} TFLOP/s ({:.4g} FLOPs = 2*B*Hq*(D+Dv)*attended pairs)\n",
             medianMs > 0 ? flops / (medianMs * 1e-3) / 1e12 : 0.0, flops);

  // Warm dispatch: host time of forward() with the kernel cached (argument checks, lookup, launch enqueue).
  constexpr int kDispatchCalls = 200;
  const auto dispatchStart = std::chrono::steady_clock::now();
  for (int i = 0; i < kDispatchCalls; ++i)
    if (Status s = runtime.forward(sets.args(opt, 0)); !s.ok())
      return fail(s);
  const double dispatchUs =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - dispatchStart).count() /
      kDispatchCalls;
  if (Status s = reference::synchronize("flashtile forward"); !s.ok())
    return fail(s);
  fmt::print("dispatch: {:.2f} us per forward() on the host (warm cache, enqueue only, mean of {})\n", dispatchUs,
             kDispatchCalls);
  fmt::print("{}\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

/// `info`'s call flags: with --head-dim, info also says which kernel such a call runs, and why.
struct InfoCall {
  std::string variant = "none";
  std::string dtypeName = "bf16";
  std::string params;             // the variant's numbers, comma-separated
  std::vector<float> paramValues; // params, parsed before anything is printed
  int headDim = 0;                // 0: no call asked about
  int headDimV = 0, batch = 1, headsQ = 16, headsKv = 0, seqlenQ = 4096, seqlenK = -1;
  std::string schedule, arch, aotDir;
  bool strict = false;
};

/// Fake device addresses for explain(): aligned as the checks want, never dereferenced (nothing is launched).
const void *fakeAddress(int slot) { return reinterpret_cast<const void *>(uintptr_t(slot + 1) << 32); }

/// "call ... / runs ... / why ..." for `call` on `arch` (empty: this GPU's, else sm_90a when there is none).
int explainCall(const InfoCall &call, std::string arch) {
  AttentionArgs args = AttentionArgs::contiguous(
      call.dtypeName == "f16" ? DType::F16 : DType::BF16, fakeAddress(0), fakeAddress(1), fakeAddress(2),
      const_cast<void *>(fakeAddress(3)), static_cast<float *>(const_cast<void *>(fakeAddress(4))), call.batch,
      call.seqlenQ, call.seqlenK < 0 ? call.seqlenQ : call.seqlenK, call.headsQ,
      call.headsKv ? call.headsKv : call.headsQ, call.headDim, call.headDimV);
  args.variant = call.variant;
  args.variantParams = call.paramValues;
  args.schedule = call.schedule;
  args.strictSchedule = call.strict;
  Runtime runtime;
  if (!call.aotDir.empty()) {
    if (Status s = runtime.loadAotDirectory(call.aotDir); !s.ok())
      return fail(s);
  }
  if (call.aotDir.empty() && !installCompiler(runtime))
    return fail("info --head-dim: this build has no compiler; pass --aot-dir DIR (kernels of flashtile aot)");
  if (arch.empty()) {
    StatusOr<std::string> detected = [&]() -> StatusOr<std::string> {
      StatusOr<const CudaDriver *> driver = CudaDriver::get();
      if (!driver.ok())
        return driver.status();
      return (*driver)->detectArch();
    }();
    arch = detected.ok() ? *detected : std::string("sm_90a");
    if (!detected.ok())
      fmt::print("call       (no usable GPU: asked for {}; --arch names another)\n", arch);
  }
  fmt::print("call       {} hd {}{}, variant {}, batch {} x {}/{} rows, {}/{} heads on {}{}{}\n", call.dtypeName,
             args.headDim, args.headDimV != args.headDim ? "/" + std::to_string(args.headDimV) : "", args.variant,
             args.batch, args.seqlenQ, args.seqlenK, args.headsQ, args.headsKv, arch,
             call.schedule.empty() ? "" : ", schedule " + call.schedule, call.strict ? " (strict)" : "");
  std::fflush(stdout);
  StatusOr<ScheduleChoice> choice = runtime.explain(args, arch);
  if (!choice.ok())
    return fail(choice.status());
  fmt::print("runs       schedule {}: {} ({})\n", choice->spec.schedule, choice->entry,
             choice->aheadOfTime ? "ahead of time, --aot-dir" : "JIT");
  fmt::print("why        {}\n", choice->reason);
  return 0;
}

/// Versions, targets, NVRTC, the cache and the GPU.
int printEnvironment() {
  fmt::print("flashtile  {}\n", compilerVersion());
  fmt::print("compiler   {}\n", hasCompiler() ? "built in: kernels are JIT-compiled on demand"
                                              : "not built in (runtime-only build): run kernels with --aot-dir DIR");
  fmt::print("targets    {} (`--arch`; kernels run on the GPUs of their family)\n",
             joinNames({kSupportedArchs.begin(), kSupportedArchs.end()}));
  std::vector<std::string> aliases;
  for (const ArchAlias &alias : kArchAliases)
    aliases.push_back(fmt::format("{} -> {}", alias.name, alias.canonical));
  fmt::print("arch names {} (the kernels each name builds)\n", joinNames(aliases));
  StatusOr<std::string> nvrtc = nvrtcVersion();
  if (nvrtc.ok())
    fmt::print("NVRTC      {} ({})\n", *nvrtc, nvrtcLibraryPath());
  else
    fmt::print("NVRTC      not available: {}\n", nvrtc.status().message());
  KernelCache cache;
  const KernelCache::Options &cacheOptions = cache.options();
  if (!cacheOptions.diskEnabled) {
    fmt::print("cache      memory only (FLASHTILE_DISABLE_CACHE, or no FLASHTILE_CACHE_DIR and no HOME)\n");
  } else {
    StatusOr<KernelCache::DiskUsage> usage = cache.diskUsage();
    fmt::print("cache      {}: {}\n", cacheOptions.dir,
               usage.ok() ? fmt::format("{} entries, {:.1f} MiB{}", usage->entries, usage->bytes / 1048576.0,
                                        cacheOptions.maxBytes
                                            ? fmt::format(" (cap {:.0f} MiB)", cacheOptions.maxBytes / 1048576.0)
                                            : " (no cap: FLASHTILE_CACHE_MAX_MB)")
                          : usage.status().message());
  }
  if (cacheOptions.diskEnabled)
    if (Status writable = cache.checkDiskWritable(); !writable.ok())
      fmt::print("           not writable: {} (kernels are compiled again in every process)\n", writable.message());
  if (!cacheOptions.warning.empty())
    fmt::print("           warning: {}\n", cacheOptions.warning);

  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok()) {
    fmt::print("driver     not available: {}\nGPU        none usable\n", driver.status().message());
    return 0;
  }
  fmt::print("driver     libcuda loaded\n");
  const CudaDriver &d = **driver;
  StatusOr<CUdevice> device = d.currentDevice();
  if (!device.ok()) {
    fmt::print("GPU        none usable: {}\n", device.status().message());
    return 0;
  }
  int major = 0, minor = 0, sms = 0, l2Bytes = 0;
  for (auto [value, attribute] : {std::pair{&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
                                  {&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
                                  {&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
                                  {&l2Bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE}})
    if (Status s = d.check(d.cuDeviceGetAttribute(value, attribute, *device), "cuDeviceGetAttribute"); !s.ok()) {
      fmt::print("GPU        unknown: {}\n", s.message());
      return 0;
    }
  StatusOr<std::string> target = archForComputeCapability(major, minor);
  fmt::print("GPU        compute capability {}.{}, {} SMs, {} MiB L2: {}\n", major, minor, sms, l2Bytes >> 20,
             target.ok() ? "target " + *target : target.status().message());
  return 0;
}

int runInfo(const InfoCall &call) {
  if (int status = printEnvironment(); status != 0 || call.headDim == 0)
    return status;
  return explainCall(call, call.arch);
}

} // namespace

void registerNvrtcCommand(CLI::App &app, Registry &registry);

std::string versionText() {
  return fmt::format("flashtile {} ({})", compilerVersion(),
                     hasCompiler() ? "compiler and runtime" : "runtime only: runs ahead-of-time kernels");
}

void registerRuntimeCommands(CLI::App &app, Registry &registry) {
  auto run = std::make_shared<RunOptions>();
  auto seed = std::make_shared<std::string>();
  CLI::App *command = addCommand(app, "run",
                                 "Run one forward on random inputs on the GPU, check it against an fp32 reference and "
                                 "time it (exit code 0 when the check passes)");
  addRunFlags(*command, *run, *seed);
  registry.add(command, [run, seed] { return runCommand(*run, *seed); });

  auto call = std::make_shared<InfoCall>();
  CLI::App *info = addCommand(app, "info",
                              "Versions, targets, NVRTC, the kernel cache and the GPU; with --head-dim, which kernel "
                              "(schedule) such a call runs and why (the JIT compiles it if the cache lacks it)");
  info->add_option("--head-dim", call->headDim, "Head dim of Q and K of the call to explain")->check(intRange(1, 1024));
  info->add_option("--head-dim-v", call->headDimV, "Head dim of V (default: --head-dim)")->check(intRange(1, 1024));
  info->add_option("--variant", call->variant, "A built-in variant or a JIT variant id")->capture_default_str();
  info->add_option("--params", call->params, "The variant's numbers, comma-separated, in declaration order");
  info->add_option("--dtype", call->dtypeName, "Element type")
      ->check(oneOf("dtype", {"bf16", "f16"}))
      ->capture_default_str();
  info->add_option("--batch", call->batch, "Sequences")->check(intRange(1, kMaxDimension))->capture_default_str();
  info->add_option("--heads", call->headsQ, "Query heads")->check(intRange(1, kMaxDimension))->capture_default_str();
  info->add_option("--heads-kv", call->headsKv, "Key/value heads (default: --heads)")
      ->check(intRange(1, kMaxDimension));
  info->add_option("--seqlen-q", call->seqlenQ,
                   "Query rows per sequence (at most " + std::to_string(kDecodeMaxSeqlenQ) + ": a decode-sized call)")
      ->check(intRange(1, kMaxDimension))
      ->capture_default_str();
  info->add_option("--seqlen-k", call->seqlenK, "Key rows per sequence (default: --seqlen-q)")
      ->check(intRange(0, kMaxDimension));
  // Checked as compile and aot check it: an unknown name is a command line not understood (exit 2), not a warning
  // and a fallback. A runtime-only build knows no names; its library's kernels say which exist.
  std::vector<std::string> schedules = knownScheduleNames();
  info->add_option("--schedule", call->schedule, "The schedule the call names (default: the dispatch rules' choice)")
      ->check(schedules.empty() ? nonEmpty() : oneOf("schedule", schedules));
  addSwitch(*info, "--strict", call->strict, "Strict schedule mode: a missing kernel is an error, not a fallback");
  info->add_option("--arch", call->arch, "Explain for this target (default: this GPU's, else sm_90a)")
      ->check(archName());
  info->add_option("--aot-dir", call->aotDir, "Kernels of this library (flashtile aot) instead of the JIT")
      ->check(nonEmpty());
  registry.add(info, [call] {
    if (call->headDim == 0 && (!call->schedule.empty() || call->strict || !call->arch.empty() ||
                               !call->aotDir.empty() || !call->params.empty() || call->headDimV))
      return fail("info: --schedule, --strict, --arch, --aot-dir, --params and --head-dim-v describe a call; pass "
                  "--head-dim too");
    if (!call->params.empty()) {
      // A sequence, not a set: a symmetric window is 128,128.
      StatusOr<std::vector<float>> numbers = parseNumberList("--params", call->params);
      if (!numbers.ok())
        return failUsage(numbers.status());
      call->paramValues = *numbers;
    }
    return runInfo(*call);
  });
  registerNvrtcCommand(app, registry);
}

} // namespace flashtile::cli
