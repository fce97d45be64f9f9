// SplitKv.h — split-KV (flash-decoding) on the host: how many splits a call gets and the workspace they need.
//
// Kernels of the decode schedule split the key range of every Q tile across numSplits thread blocks (a kernel
// argument, KernelAbi.h); with more than one, each writes a partial O (fp32) and LSE to a workspace and a combine
// kernel merges them. Runtime::forward picks numSplits with numSplitsHeuristic unless AttentionArgs::numSplits
// forces it.
#ifndef FLASHTILE_RUNTIME_SPLITKV_H
#define FLASHTILE_RUNTIME_SPLITKV_H

#include <cstddef>

namespace flashtile {

/// The most splits a call may have (FlashAttention's bound too: the combine step reads every split's LSE).
inline constexpr int kMaxSplits = 128;
/// Thread blocks of a split-KV kernel assumed to run at once on an SM when the heuristic counts waves and the
/// driver was not asked (FlashAttention-2 counts 2 for its split-KV kernel, whose shared memory is about ours). A
/// launch asks the driver how many of its kernel's blocks fit an SM (cuOccupancyMaxActiveBlocksPerMultiprocessor).
inline constexpr int kSplitKvBlocksPerSm = 2;
/// Calls whose sequences have at most this many query rows go to the decode schedule (Runtime::setDecodeSchedule).
inline constexpr int kDecodeMaxSeqlenQ = 16;

/// The number of splits for `blocks` thread blocks without splitting (Q tiles x heads x batch entries), each
/// walking `kvTiles` K/V tiles, on a GPU that runs `slots` blocks at once (SMs x kSplitKvBlocksPerSm); at most
/// `maxSplits`. After FlashAttention's num_splits_heuristic: a grid whose last wave already fills 80% of the slots
/// is not split (FlashAttention looks at the first wave only: 1.3 waves would stay unsplit there); else the split count s (at most min(maxSplits, slots, kvTiles)) whose last wave is fullest — wave
/// efficiency e(s) = w / ceil(w) with w = blocks·s / slots — and, among those within 85% of the best efficiency,
/// the smallest (every split costs a partial O written and read again). Counts that give the same tiles per split
/// as a smaller count are skipped: they only add empty splits. Returns at least 1.
int numSplitsHeuristic(long long blocks, int slots, int kvTiles, int maxSplits = kMaxSplits);

/// Bytes of the split-KV workspace for `numSplits` splits of `lseRows` LSE rows (B x Hq x Sq dense, Hq x total_q
/// varlen) at V head dim `headDimV`: fp32 partial O and LSE, 256-byte aligned parts. 0 when numSplits <= 1;
/// SIZE_MAX when the size does not fit in size_t (no allocation or caller's workspace is that large).
size_t splitKvWorkspaceBytes(long long lseRows, int headDimV, int numSplits);
/// Byte offset of the LSE part inside the workspace (after the partial O); SIZE_MAX when it does not fit.
size_t splitKvLseOffset(long long lseRows, int headDimV, int numSplits);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_SPLITKV_H
