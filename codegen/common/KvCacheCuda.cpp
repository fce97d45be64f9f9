//===- KvCacheCuda.cpp - the CUDA of KV-cache reads and appends -----------===//
#include "codegen/common/KvCacheCuda.h"

namespace flashtile::codegen {

void printKvCacheView(CudaWriter &w) {
  w.comment("---- KV cache (params.kvCache: 1 contiguous, 2 paged; flash_attn_with_kvcache): the sequence holds its");
  w.comment("cached keys (cacheSeqlens[z], clamped so that the new ones fit) and the seqlenNew keys the append kernel");
  w.comment("wrote after them; causal and windows align to the bottom right of all of them. A contiguous cache's");
  w.comment("row is cacheBatchIdx[z] (clamped); a paged cache's key rows come through row z of the block table. ----");
  w.open("if (params.kvCache)");
  w.line("const int z = blockBatch;");
  w.line("const int cached = params.cacheSeqlens");
  w.line("    ? min(max(params.cacheSeqlens[z], 0), params.cacheCapacity - params.seqlenNew) : params.cacheCapacity;");
  w.line("p.seqlenK = cached + params.seqlenNew;");
  w.open("if (params.kvCache == 1)");
  w.line("const int row = min(max(params.cacheBatchIdx ? params.cacheBatchIdx[z] : z, 0), params.cacheBatches - 1);");
  w.line("p.k = static_cast<const unsigned short *>(params.k) + row * params.kCacheBatchStride;");
  w.line("p.v = static_cast<const unsigned short *>(params.v) + row * params.vCacheBatchStride;");
  w.close();
  w.open("else");
  w.line("p.blockTable = params.blockTable + z * params.blockTableStride;");
  w.close();
  w.close();
}

void printKvCacheAppendKernel(CudaWriter &w, const std::string &entry, int headDim, int headDimV) {
  w.line("");
  w.comment("==== the append step of a KV-cache call: new keys and values into the cache ====");
  w.comment("Row i of kNew/vNew (batch entry b, K/V head hKv) becomes key row cacheSeqlens[b] + i of the sequence's");
  w.comment("cache (cacheSeqlens clamped so that the row is inside the cache; a paged cache's page from the block");
  w.comment("table, clamped to the pool). Launch: grid (ceil(seqlenNew x (kHeadDim + kHeadDimV) / 8 /");
  w.comment(
      "FLASHTILE_APPEND_THREADS), headsKv, batch), block (FLASHTILE_APPEND_THREADS), before the attention kernel");
  w.comment("on the same stream; one 16-byte chunk of a K or V row a thread.");
  w.open("extern \"C\" __global__ void __launch_bounds__(FLASHTILE_APPEND_THREADS) " + entry +
         "(const FlashtileFwdParams params)");
  w.line("constexpr int kHeadDim = " + std::to_string(headDim) + ";  // Q/K head dim");
  w.line("constexpr int kHeadDimV = " + std::to_string(headDimV) + ";  // V/O head dim");
  w.line("constexpr int kChunksK = kHeadDim / 8, kChunksRow = (kHeadDim + kHeadDimV) / 8;");
  w.line("const int b = blockIdx.z, hKv = blockIdx.y;");
  w.line("const long long chunk = static_cast<long long>(blockIdx.x) * FLASHTILE_APPEND_THREADS + threadIdx.x;");
  w.line("if (chunk >= static_cast<long long>(params.seqlenNew) * kChunksRow)");
  w.line("  return;");
  w.line("const int i = static_cast<int>(chunk / kChunksRow), c = static_cast<int>(chunk % kChunksRow);");
  w.line("const bool isK = c < kChunksK;");
  w.line("const int col = isK ? c : c - kChunksK;");
  w.line("const int key = min(max(params.cacheSeqlens[b], 0), params.cacheCapacity - params.seqlenNew) + i;");
  w.comment("the cache's key row: a page and a row inside it (paged), or row `key` of the sequence's cache row");
  w.line("long long base, row;");
  w.open("if (params.kvCache == 2)");
  w.line("const int page = min(max(params.blockTable[b * params.blockTableStride + (key >> params.pageShift)], 0),");
  w.line("                     params.cacheBatches - 1);");
  w.line("base = page;");
  w.line("row = key & ((1 << params.pageShift) - 1);");
  w.close();
  w.open("else");
  w.line("base = min(max(params.cacheBatchIdx ? params.cacheBatchIdx[b] : b, 0), params.cacheBatches - 1);");
  w.line("row = key;");
  w.close();
  w.line("const unsigned short *src = static_cast<const unsigned short *>(isK ? params.kNew : params.vNew) +");
  w.line("    b * (isK ? params.kNewBatchStride : params.vNewBatchStride) + i * (isK ? params.kNewRowStride : "
         "params.vNewRowStride) +");
  w.line("    hKv * (isK ? params.kNewHeadStride : params.vNewHeadStride) + col * 8;");
  w.line("unsigned short *dst = const_cast<unsigned short *>(static_cast<const unsigned short *>(isK ? params.k : "
         "params.v)) +");
  w.line("    base * (isK ? params.kCacheBatchStride : params.vCacheBatchStride) + row * (isK ? params.kRowStride : "
         "params.vRowStride) +");
  w.line("    hKv * (isK ? params.kHeadStride : params.vHeadStride) + col * 8;");
  w.line("*reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);");
  w.close();
}

} // namespace flashtile::codegen
