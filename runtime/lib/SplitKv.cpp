// SplitKv.cpp — the split count heuristic and the workspace layout of split-KV calls.
#include "flashtile/runtime/SplitKv.h"
#include "PlanRunner.h"
#include "SplitKvInternal.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashtile {
namespace {

constexpr size_t kAlign = 256;
/// A grid whose last wave fills this share of the GPU's block slots is not split.
constexpr double kFullGrid = 0.8;
/// The smallest split count whose wave efficiency is within this share of the best wins.
constexpr double kGoodEnough = 0.85;

size_t alignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

/// a * b * c * d rounded up to kAlign, or nothing when that does not fit in size_t.
std::optional<size_t> alignedProduct(size_t a, size_t b, size_t c, size_t d) {
  size_t product = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_mul_overflow(product, c, &product) ||
      __builtin_mul_overflow(product, d, &product) || product > SIZE_MAX - (kAlign - 1))
    return std::nullopt;
  return alignUp(product);
}
long long ceilDiv(long long a, long long b) { return (a + b - 1) / b; }

} // namespace

int numSplitsHeuristic(long long blocks, int slots, int kvTiles, int maxSplits) {
  if (blocks <= 0 || slots <= 0 || kvTiles <= 1 || maxSplits <= 1)
    return 1;
  auto waveEfficiency = [&](int s) {
    double waves = double(blocks) * s / slots;
    return waves / std::ceil(waves);
  };
  // FlashAttention stops at a grid that fills 80% of one wave; a grid of 1.3 waves idles most of the GPU in its
  // second wave just the same, so it is the last wave that counts.
  if (waveEfficiency(1) >= kFullGrid)
    return 1;
  const int most = std::min({maxSplits, slots, kvTiles});
  // A count is worth trying only if it changes the tiles per split: 64 tiles in 11 or 12 splits are both 6 a
  // split, and the 12th split would be empty.
  auto distinct = [&](int s) { return s == 1 || ceilDiv(kvTiles, s) != ceilDiv(kvTiles, s - 1); };
  std::vector<double> efficiency(most + 1, 0.0);
  double best = 0.0;
  for (int s = 1; s <= most; ++s) {
    if (!distinct(s))
      continue;
    efficiency[s] = waveEfficiency(s);
    best = std::max(best, efficiency[s]);
  }
  for (int s = 1; s <= most; ++s)
    if (distinct(s) && efficiency[s] >= kGoodEnough * best)
      return s;
  return 1;
}

size_t splitKvLseOffset(long long lseRows, int headDimV, int numSplits) {
  if (numSplits <= 1 || lseRows <= 0 || headDimV <= 0)
    return 0;
  return alignedProduct(size_t(numSplits), size_t(lseRows), size_t(headDimV), sizeof(float)).value_or(SIZE_MAX);
}

size_t splitKvWorkspaceBytes(long long lseRows, int headDimV, int numSplits) {
  if (numSplits <= 1 || lseRows <= 0 || headDimV <= 0)
    return 0;
  std::optional<size_t> partials = alignedProduct(size_t(numSplits), size_t(lseRows), size_t(headDimV), sizeof(float));
  std::optional<size_t> lse = alignedProduct(size_t(numSplits), size_t(lseRows), 1, sizeof(float));
  if (!partials || !lse || *partials > SIZE_MAX - *lse)
    return SIZE_MAX;
  return *partials + *lse;
}

} // namespace flashtile

// ---- the runtime's side: argument checks, the split count of a call, workspaces ----

namespace flashtile {

namespace detail {

constexpr size_t kWorkspaceAlignment = 256;

Status checkSplitKvArgs(const AttentionArgs &args) {
  if (args.numSplits < 0 || args.numSplits > kMaxSplits)
    return Status::error("numSplits is " + std::to_string(args.numSplits) +
                         "; accepted: 0 (the runtime chooses) or 1 to " + std::to_string(kMaxSplits));
  if (!args.workspace && args.workspaceBytes != 0)
    return Status::error("workspaceBytes is " + std::to_string(args.workspaceBytes) +
                         " but workspace is null; pass both, or neither (the runtime owns the workspace)");
  if (args.workspace && reinterpret_cast<uintptr_t>(args.workspace) % kWorkspaceAlignment != 0)
    return Status::error("workspace is not " + std::to_string(kWorkspaceAlignment) +
                         "-byte aligned; cudaMalloc'ed memory (and PyTorch's allocations) are");
  return Status();
}

long long lseRows(const AttentionArgs &args) {
  // Dense: B x Hq x Sq; varlen: Hq x total_q (seqlenQ holds total_q).
  return static_cast<long long>(args.isVarlen() ? 1 : args.batch) * args.headsQ * args.seqlenQ;
}

StatusOr<CUdeviceptr> SplitKvWorkspaces::buffer(const CudaDriver &driver, CUcontext context, CUstream stream,
                                                size_t bytes, bool *synchronized) {
  Buffer &buffer = buffers[{context, stream}];
  if (buffer.bytes >= bytes)
    return buffer.pointer;
  if (buffer.pointer) {
    // Kernels queued earlier on this stream may still read or write the old buffer.
    if (Status s = driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize (split-KV workspace)");
        !s.ok())
      return s;
    if (synchronized)
      *synchronized = true;
    driver.cuMemFree_v2(buffer.pointer);
    buffer = Buffer{};
  }
  // Grown by half again, so that a slowly growing decode loop reallocates rarely.
  size_t grown = bytes + bytes / 2;
  CUdeviceptr pointer = 0;
  if (Status s = driver.check(driver.cuMemAlloc_v2(&pointer, grown),
                              "cuMemAlloc (split-KV workspace of " + std::to_string(grown) + " bytes)");
      !s.ok())
    return s;
  buffer = Buffer{pointer, grown};
  return pointer;
}

void SplitKvWorkspaces::release(const CudaDriver &driver) {
  std::lock_guard<std::mutex> lock(guard);
  CUcontext caller = nullptr;
  driver.cuCtxGetCurrent(&caller);
  for (auto &[key, buffer] : buffers)
    if (buffer.pointer && driver.cuCtxSetCurrent(key.first) == CUDA_SUCCESS)
      driver.cuMemFree_v2(buffer.pointer);
  buffers.clear();
  driver.cuCtxSetCurrent(caller);
}

} // namespace detail

bool Runtime::isDecodeCall(const AttentionArgs &args) {
  return (args.isVarlen() ? args.maxSeqlenQ : args.seqlenQ) <= kDecodeMaxSeqlenQ || args.kvCache.enabled();
}

int Runtime::numSplitsFor(const AttentionArgs &args, const KernelInfo &kernel, int smCount, int blocksPerSm) {
  StatusOr<int> splits = detail::planSplits(kernel, args, smCount, blocksPerSm);
  return splits.ok() ? *splits : 1;
}

} // namespace flashtile
