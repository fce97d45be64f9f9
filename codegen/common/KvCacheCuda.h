//===- KvCacheCuda.h - the CUDA of KV-cache reads and appends -------------===//
//
// Target-independent pieces of kernels that read a KV cache (tile.kv_cache, passes/IR/TileKvCache.h): the part of
// a thread block's sequence view that locates its cache, and the append kernel. The copies of K/V tiles through a
// paged cache's block table are the target's (TileTarget::setup, KernelShape::kvCache).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_KVCACHECUDA_H
#define FLASHTILE_CODEGEN_COMMON_KVCACHECUDA_H

#include "codegen/common/CudaWriter.h"

#include <string>

namespace flashtile::codegen {

/// After the sequence view `p` of batch entry `blockBatch` is declared: with params.kvCache set, p.seqlenK becomes
/// the sequence's cached plus new keys, and p.k/p.v its cache row (contiguous) or p.blockTable its row of the block
/// table (paged). Device values are clamped (KernelAbi.h), so that no value reads outside the tensors.
void printKvCacheView(CudaWriter &w);

/// The append kernel `entry` (KernelAbi.h: FLASHTILE_APPEND_THREADS threads a block, grid (chunks, headsKv,
/// batch)): copies kNew/vNew rows into the cache at each sequence's cacheSeqlens[b], 16 bytes a thread.
void printKvCacheAppendKernel(CudaWriter &w, const std::string &entry, int headDim, int headDimV);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_KVCACHECUDA_H
