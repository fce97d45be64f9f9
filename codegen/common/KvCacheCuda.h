//===- KvCacheCuda.h - the CUDA of KV-cache reads and appends -------------===//
//
// Target-independent pieces of kernels that read a KV cache (tile.kv_cache, passes/IR/TileKvCache.h): the part of
// a thread block's sequence view that locates its cache, and the append kernel. The copies of K/V tiles through a
// paged cache's block table are the target's (TileTarget::setup, KernelShape::kvCache).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_KVCACHECUDA_H
#define FLASHTILE_CODEGEN_COMMON_KVCACHECUDA_H

#include "codegen/common/CudaWriter.h"

#include <optional>
#include <string>

namespace flashtile::codegen {

/// Elements of K or V one thread of the append kernel copies: one 16-byte chunk of 16-bit values.
inline constexpr int kAppendChunkElements = 8;

/// After the sequence view `p` of batch entry `blockBatch` is declared: with params.kvCache set, p.seqlenK becomes
/// the sequence's cached plus new keys, and p.k/p.v its cache row (contiguous) or p.blockTable its row of the block
/// table (paged). Device values are clamped (KernelAbi.h), so that no value reads outside the tensors; the kernel's
/// end checks them again for the error record (printKvCacheCheck).
/// `elementType`: the C type of one K/V element ("unsigned short", or "unsigned char" for an e4m3 cache).
void printKvCacheView(CudaWriter &w, const char *elementType = "unsigned short");

/// The device functions of the KV cache's error record, printed before the kernels of a program that reads a KV
/// cache: kvCacheError writes one out-of-range device value into params.kvErrors (KernelAbi.h: FlashtileKvError)
/// unless the record holds one already; kvCacheCheck checks the values a sequence's attention blocks read. Neither
/// is inlined: they run only on a bad value or at the kernel's end.
void printKvErrorFunctions(CudaWriter &w);

/// At the end of the attention kernel of a split-KV program that reads a KV cache (after its epilogue): the blocks
/// of one head and of the first Q tile check the cacheSeqlens and cacheBatchIdx values of their sequence and, each
/// split a share, the block-table entries of its keys (kvCacheCheck). It reads only the kernel parameters and the
/// block's indices, so that nothing of the main loop stays live for it.
void printKvCacheCheck(CudaWriter &w);

/// The append kernel `entry` (KernelAbi.h: FLASHTILE_APPEND_THREADS threads a block, grid (chunks, headsKv,
/// batch)): copies kNew/vNew rows into the cache at each sequence's cacheSeqlens[b], 16 bytes a thread. With
/// `rotaryInterleaved` set (the program's Q load carries tile.rotary, passes/IR/TileRotary.h) the key rows are
/// rotated on the way, at their positions in the cache, with the pairs it names (printRotaryFunctions first).
///
/// With `e4m3Cache` (an e4m3 KV cache, tile.kv_dtype) the kernel takes FlashtileFp8Params (Fp8Abi.h) too and writes
/// each new value, after its rotation, as e4m3: value / descale (k_descale or v_descale of its (batch, K/V head), null
/// = 1) rounded to the nearest e4m3 value, ties to even, saturating at ±448 (printE4m3RoundFunction); `bf16`: the
/// new keys and values are bf16, else f16.
void printKvCacheAppendKernel(CudaWriter &w, const std::string &entry, int headDim, int headDimV,
                              std::optional<bool> rotaryInterleaved = std::nullopt, bool e4m3Cache = false,
                              bool bf16 = true);

/// The device functions of rotary embedding (tile.rotary), for the kernel's Q and the append kernel's keys:
/// rotaryToFloat / rotaryRound between the kernel's 16-bit dtype (`bf16`, else f16) and fp32, and rotaryOut, one
/// element of a rotated pair. Plain C (no instruction of any target), rounded like the interpreter: each product
/// and sum in fp32 (no FMA contraction), the result to the nearest 16-bit value (ties to even).
void printRotaryFunctions(CudaWriter &w, bool bf16);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_KVCACHECUDA_H
