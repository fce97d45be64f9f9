//===- KvCacheCuda.cpp - the CUDA of KV-cache reads and appends -----------===//
#include "codegen/common/KvCacheCuda.h"

namespace flashtile::codegen {

namespace {

/// The statement that reports `value` of `argument` (FLASHTILE_KV_ERROR_*) at batch entry `row` (and `column` of the
/// block table, else "-1"), of which at most `last` is accepted, read by `kernel` (FLASHTILE_KV_ERROR_IN_*).
std::string kvErrorReport(const std::string &params, const std::string &argument, const std::string &kernel,
                          const std::string &row, const std::string &column, const std::string &value,
                          const std::string &last) {
  return "kvCacheError(" + params + ".kvErrors, " + params + ".kvCall, " + argument + ", " + kernel + ", " + row +
         ", " + column + ", " + value + ", " + last + ");";
}

void printKvErrorFunction(CudaWriter &w) {
  w.comment("---- the KV cache's error record (KernelAbi.h: FlashtileKvError; params.kvErrors, null: none): the first");
  w.comment("out-of-range cacheSeqlens, cacheBatchIdx or blockTable value a kernel clamps is written there for the");
  w.comment("runtime to report. Claimed by a compare-and-swap, filled, then published after a fence, so that a reader");
  w.comment("never sees a code without its fields; later values leave it alone until the runtime zeroes it. ----");
  w.open("__device__ __noinline__ void kvCacheError(FlashtileKvError *record, int call, int argument, int kernel, int "
         "row, int column, int value, int last)");
  w.line("const volatile int *const published = record ? &record->argument : nullptr;");
  w.line("if (!published || *published != 0 || atomicCAS(&record->argument, 0, FLASHTILE_KV_ERROR_CLAIMED) != 0)");
  w.line("  return;  // no record, or one value is reported already");
  w.line("record->call = call;");
  w.line("record->kernel = kernel;");
  w.line("record->row = row;");
  w.line("record->column = column;");
  w.line("record->value = value;");
  w.line("record->last = last;");
  w.line("__threadfence();");
  w.line("atomicExch(&record->argument, argument);");
  w.close();
}

void printKvCacheCheckFunction(CudaWriter &w) {
  w.comment("---- the device values of a sequence, checked again at the end of its attention blocks (nothing of the");
  w.comment(
      "main loop is kept for it: it starts from kernel parameters and the block's split, so the loop's registers");
  w.comment("stay as they are; the copies clamped the values already): cacheSeqlens[z] and cacheBatchIdx[z] (thread 0");
  w.comment("of split 0) and the block-table entries of the sequence's keys, the split's share of them (all threads).");
  w.comment("The first one out of range goes to the error record. ----");
  w.open("__device__ __noinline__ void kvCacheCheck(FlashtileKvError *record, int call, int kvCache, "
         "const int *cacheSeqlens, const int *cacheBatchIdx, const int *blockTable, long long blockTableStride, "
         "int pageShift, int capacity, int seqlenNew, int cacheBatches, int z, int split, int numSplits)");
  w.line("int cached = capacity;");
  w.open("if (cacheSeqlens)");
  w.line("const int given = cacheSeqlens[z];");
  w.line("cached = min(max(given, 0), capacity - seqlenNew);");
  w.line("if (given != cached && split == 0 && threadIdx.x == 0)");
  w.line(
      "  kvCacheError(record, call, FLASHTILE_KV_ERROR_CACHE_SEQLENS, FLASHTILE_KV_ERROR_IN_ATTENTION, z, -1, given, "
      "capacity - seqlenNew);");
  w.close();
  w.open("if (kvCache == 1)");
  w.line("const int given = cacheBatchIdx ? cacheBatchIdx[z] : z;");
  w.line("if ((given < 0 || given >= cacheBatches) && split == 0 && threadIdx.x == 0)");
  w.line("  kvCacheError(record, call, FLASHTILE_KV_ERROR_CACHE_BATCH_IDX, FLASHTILE_KV_ERROR_IN_ATTENTION, z, -1, "
         "given, cacheBatches - 1);");
  w.line("return;");
  w.close();
  w.comment("paged: the entries of keys [0, cached + seqlenNew), in numSplits equal shares");
  w.line("const int columns = (cached + seqlenNew + (1 << pageShift) - 1) >> pageShift;");
  w.line("const int share = (columns + numSplits - 1) / numSplits;");
  w.line("const int *const row = blockTable + z * blockTableStride;");
  w.open("for (int column = split * share + threadIdx.x; column < min(columns, (split + 1) * share); "
         "column += blockDim.x)");
  w.line("const int entry = row[column];");
  w.open("if (entry < 0 || entry >= cacheBatches)");
  w.line(
      "kvCacheError(record, call, FLASHTILE_KV_ERROR_BLOCK_TABLE, FLASHTILE_KV_ERROR_IN_ATTENTION, z, column, entry, "
      "cacheBatches - 1);");
  w.line("return;");
  w.close();
  w.close();
  w.close();
}

} // namespace

void printKvErrorFunctions(CudaWriter &w) {
  printKvErrorFunction(w);
  printKvCacheCheckFunction(w);
}

void printKvCacheCheck(CudaWriter &w) {
  w.separate();
  w.comment("---- KV cache: the blocks of the first Q tile of one head check their sequence's device values for the");
  w.comment("error record (kvCacheCheck), each split its share of the block table ----");
  w.line(
      "if (params.kvErrors && blockIdx.y == 0 && blockIdx.x / params.numSplits == gridDim.x / params.numSplits - 1)");
  w.line("  kvCacheCheck(params.kvErrors, params.kvCall, params.kvCache, params.cacheSeqlens, params.cacheBatchIdx, "
         "params.blockTable, params.blockTableStride, params.pageShift, params.cacheCapacity, params.seqlenNew, "
         "params.cacheBatches, blockIdx.z, blockIdx.x % params.numSplits, params.numSplits);");
}

void printKvCacheView(CudaWriter &w, const char *elementType) {
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
  w.line(std::string("p.k = static_cast<const ") + elementType + " *>(params.k) + row * params.kCacheBatchStride;");
  w.line(std::string("p.v = static_cast<const ") + elementType + " *>(params.v) + row * params.vCacheBatchStride;");
  w.close();
  w.open("else");
  w.line("p.blockTable = params.blockTable + z * params.blockTableStride;");
  w.close();
  w.close();
}

/// `__device__ float name(unsigned short x)`: a 16-bit value of the dtype (bf16 or f16) to fp32, exactly.
static void printSixteenBitToFloat(CudaWriter &w, const char *name, bool bf16) {
  w.open(std::string("__device__ __forceinline__ float ") + name + "(unsigned short x)");
  if (bf16) {
    w.line("return __builtin_bit_cast(float, static_cast<unsigned>(x) << 16);  // bf16 is fp32's upper half");
  } else {
    w.line("const unsigned sign = (x & 0x8000u) << 16, exponent = (x >> 10) & 0x1fu, mantissa = x & 0x3ffu;");
    w.line("if (exponent == 31)  // inf, NaN");
    w.line("  return __builtin_bit_cast(float, sign | 0x7f800000u | (mantissa << 13));");
    w.line("if (exponent == 0)  // zero and subnormals: mantissa x 2^-24, exact in fp32");
    w.line("  return (sign ? -1.f : 1.f) * static_cast<float>(mantissa) * 5.9604644775390625e-8f;");
    w.line("return __builtin_bit_cast(float, sign | ((exponent + 112) << 23) | (mantissa << 13));");
  }
  w.close();
}

void printRotaryFunctions(CudaWriter &w, bool bf16) {
  w.comment("---- rotary embedding (tile.rotary): the dtype's 16-bit values <-> fp32, and one element of a rotated");
  w.comment("pair (x0, x1) at angle (c, s): x0·c − x1·s (`first`) or x0·s + x1·c, each product and the sum rounded");
  w.comment("in fp32 (no FMA contraction, as the reference computes), then to the nearest 16-bit value ----");
  printSixteenBitToFloat(w, "rotaryToFloat", bf16);
  w.open("__device__ __forceinline__ unsigned short rotaryRound(float x)");
  w.line("const unsigned u = __builtin_bit_cast(unsigned, x);");
  if (bf16) {
    w.line("if ((u & 0x7fffffffu) > 0x7f800000u)");
    w.line("  return static_cast<unsigned short>((u >> 16) | 0x40u);  // NaN stays NaN");
    w.line("return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // ties to even");
  } else {
    w.line("const unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;");
    w.line("if (a >= 0x7f800000u)  // inf, NaN");
    w.line("  return static_cast<unsigned short>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));");
    w.line("if (a >= 0x477ff000u)  // 65520 and up round to inf");
    w.line("  return static_cast<unsigned short>(sign | 0x7c00u);");
    w.open("if (a >= 0x38800000u)");
    w.comment("a normal f16: rebias the exponent (127 - 15), round the 13 dropped bits to even");
    w.line("const unsigned r = a - 0x38000000u;");
    w.line("return static_cast<unsigned short>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));");
    w.close();
    w.line("const int exponent = static_cast<int>(a >> 23);");
    w.line("if (exponent < 102)  // below 2^-25: rounds to zero");
    w.line("  return static_cast<unsigned short>(sign);");
    w.comment("a subnormal f16 (units of 2^-24; rounding up may give the smallest normal, which is its encoding)");
    w.line("const unsigned mantissa = (a & 0x7fffffu) | 0x800000u;");
    w.line("const int shift = 126 - exponent;");
    w.line("const unsigned q = mantissa >> shift, rest = mantissa & ((1u << shift) - 1u), tie = 1u << (shift - 1);");
    w.line("return static_cast<unsigned short>(sign | (q + (rest > tie || (rest == tie && (q & 1u)) ? 1u : 0u)));");
  }
  w.close();
  w.open("__device__ __forceinline__ unsigned short rotaryOut(unsigned short x0, unsigned short x1, unsigned short c, "
         "unsigned short s, bool first)");
  w.line("const float a = rotaryToFloat(x0), b = rotaryToFloat(x1), cf = rotaryToFloat(c), sf = rotaryToFloat(s);");
  w.line("return rotaryRound(first ? __fsub_rn(__fmul_rn(a, cf), __fmul_rn(b, sf)) : __fadd_rn(__fmul_rn(a, sf), "
         "__fmul_rn(b, cf)));");
  w.close();
}

namespace {

/// The append kernel's conversions of an e4m3 cache: a new 16-bit value to fp32 and fp32 to e4m3. Plain C (no
/// instruction of any target), rounded as the interpreter's roundToE4m3: to nearest, ties to even, saturating at ±448
/// (as cvt.rn.satfinite.e4m3x2.f32), NaN kept.
void printE4m3AppendFunctions(CudaWriter &w, bool bf16) {
  w.comment("---- an e4m3 KV cache's append: the new 16-bit values to fp32, and fp32 to e4m3 (nearest, ties to even,");
  w.comment("saturating at +-448; NaN stays NaN) ----");
  printSixteenBitToFloat(w, "appendToFloat", bf16);
  w.open("__device__ __forceinline__ unsigned appendRoundE4m3(float x)");
  w.line("const unsigned u = __builtin_bit_cast(unsigned, x);");
  w.line("const unsigned sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;");
  w.line("if (a > 0x7f800000u)  // NaN");
  w.line("  return sign | 0x7fu;");
  w.line("if (a >= 0x43e00000u)  // 448 and up (inf included): the largest finite e4m3, 448");
  w.line("  return sign | 0x7eu;");
  w.open("if (a >= 0x3c800000u)");
  w.comment("a normal e4m3 (2^-6 and up): rebias the exponent (127 - 7), round the 20 dropped bits to even");
  w.line("const unsigned r = a - 0x3c000000u;");
  w.line("return sign | min((r + 0x7ffffu + ((r >> 20) & 1u)) >> 20, 0x7eu);");
  w.close();
  w.comment("a subnormal e4m3 (units of 2^-9; 8 units are the smallest normal, which is its encoding): x 2^9 is exact");
  w.line("return sign | __float2uint_rn(__builtin_bit_cast(float, a) * 512.f);");
  w.close();
}

} // namespace

void printKvCacheAppendKernel(CudaWriter &w, const std::string &entry, int headDim, int headDimV,
                              std::optional<bool> rotaryInterleaved, bool e4m3Cache, bool bf16) {
  if (e4m3Cache) {
    w.line("");
    printE4m3AppendFunctions(w, bf16);
  }
  w.line("");
  w.comment("==== the append step of a KV-cache call: new keys and values into the cache ====");
  w.comment("Row i of kNew/vNew (batch entry b, K/V head hKv) becomes key row cacheSeqlens[b] + i of the sequence's");
  w.comment("cache (cacheSeqlens clamped so that the row is inside the cache; a paged cache's page from the block");
  w.comment("table, clamped to the pool; a value out of range goes to the error record as well). Launch: grid");
  w.comment("(ceil(seqlenNew x (kHeadDim + kHeadDimV) / 8 / FLASHTILE_APPEND_THREADS), headsKv, batch), block");
  w.comment("(FLASHTILE_APPEND_THREADS), before the attention kernel on the same stream; one 16-byte chunk of a K or");
  w.comment("V row a thread.");
  w.open("extern \"C\" __global__ void __launch_bounds__(FLASHTILE_APPEND_THREADS) " + entry +
         "(const FlashtileFwdParams params" + (e4m3Cache ? ", const FlashtileFp8Params fp8" : "") + ")");
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
  w.line("const int givenSeqlen = params.cacheSeqlens[b];");
  w.line("const int cached = min(max(givenSeqlen, 0), params.cacheCapacity - params.seqlenNew);");
  w.line("if (cached != givenSeqlen && chunk == 0)  // once per (batch entry, K/V head)");
  w.line("  " + kvErrorReport("params", "FLASHTILE_KV_ERROR_CACHE_SEQLENS", "FLASHTILE_KV_ERROR_IN_APPEND", "b", "-1",
                              "givenSeqlen", "params.cacheCapacity - params.seqlenNew"));
  w.line("const int key = cached + i;");
  w.comment("the cache's key row: a page and a row inside it (paged), or row `key` of the sequence's cache row");
  w.line("long long base, row;");
  w.open("if (params.kvCache == 2)");
  w.line("const int column = key >> params.pageShift;");
  w.line("const int entry = params.blockTable[b * params.blockTableStride + column];");
  w.line("const int page = min(max(entry, 0), params.cacheBatches - 1);");
  w.line("if (page != entry)");
  w.line("  " + kvErrorReport("params", "FLASHTILE_KV_ERROR_BLOCK_TABLE", "FLASHTILE_KV_ERROR_IN_APPEND", "b", "column",
                              "entry", "params.cacheBatches - 1"));
  w.line("base = page;");
  w.line("row = key & ((1 << params.pageShift) - 1);");
  w.close();
  w.open("else");
  w.line("const int given = params.cacheBatchIdx ? params.cacheBatchIdx[b] : b;");
  w.line("base = min(max(given, 0), params.cacheBatches - 1);");
  w.line("if (base != given && chunk == 0)");
  w.line("  " + kvErrorReport("params", "FLASHTILE_KV_ERROR_CACHE_BATCH_IDX", "FLASHTILE_KV_ERROR_IN_APPEND", "b", "-1",
                              "given", "params.cacheBatches - 1"));
  w.line("row = key;");
  w.close();
  w.line("const unsigned short *src = static_cast<const unsigned short *>(isK ? params.kNew : params.vNew) +");
  w.line("    b * (isK ? params.kNewBatchStride : params.vNewBatchStride) + i * (isK ? params.kNewRowStride : "
         "params.vNewRowStride) +");
  w.line("    hKv * (isK ? params.kNewHeadStride : params.vNewHeadStride) + col * 8;");
  const std::string cacheElement = e4m3Cache ? "unsigned char" : "unsigned short";
  w.line("" + cacheElement + " *dst = const_cast<" + cacheElement + " *>(static_cast<const " + cacheElement +
         " *>(isK ? params.k : params.v)) +");
  w.line("    base * (isK ? params.kCacheBatchStride : params.vCacheBatchStride) + row * (isK ? params.kRowStride : "
         "params.vRowStride) +");
  w.line("    hKv * (isK ? params.kHeadStride : params.vHeadStride) + col * 8;");
  // The chunk's 8 new values as they go into the cache: e4m3 bytes (after the rotation, as the 16-bit cache stores
  // the rotated values).
  auto store = [&](const std::string &chunk) {
    if (!e4m3Cache) {
      w.line("*reinterpret_cast<uint4 *>(dst) = " + chunk + ";");
      return;
    }
    w.comment("e4m3 cache: value / descale of this (batch, K/V head), rounded to e4m3 (satfinite), 8 bytes");
    w.line("const float *const descales = isK ? fp8.kDescale : fp8.vDescale;");
    w.line("const float descale = descales ? descales[b * params.headsKv + hKv] : 1.f;");
    w.line("const uint4 chunk16 = " + chunk + ";");
    w.line("const unsigned short *const x16 = reinterpret_cast<const unsigned short *>(&chunk16);");
    w.line("unsigned bytes[2] = {0u, 0u};");
    w.line("#pragma unroll");
    w.open("for (int e = 0; e < 8; ++e)");
    w.line("bytes[e / 4] |= appendRoundE4m3(__fdiv_rn(appendToFloat(x16[e]), descale)) << (8 * (e % 4));");
    w.close();
    w.line("*reinterpret_cast<uint2 *>(dst) = make_uint2(bytes[0], bytes[1]);");
  };
  if (!rotaryInterleaved) {
    store("*reinterpret_cast<const uint4 *>(src)");
    w.close();
    return;
  }
  const bool interleaved = *rotaryInterleaved;
  w.line("uint4 rotated = *reinterpret_cast<const uint4 *>(src);");
  w.open("if (isK && col * 8 < params.rotaryDim)");
  w.comment(std::string("rotary embedding (tile.rotary) of the new key at its position `key` in the cache, pairs ") +
            (interleaved ? "(2i, 2i + 1)" : "(i, i + rotaryDim / 2)") + " of the first");
  w.comment("rotaryDim columns; a partner outside this chunk is read from the same row of kNew. Values are not "
            "rotated.");
  w.line("const int half = min(params.rotaryDim, kHeadDim) / 2, pos = min(key, params.seqlenRo - 1);");
  w.line("const unsigned short *const kRow = src - col * 8;");
  w.line("const unsigned short *const cosRow = static_cast<const unsigned short *>(params.rotaryCos) + pos * half;");
  w.line("const unsigned short *const sinRow = static_cast<const unsigned short *>(params.rotarySin) + pos * half;");
  w.line("unsigned short *const x = reinterpret_cast<unsigned short *>(&rotated);");
  w.line("#pragma unroll");
  w.open("for (int e = 0; e < 8; ++e)");
  w.line("const int c = col * 8 + e;");
  w.line("if (c >= 2 * half)");
  w.line("  break;");
  if (interleaved) {
    w.line("const bool first = c % 2 == 0;");
    w.line("const int i = c / 2, partner = c ^ 1;");
  } else {
    w.line("const bool first = c < half;");
    w.line("const int i = first ? c : c - half, partner = first ? c + half : c - half;");
  }
  w.line("x[e] = first ? rotaryOut(kRow[c], kRow[partner], cosRow[i], sinRow[i], true)");
  w.line("             : rotaryOut(kRow[partner], kRow[c], cosRow[i], sinRow[i], false);");
  w.close();
  w.close();
  store("rotated");
  w.close();
}

} // namespace flashtile::codegen
