//===- TileOpsSm80.cpp - tile ops as mma.sync, ldmatrix and cp.async ------===//
//
// Prints the CUDA of each tile op for the sm80 instruction family: the copies (cp.async), Q·Kᵀ and P·V (ldmatrix,
// mma.sync), the state between K/V steps and the split-KV stores and combine. Its register tiles are mma.sync's C
// fragments, whose math (scale, score_mod, mask, softmax, rescale, finalize, the stores from the registers) is the
// common FragmentTiles'. Register tiles of its own:
//   qFrag[kMTiles][kHeadDim/16][4]  Q as mma A fragments (or re-read per k-step when that would not fit)
// Its prelude is the common fragment prelude (FragmentPrelude.h) in namespace sm80.
// Why one file of ~1050 lines: every op here prints into the same register tiles and copy routines (one class's
// private state); the e4m3 KV cache's copy and widening grew it past 1000, and moving them out would split that class
// across files without making either part readable alone.
//===----------------------------------------------------------------------===//
#include "codegen/sm80/TileOpsSm80.h"
#include "codegen/sm80/BackwardSm80.h"
#include "codegen/common/Concat.h"
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "flashtile/runtime/SplitKv.h"

#include <cassert>
#include <functional>

namespace flashtile::codegen::sm80 {
namespace {

/// The namespace of the kernel's primitives (its prelude: FragmentPrelude.h).
constexpr const char *kNamespace = "sm80";
constexpr int kWarpSize = 32;
constexpr int kChunkElements = 8; // 16-bit elements in a 16-byte chunk
constexpr int kMmaM = 16;         // rows of mma.sync.m16n8k16: a warp's rows come in m16 tiles
/// Q fragments stay in registers for the whole K/V walk when they take at most this many registers a thread;
/// larger Q tiles (head dim 256, several m16 tiles a warp) are re-read from shared memory at every k-step.
constexpr int kMaxQFragmentRegisters = 32;

class TileTargetSm80 final : public TileTarget {
public:
  explicit TileTargetSm80(const KernelShape &shape)
      : shape(shape), fragments({kNamespace, shape.dtype, shape.packQueryHeads}),
        // kv-f16-mma: P is rounded for f16 MMAs; O (fragments) leaves in the program's dtype
        probFragments({kNamespace, shape.kvF16Mma ? std::string("f16") : shape.dtype, shape.packQueryHeads}),
        preludeText(fragmentPrelude(kNamespace)) {
    bool bf16 = shape.dtype == "bf16";
    mTiles = shape.warpRows / kMmaM;
    qInRegisters = mTiles * (shape.headDim / 16) * 4 <= kMaxQFragmentRegisters;
    kvE4m3 = shape.kvDtype == "e4m3";
    kvRegisters = kvE4m3 && shape.kvConvertRegisters;
    f16Mma = kvRegisters && shape.kvF16Mma;
    mma = bf16 && !f16Mma ? "sm80::mmaBf16" : "sm80::mmaF16";
    pack = bf16 ? "sm80::packBf16x2" : "sm80::packF16x2";
    if (kvE4m3)
      preludeText += e4m3WidenPrelude();
  }

  std::string_view prelude() const override { return preludeText; }
  std::string_view preludeNamespace() const override { return kNamespace; }

  std::vector<std::string> reservedNames() const override {
    std::vector<std::string> names = {
        "kWarpRows", "kMTiles", "kSTiles", "kOTiles", "warp", "lane", "fragRow", "fragCol", "b", "h", "hKv", "m0",
        "warpRow0", "smem", "sQ", "sK", "sV", "ldRowQ", "ldChunkQ", "ldRowK", "ldChunkK", "ldRowV", "ldChunkV", "gQ",
        "gK", "gV", "gO", "gLse", "copyQ", "copyKTile", "copyVTile", "qFrag", "kFrag", "vFrag", "kStages",
        "kKTileBytes", "kVTileBytes", "kRowBytesQK", "kRowBytesV", "maxFresh", "maxMoved", "alpha", "lse", "scoreScale",
        "sO", "q", "kv", "sm80",
        // locals of the printed loops
        "mt", "nt", "np", "ks", "k", "r", "c", "i", "s", "l", "invL", "tileMax", "tileSum", "maxNew", "maxUsed",
        "chunk", "row", "col", "seqRow", "inside", "tile", "sinkLog2", "carry",
        // split-KV (storeSplit, combineRow)
        "lseRow", "lseLog2", "keep", "gOAccum", "gLseAccum", "splits", "maxLog2", "sum", "invSum", "weight", "part",
        "o0", "o1", "off", "kSplitsPerLane", "scaled", "wt", "x", "o", "kVec", "kChunks", "v", "kWarps",
        // GQA packing
        "rowQuery", "rowHead", "hRow", "qi", "qh", "packedRows", "dst",
        // paged KV caches (copyRoutine)
        "key", "page", "pageMask",
        // rotary embedding of Q (rotateQ)
        "t", "half", "cached", "cosTable", "sinTable", "pos", "x0", "x1", "c0", "c1", "v0", "v1", "cr", "sr", "rotated",
        "rotaryOut", "rotaryToFloat", "rotaryRound"};
    if (kvE4m3) // e4m3 K/V (a KV cache): the 8-bit staging tiles, the widening and the descales
      for (const char *name : {"sK8", "sV8", "kK8TileBytes", "kV8TileBytes", "fp8", "descaleIndex", "kDescale",
                               "vDescale", "staged", "wide", "widenE4m3x2", "e4m3x2ToF16x2"})
        names.push_back(name);
    if (kvRegisters) // e4m3 fragments converted in registers
      for (const char *name :
           {"kRowBytesK8", "kRowBytesV8", "ldRowK8", "ldChunkK8", "ldRowV8", "ldChunkV8", "kRaw", "vRaw",
            "vEven",       "vOdd",        "nq",      "nc",        "qRow",    "qAddress",  "qLo",  "qHi",
            "quadLane0",   "oddLane",     "srcLo",   "srcHi",     "d0",      "d1",        "d2",   "d3"})
        names.push_back(name);
    if (f16Mma) // kv-f16-mma: Q's scale
      for (const char *name : {"qMax", "qShift", "qScale", "qUnscale", "qBits"})
        names.push_back(name);
    return names;
  }

  void setup(CudaWriter &w, const std::vector<Operand> &copied) override;
  void setupTile(CudaWriter &w) override;
  bool copyAsync(CudaWriter &w, Operand operand, const std::string &tile, const std::string &pred) override;
  bool wait(CudaWriter &w, const std::vector<Operand> &operands, int64_t newerCopies) override;
  void load(CudaWriter &w, Operand operand, const std::string &tile) override;
  bool rotateQ(CudaWriter &w, bool interleaved, bool perRow) override;
  void initState(CudaWriter &w, const StateNames &st) override { fragments.initState(w, st); }
  bool stateLoad(CudaWriter &w, const StateNames &st) override;
  bool stateStore(CudaWriter &w, const StateNames &st) override;
  void qk(CudaWriter &w, const std::string &kTile, const std::string &scores) override;
  void carryScores(CudaWriter &w, const std::string &to, const std::string &from) override {
    fragments.carryScores(w, to, from);
  }
  void scale(CudaWriter &w, const std::string &s) override { fragments.scale(w, s); }
  void scoreMod(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn,
                KeyArg key) override {
    fragments.scoreMod(w, s, kTile, fn, key);
  }
  void mask(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn, KeyArg key,
            bool readsInputs) override {
    fragments.mask(w, s, kTile, fn, key, readsInputs);
  }
  void softmaxUpdate(CudaWriter &w, const StateNames &st, const std::string &s, const std::string &p, bool foldScale,
                     int rescaleThreshold) override {
    fragments.softmaxUpdate(w, st, s, foldScale, rescaleThreshold);
    probFragments.packProbabilities(w, s, p, true);
  }
  void rescale(CudaWriter &w, const StateNames &st, bool onlyWhenMoved) override {
    fragments.rescale(w, st, onlyWhenMoved);
  }
  void pv(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vTile) override;
  void finalize(CudaWriter &w, const StateNames &st, const std::string &sinkFn) override {
    if (kvRegisters)
      unpermuteAcc(w, st);
    fragments.finalize(w, st, sinkFn);
    if (kvE4m3)
      fragments.scaleByVDescale(w, st);
  }
  void storeO(CudaWriter &w, const StateNames &st, bool stagedInQ) override;
  void storeLse(CudaWriter &w) override { fragments.storeLse(w); }
  bool storeSplit(CudaWriter &w, const StateNames &st, const std::string &sinkFn, bool stagedInQ) override;
  bool combineRow(CudaWriter &w, const std::string &sinkFn) override;

private:
  /// The C names of one operand's tile: shared buffer, global base, rows, sequence length, row stride, width.
  struct OperandNames {
    const char *name, *smem, *global, *copy, *rows, *seqlen, *rowStride, *width;
  };
  static OperandNames names(Operand operand);
  /// The shared-memory layout (sQ, sK, sV and, with e4m3 K/V, the staging tiles) and the ldmatrix addresses.
  void sharedLayout16(CudaWriter &w);
  /// kv-convert 1: sQ 16-bit, sK and sV the 8-bit tiles, and the ldmatrix addresses of their fragments.
  void sharedLayout8(CudaWriter &w);
  /// `elementBytes` 1: the K or V tile of an e4m3 cache into its 8-bit buffer (kv-convert 1), 16 values a chunk.
  void copyRoutine(CudaWriter &w, Operand operand, int elementBytes = 2);
  /// The copy routine of an e4m3 K or V tile (a KV cache, shape.kvDtype): cp.async of its 8-bit rows, 16 keys' bytes
  /// a chunk, into the operand's staging buffer (sK8, sV8), through the block table of a paged cache.
  void copyRoutineE4m3(CudaWriter &w, Operand operand);
  /// Where an e4m3 K or V tile is read (tile.load, after its copy's wait): every thread widens its share of the staged
  /// 8-bit tile into the 16-bit buffer the MMAs read, then a barrier.
  void widenE4m3(CudaWriter &w, Operand operand, const std::string &tile);
  /// The device functions of the widening (printed after the prelude of kernels that read e4m3 K/V only, so that
  /// other kernels' text is unchanged).
  std::string e4m3WidenPrelude() const;
  /// kv-convert 1: the 8-bit tiles are read into MMA fragments and converted in registers (TileKvDtype.h). Q's A
  /// fragments of k16 step `ks` (a C expression) for m16 tile `mt`, in the column order of the 8-bit K fragments.
  void loadQPermuted(CudaWriter &w, const std::string &frag) const;
  void qkRegisters(CudaWriter &w, const std::string &kTile, const std::string &scores);
  void pvRegisters(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vTile);
  /// After the K/V walk of kv-convert 1: acc's columns from the 8-bit V fragments' order back to the mma C layout.
  void unpermuteAcc(CudaWriter &w, const StateNames &st) const;
  /// The device functions of kv-convert 1 (after e4m3WidenPrelude's conversions of two values).
  std::string e4m3RegistersPrelude() const;
  /// The staging address (a C expression) of e4m3 K or V tile `tile`.
  std::string stagingAddress(Operand operand, const std::string &tile) const;
  /// In a K/V copy routine of a program that reads a KV cache, under `if (p.kvCache == 2)`: the cp.async of key row
  /// `key` (a C expression) of the sequence, through its block-table row, into `dst` (shared address) — one page lookup
  /// a chunk: for copy routines whose threads do not step down rows by a fixed count (else pagedTileCopy).
  void pagedCopy(CudaWriter &w, Operand operand, const std::string &key, const std::string &dst,
                 const std::string &col);
  /// The paged-cache branch of a K/V copy routine whose threads each keep one column and step down rows
  /// (`perRow`: a row's 16-byte chunks): a block-table lookup only where a thread's next row starts a page (once a
  /// tile when a page holds the tile), the contiguous copy's pointer stepping in between.
  void pagedTileCopy(CudaWriter &w, Operand operand, const std::string &perRow, int elementBytes = 2);
  /// The shared-memory address (a C expression) of the buffer that holds K or V tile `tile`.
  std::string bufferAddress(Operand operand, const std::string &tile) const;
  /// The rows of this thread (FragmentTiles::forEachRow) and the block row of one (FragmentTiles::threadRow).
  void forEachRow(CudaWriter &w, const std::function<void()> &body) const { fragments.forEachRow(w, body); }
  static std::string threadRow(const char *half = "r") { return FragmentTiles::threadRow(half); }

  KernelShape shape;
  FragmentTiles fragments, probFragments;
  std::string preludeText, mma, pack;
  int mTiles = 0;
  bool qInRegisters = true;
  bool kvE4m3 = false; ///< K and V are e4m3 (tile.kv_dtype): staged as 8-bit, widened to the dtype in shared memory
  /// K and V are e4m3 and their fragments are converted in registers (kv-convert 1): sK and sV hold the 8-bit tiles.
  bool kvRegisters = false;
  /// kv-f16-mma (with kvRegisters in a bf16 program): Q·Kᵀ and P·V in f16, Q's fragments scaled a warp.
  bool f16Mma = false;
  /// kv-f16-mma: Q's bf16 fragments (in registers) to f16, scaled by a power of two a warp.
  void scaleQToF16(CudaWriter &w) const;
};

TileTargetSm80::OperandNames TileTargetSm80::names(Operand operand) {
  switch (operand) {
  case Operand::Q:
    return {"Q", "sQ", "gQ", "copyQ", "kBlockM", "p.seqlenQ", "p.qRowStride", "kHeadDim"};
  case Operand::K:
    return {"K", "sK", "gK", "copyKTile", "kBlockN", "p.seqlenK", "p.kRowStride", "kHeadDim"};
  case Operand::V:
    return {"V", "sV", "gV", "copyVTile", "kBlockN", "p.seqlenK", "p.vRowStride", "kHeadDimV"};
  }
  assert(false && "unknown operand");
  return {};
}

void TileTargetSm80::setup(CudaWriter &w, const std::vector<Operand> &copied) {
  w.comment("---- warp layout (split-Q): warp w owns query rows [w * kWarpRows, (w + 1) * kWarpRows) ----");
  w.line("constexpr int kWarpRows = kBlockM / kWarps;");
  w.line("constexpr int kMTiles = kWarpRows / 16;  // m16 tiles of a warp");
  w.line("constexpr int kSTiles = kBlockN / 8;     // n8 tiles of a score row");
  w.line("constexpr int kOTiles = kHeadDimV / 8;   // n8 tiles of an output row");
  w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;");
  w.comment("An mma C fragment gives each lane rows fragRow and fragRow + 8 of an m16 tile, columns fragCol and");
  w.comment("fragCol + 1 of an n8 tile.");
  w.line("const int fragRow = lane / 4, fragCol = 2 * (lane % 4);");
  if (shape.packQueryHeads) {
    w.line("const int b = blockBatch, hKv = blockKvHead;");
    w.line("const int m0 = qTile * kBlockM;              // first (packed) row of this thread block");
    w.line("const int warpRow0 = m0 + warp * kWarpRows;  // first (packed) row of this warp");
    w.line("const int packedRows = p.seqlenQ * headsPerKv;  // rows of the sequence: query rows x the group's heads");
    w.comment("GQA packing: this thread's rows (mt, r) are query row rowQuery of query head rowHead");
    w.line("int rowQuery[kMTiles][2], rowHead[kMTiles][2];");
    forEachRow(w, [&] {
      w.line(cat("const int row = ", threadRow(), ";"));
      w.line("rowQuery[mt][r] = row / headsPerKv;");
      w.line("rowHead[mt][r] = hKv * headsPerKv + row % headsPerKv;");
    });
  } else {
    w.line("const int b = blockBatch, h = blockHead;");
    w.line("const int hKv = h / (p.headsQ / p.headsKv);  // grouped-query attention: K/V head of query head h");
    w.line("const int m0 = qTile * kBlockM;              // first query row of this thread block");
    w.line("const int warpRow0 = m0 + warp * kWarpRows;  // first query row of this warp");
  }
  w.line("");

  if (kvRegisters)
    sharedLayout8(w);
  else
    sharedLayout16(w);
  if (copied.empty())
    return;

  w.line("");
  w.comment("---- global tiles of this (batch, head): 64-bit offsets, strides in elements ----");
  for (Operand operand : copied) {
    OperandNames n = names(operand);
    const char *pointer = operand == Operand::Q ? "p.q" : operand == Operand::K ? "p.k" : "p.v";
    const char *head = operand == Operand::Q ? "h" : "hKv";
    std::string prefix = operand == Operand::Q ? "p.q" : operand == Operand::K ? "p.k" : "p.v";
    if (operand == Operand::Q && shape.packQueryHeads) {
      w.line(cat("const unsigned short *const ", n.global, " = static_cast<const unsigned short *>(", pointer,
                 ") + b * ", prefix, "BatchStride;  // rows pick their own heads (GQA packing)"));
      continue;
    }
    const char *element = kvE4m3 && operand != Operand::Q ? "unsigned char" : "unsigned short";
    w.line(cat("const ", element, " *const ", n.global, " = static_cast<const ", element, " *>(", pointer, ") + b * ",
               prefix, "BatchStride + ", head, " * ", prefix, "HeadStride;"));
  }
  w.line("");
  w.comment("---- asynchronous tile copies: 16-byte cp.async.cg chunks spread over all threads; rows past the");
  w.comment("sequence are zero-filled, so the MMAs need no bounds checks ----");
  for (Operand operand : copied)
    if (kvE4m3 && operand != Operand::Q)
      copyRoutineE4m3(w, operand);
    else
      copyRoutine(w, operand);
}

void TileTargetSm80::sharedLayout16(CudaWriter &w) {
  if (shape.stages == 1) {
    w.comment(
        "---- shared memory: sQ [kBlockM][kHeadDim], sK [kBlockN][kHeadDim], sV [kBlockN][kHeadDimV], 16-bit ----");
  } else {
    w.comment(cat("---- shared memory: sQ [kBlockM][kHeadDim], sK [kStages][kBlockN][kHeadDim], sV [kStages][kBlockN]",
                  "[kHeadDimV], 16-bit; K/V tile j lives in buffer j % kStages ----"));
  }
  w.comment("Rows are 16-byte chunks: XOR-swizzled (chunk c of row r at c ^ (r & 7)) when a row has a multiple of 8");
  w.comment("chunks, else padded to an odd number of chunks (sm80::rowPitch), so ldmatrix and cp.async phases hit");
  w.comment("distinct banks. kRowBytesQK and kRowBytesV are a row's bytes in shared memory, padding included.");
  w.line("constexpr int kRowBytesQK = sm80::rowPitch<kHeadDim / 8>() * 16, kRowBytesV = sm80::rowPitch<kHeadDimV / "
         "8>() * 16;");
  w.line("extern __shared__ __align__(128) unsigned char smem[];");
  w.line("unsigned char *const sQ = smem;");
  if (shape.stages == 1) {
    w.line("unsigned char *const sK = sQ + kBlockM * kRowBytesQK;");
    w.line("unsigned char *const sV = sK + kBlockN * kRowBytesQK;");
  } else {
    w.line(cat("constexpr int kStages = ", shape.stages, ";"));
    w.line("constexpr unsigned kKTileBytes = kBlockN * kRowBytesQK, kVTileBytes = kBlockN * kRowBytesV;");
    w.line("unsigned char *const sK = sQ + kBlockM * kRowBytesQK;");
    w.line("unsigned char *const sV = sK + kStages * kKTileBytes;");
  }
  if (kvE4m3) {
    w.comment(
        "e4m3 K and V (a KV cache): each tile lands as its 8-bit rows (kHeadDim or kHeadDimV bytes, unpadded) in");
    w.comment(
        "a staging buffer, sK8 or sV8, and is widened into sK or sV where it is read (exactly: every e4m3 value is");
    w.comment(
        cat("a", shape.dtype == "bf16" ? " bf16" : "n f16", " value), so the MMAs below are the 16-bit kernel's"));
    w.line(cat("constexpr unsigned kK8TileBytes = kBlockN * kHeadDim, kV8TileBytes = kBlockN * kHeadDimV;"));
    w.line(cat("unsigned char *const sK8 = sV + ", shape.stages, " * kBlockN * kRowBytesV;"));
    w.line(cat("unsigned char *const sV8 = sK8 + ", shape.stages, " * kK8TileBytes;"));
  }
  w.comment("ldmatrix addresses: this lane's row offset (bytes) and swizzled chunk offset for row step 0 and");
  w.comment("logical chunk c0 in {0, 1}; the MMA loops add 16-row steps and XOR 32·s for chunk c0 + 2s, constants");
  w.comment("once unrolled (see sm80::swizzledChunk).");
  w.line("const unsigned ldRowQ = (warp * kWarpRows + lane % 16) * kRowBytesQK;");
  w.line("const unsigned ldChunkQ = sm80::swizzledChunk<kHeadDim / 8>(lane % 16, lane / 16);");
  w.line("const unsigned ldRowK = (8 * (lane / 16) + lane % 8) * kRowBytesQK;");
  w.line("const unsigned ldChunkK = sm80::swizzledChunk<kHeadDim / 8>(lane % 8, (lane / 8) % 2);");
  w.line("const unsigned ldRowV = (8 * ((lane / 8) % 2) + lane % 8) * kRowBytesV;");
  w.line("const unsigned ldChunkV = sm80::swizzledChunk<kHeadDimV / 8>(lane % 8, lane / 16);");
}

void TileTargetSm80::sharedLayout8(CudaWriter &w) {
  w.comment(cat("---- shared memory: sQ [kBlockM][kHeadDim] 16-bit; sK [", shape.stages > 1 ? "kStages][" : "",
                "kBlockN][kHeadDim], sV [", shape.stages > 1 ? "kStages][" : "", "kBlockN][kHeadDimV] e4m3",
                shape.stages > 1 ? "; K/V tile j lives in buffer j % kStages" : "", " ----"));
  w.comment("e4m3 K and V (a KV cache) stay 8-bit in shared memory: ldmatrix reads their MMA fragments and every");
  w.comment(cat("warp converts what it reads to ", shape.dtype,
                " in registers (exactly), so there is no 16-bit K/V tile and no widening barrier."));
  w.comment("Rows are 16-byte chunks, XOR-swizzled (a multiple of 8 chunks a row) or padded to an odd count, as sQ.");
  w.line("constexpr int kRowBytesQK = sm80::rowPitch<kHeadDim / 8>() * 16;");
  w.line("constexpr int kRowBytesK8 = sm80::rowPitch<kHeadDim / 16>() * 16, kRowBytesV8 = "
         "sm80::rowPitch<kHeadDimV / 16>() * 16;");
  w.line("extern __shared__ __align__(128) unsigned char smem[];");
  w.line("unsigned char *const sQ = smem;");
  w.line("unsigned char *const sK = sQ + kBlockM * kRowBytesQK;");
  if (shape.stages == 1) {
    w.line("unsigned char *const sV = sK + kBlockN * kRowBytesK8;");
  } else {
    w.line(cat("constexpr int kStages = ", shape.stages, ";"));
    w.line("constexpr unsigned kKTileBytes = kBlockN * kRowBytesK8, kVTileBytes = kBlockN * kRowBytesV8;");
    w.line("unsigned char *const sV = sK + kStages * kKTileBytes;");
  }
  w.comment("ldmatrix addresses of the 8-bit tiles: K, non-transposed, lane l gives key row l of a 32-key group");
  w.comment("(four n8 tiles) at chunk ks; V, transposed, keys 8 * (l / 8 % 2) + l % 8 of a 16-key step at chunk");
  w.comment("l / 16 (+ 2 per 32 columns); the loops XOR 16·ks and 32·nc into the chunk offsets (sm80::swizzledChunk)");
  w.line("const unsigned ldRowK8 = lane * kRowBytesK8;");
  w.line("const unsigned ldChunkK8 = sm80::swizzledChunk<kHeadDim / 16>(lane % 8, 0);");
  w.line("const unsigned ldRowV8 = (8 * ((lane / 8) % 2) + lane % 8) * kRowBytesV8;");
  w.line("const unsigned ldChunkV8 = sm80::swizzledChunk<kHeadDimV / 16>(lane % 8, lane / 16);");
}

void TileTargetSm80::setupTile(CudaWriter &w) {
  if (!kvE4m3)
    return;
  w.comment("---- FP8 descales of this (batch, K/V head) (FlashtileFp8Params; null = 1): k_descale joins the softmax");
  w.comment("scale, so the variant's functions see the scores of the dequantized keys, and v_descale multiplies O at");
  w.comment("finalize ----");
  w.line("const int descaleIndex = b * p.headsKv + hKv;");
  w.line("const float kDescale = fp8.kDescale ? fp8.kDescale[descaleIndex] : 1.f;");
  w.line("const float vDescale = fp8.vDescale ? fp8.vDescale[descaleIndex] : 1.f;");
  w.line("p.softmaxScale = params.softmaxScale * kDescale;");
  w.line("p.scaleLog2 = params.scaleLog2 * kDescale;");
  w.line("p.invSoftmaxScale = 1.f / p.softmaxScale;");
}


std::string TileTargetSm80::stagingAddress(Operand operand, const std::string &tile) const {
  const char *buffer = operand == Operand::K ? "sK8" : "sV8";
  std::string base = cat("sm80::smemAddress(", buffer, ")");
  if (shape.stages == 1)
    return base;
  return cat("(", base, " + (", tile, " & (kStages - 1)) * ", operand == Operand::K ? "kK8TileBytes" : "kV8TileBytes",
             ")");
}

void TileTargetSm80::copyRoutineE4m3(CudaWriter &w, Operand operand) {
  OperandNames n = names(operand);
  const int width = operand == Operand::V ? shape.headDimV : shape.headDim;
  const int chunks = shape.blockN * width / 16, threads = shape.warps * kWarpSize;
  const bool even = chunks % threads == 0;
  const std::string chunkCount = cat("kBlockN * ", n.width, " / 16");
  const char *pageStride = operand == Operand::K ? "p.kCacheBatchStride" : "p.vCacheBatchStride";
  if (kvRegisters) {
    w.comment(cat("e4m3 ", n.name, ": 16-byte cp.async.cg chunks (16 keys' values of a row) into ", n.smem,
                  " (swizzled rows); rows past the"));
    w.comment("sequence are zero-filled (converted to zeros)");
    if (even && threads % (width / 16) == 0)
      return copyRoutine(w, operand, /*elementBytes=*/1);
  } else {
    w.comment(cat("e4m3 ", n.name, ": 16-byte cp.async.cg chunks (16 keys' values of a row) into the staging buffer,"));
    w.comment("rows of the tile back to back; rows past the sequence are zero-filled (widened to zeros)");
  }
  w.open(cat("auto ", n.copy, " = [&](int tile)"));
  w.openUnrolledFor("i", even ? cat(chunkCount, " / kThreads") : cat("(", chunkCount, " + kThreads - 1) / kThreads"));
  w.line("const int chunk = threadIdx.x + i * kThreads;");
  if (!even)
    w.open(cat("if (chunk < ", chunkCount, ")"));
  w.line(cat("const int row = chunk / (", n.width, " / 16), col = chunk % (", n.width, " / 16);"));
  w.line("const int seqRow = tile * kBlockN + row;");
  if (kvRegisters)
    w.line(cat("const unsigned dst = ", bufferAddress(operand, "tile"), " + sm80::swizzle<", n.width,
               " / 16>(row, col);"));
  else
    w.line(cat("const unsigned dst = ", stagingAddress(operand, "tile"), " + row * ", n.width, " + col * 16;"));
  w.open("if (p.kvCache == 2)");
  w.comment(
      "paged cache: key row `key` is row key % pageSize of page blockTable[key / pageSize] (clamped to the pool)");
  w.line("const int key = seqRow;");
  w.line(cat("const bool inside = key < ", n.seqlen, ";"));
  w.line("const int page = inside ? min(max(p.blockTable[key >> p.pageShift], 0), p.cacheBatches - 1) : 0;");
  w.line("const int pageMask = (1 << p.pageShift) - 1;");
  w.line(cat("sm80::cpAsync16(dst, ", n.global, " + page * ", pageStride, " + (inside ? key & pageMask : 0) * ",
             n.rowStride, " + col * 16, inside);"));
  w.close();
  w.open("else");
  w.line(cat("const bool inside = seqRow < ", n.seqlen, ";"));
  w.line(cat("sm80::cpAsync16(dst, ", n.global, " + (inside ? seqRow : 0) * ", n.rowStride, " + col * 16, inside);"));
  w.close();
  if (!even)
    w.close();
  w.close();
  w.close(";");
}

void TileTargetSm80::widenE4m3(CudaWriter &w, Operand operand, const std::string &tile) {
  OperandNames n = names(operand);
  const int width = operand == Operand::V ? shape.headDimV : shape.headDim;
  const int chunks = shape.blockN * width / 16, threads = shape.warps * kWarpSize;
  const bool even = chunks % threads == 0;
  const std::string chunkCount = cat("kBlockN * ", n.width, " / 16");
  w.comment(cat(n.name, " tile ", tile, " landed as e4m3 in ", operand == Operand::K ? "sK8" : "sV8",
                ": each thread widens 16 values at a time to ", shape.dtype, " (two 16-byte chunks of ", n.smem, ")"));
  w.openUnrolledFor("i", even ? cat(chunkCount, " / kThreads") : cat("(", chunkCount, " + kThreads - 1) / kThreads"));
  w.line("const int chunk = threadIdx.x + i * kThreads;");
  if (!even)
    w.open(cat("if (chunk < ", chunkCount, ")"));
  w.line(cat("const int row = chunk / (", n.width, " / 16), col = chunk % (", n.width, " / 16);"));
  w.line(cat("const uint4 staged = sm80::loadShared16(", stagingAddress(operand, tile), " + row * ", n.width,
             " + col * 16);"));
  w.line("uint4 wide[2];");
  w.line("sm80::widenE4m3x16(staged, wide);");
  w.line(cat("sm80::storeShared16(", bufferAddress(operand, tile), " + sm80::swizzle<", n.width,
             " / 8>(row, 2 * col), wide[0]);"));
  w.line(cat("sm80::storeShared16(", bufferAddress(operand, tile), " + sm80::swizzle<", n.width,
             " / 8>(row, 2 * col + 1), wide[1]);"));
  if (!even)
    w.close();
  w.close();
  w.line(cat("__syncthreads();  // ", n.smem, " holds the widened tile for every warp"));
}

void TileTargetSm80::loadQPermuted(CudaWriter &w, const std::string &frag) const {
  w.comment("k16 step ks of K's 8-bit fragments gives lane q (= lane % 4) the columns 16ks + 4q .. 4q + 3 of its key");
  w.comment("(four bytes of one ldmatrix register), converted as the pairs mma takes for k = 2q, 2q + 1 and 2q + 8,");
  w.comment("2q + 9: Q's A fragment takes the same columns, one 8-byte load of rows fragRow and fragRow + 8 each");
  w.line("const int qRow = warp * kWarpRows + mt * 16 + fragRow;");
  w.line("const unsigned qAddress = sm80::smemAddress(sQ) + sm80::swizzle<kHeadDim / 8>(qRow, 2 * ks + (lane % 4) / "
         "2) + 8 * (lane % 2);");
  w.line("const uint2 qLo = sm80::loadShared8(qAddress), qHi = sm80::loadShared8(qAddress + 8 * kRowBytesQK);");
  w.line(cat(frag, "[0] = qLo.x;"));
  w.line(cat(frag, "[1] = qHi.x;"));
  w.line(cat(frag, "[2] = qLo.y;"));
  w.line(cat(frag, "[3] = qHi.y;"));
}

void TileTargetSm80::scaleQToF16(CudaWriter &w) const {
  w.comment("kv-f16-mma: Q's bf16 fragments to f16 for f16 MMAs over the e4m3 K/V fragments, scaled by 2^-qShift so");
  w.comment("that the warp's largest |q| lies in [2^14, 2^15) (f16 holds it; its 11 bits keep bf16's 8); S = Q·Kᵀ is");
  w.comment("multiplied back by 2^qShift, exactly. A NaN stays NaN, an inf stays inf.");
  auto forEachQRegister = [&](const std::string &line) { // each register of qFrag: two bf16 values, qBits
    w.openUnrolledFor("mt", "kMTiles");
    w.openUnrolledFor("ks", "kHeadDim / 16");
    w.openUnrolledFor("i", "4");
    w.line("const unsigned qBits = qFrag[mt][ks][i];");
    w.line(line);
    w.close();
    w.close();
    w.close();
  };
  w.line("float qMax = 0.f;");
  forEachQRegister(
      "qMax = fmaxf(qMax, fmaxf(fabsf(__uint_as_float(qBits << 16)), fabsf(__uint_as_float(qBits & 0xffff0000u))));");
  w.openUnrolledFor("i", "5");
  w.line("qMax = fmaxf(qMax, __shfl_xor_sync(0xffffffffu, qMax, 1 << i));");
  w.close();
  w.line("const int qShift = min(max(int((__float_as_uint(qMax) >> 23) & 0xffu) - 127 - 14, -100), 100);");
  w.line("const float qScale = __uint_as_float(unsigned(127 - qShift) << 23);  // 2^-qShift");
  w.line("const float qUnscale = __uint_as_float(unsigned(127 + qShift) << 23);  // 2^qShift");
  forEachQRegister("qFrag[mt][ks][i] = sm80::packF16x2(__uint_as_float(qBits << 16) * qScale, "
                   "__uint_as_float(qBits & 0xffff0000u) * qScale);");
}

void TileTargetSm80::qkRegisters(CudaWriter &w, const std::string &kTile, const std::string &scores) {
  w.comment(
      cat(scores, " = Q·Kᵀ for K tile ", kTile, " (mma.sync m16n8k16, fp32) on the 8-bit K tile: ldmatrix.x4 of"));
  w.comment("32 keys' rows at one 16-column chunk gives each lane four e4m3 values of its key in each of four n8");
  w.comment(cat("tiles, converted to ", shape.dtype,
                " pairs (sm80::widenE4m3x4) in the column order Q's fragments were read in"));
  w.line(cat("float ", scores, "[kMTiles][kSTiles][4] = {};"));
  w.openUnrolledFor("ks", "kHeadDim / 16");
  std::string qOperand = "qFrag[mt][ks]";
  if (!qInRegisters) {
    qOperand = "qFrag[mt]";
    w.line("unsigned qFrag[kMTiles][4];");
    w.openUnrolledFor("mt", "kMTiles");
    loadQPermuted(w, "qFrag[mt]");
    w.close();
  }
  w.openUnrolledFor("nq", "kBlockN / 32");
  w.line("unsigned kRaw[4];");
  w.line(cat("sm80::ldmatrixX4(kRaw, ", bufferAddress(Operand::K, kTile),
             " + ldRowK8 + nq * 32 * kRowBytesK8 + (ldChunkK8 ^ (16 * ks)));"));
  w.openUnrolledFor("i", "4");
  w.line("unsigned kFrag[2];");
  w.line("sm80::widenE4m3x4(kRaw[i], kFrag);");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat(mma, "(", scores, "[mt][4 * nq + i], ", qOperand, ", kFrag[0], kFrag[1]);"));
  w.close();
  w.close();
  w.close();
  w.close();
  if (f16Mma) {
    w.comment("kv-f16-mma: S of the scaled Q, times 2^qShift (exact)");
    w.openUnrolledFor("mt", "kMTiles");
    w.openUnrolledFor("nt", "kSTiles");
    w.openUnrolledFor("i", "4");
    w.line(cat(scores, "[mt][nt][i] *= qUnscale;"));
    w.close();
    w.close();
    w.close();
  }
}

void TileTargetSm80::pvRegisters(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vTile) {
  w.comment("acc += P·V (mma.sync m16n8k16, fp32) on the 8-bit V tile: ldmatrix.x4.trans of a 16-key step at two");
  w.comment("16-column chunks gives lane (g, q) keys 2q, 2q + 1 (and + 8) of columns 2g and 2g + 1 of each chunk, two");
  w.comment(cat("bytes each, split by column and converted to ", shape.dtype,
                " (sm80::widenE4m3x4Trans): n8 tile 2c of acc holds chunk c's even"));
  w.comment("columns, 2c + 1 its odd ones (put back in order after the walk)");
  w.openUnrolledFor("k", "kBlockN / 16");
  w.openUnrolledFor("nc", "kHeadDimV / 32");
  w.line("unsigned vRaw[4];");
  w.line(cat("sm80::ldmatrixX4Trans(vRaw, ", bufferAddress(Operand::V, vTile),
             " + ldRowV8 + k * 16 * kRowBytesV8 + (ldChunkV8 ^ (32 * nc)));"));
  w.openUnrolledFor("c", "2");
  w.line("unsigned vEven[2], vOdd[2];");
  w.line("sm80::widenE4m3x4Trans(vRaw[2 * c], vRaw[2 * c + 1], vEven, vOdd);");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat(mma, "(", st.acc, "[mt][4 * nc + 2 * c], ", p, "[mt][k], vEven[0], vEven[1]);"));
  w.line(cat(mma, "(", st.acc, "[mt][4 * nc + 2 * c + 1], ", p, "[mt][k], vOdd[0], vOdd[1]);"));
  w.close();
  w.close();
  w.close();
  w.close();
}

void TileTargetSm80::unpermuteAcc(CudaWriter &w, const StateNames &st) const {
  w.comment("---- acc's columns back to the mma C layout: the 8-bit V fragments left lane q (= lane % 4) of a quad");
  w.comment("columns 16c + 4q, 4q + 2 (n8 tile 2c) and 16c + 4q + 1, 4q + 3 (tile 2c + 1) of each 16-column chunk c;");
  w.comment(
      "the C layout, which finalize and the stores read, wants 16c + 2q, 2q + 1 and 16c + 8 + 2q, 9 + 2q: lane q");
  w.comment("takes them from lanes q / 2 and 2 + q / 2 of its quad (the even or odd pair of each, by q's parity) ----");
  w.open("");
  w.line("const int quadLane0 = lane & ~3, oddLane = lane & 1;");
  w.line("const int srcLo = quadLane0 + (lane % 4) / 2, srcHi = srcLo + 2;");
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("c", "kOTiles / 2");
  w.openUnrolledFor("r", "2");
  w.comment("this lane's columns 16c + 4q + 0, 1, 2, 3");
  w.line(cat("const float d0 = ", st.acc, "[mt][2 * c][2 * r], d1 = ", st.acc, "[mt][2 * c + 1][2 * r];"));
  w.line(cat("const float d2 = ", st.acc, "[mt][2 * c][2 * r + 1], d3 = ", st.acc, "[mt][2 * c + 1][2 * r + 1];"));
  w.line("const float lo0 = __shfl_sync(0xffffffffu, d0, srcLo), lo1 = __shfl_sync(0xffffffffu, d1, srcLo);");
  w.line("const float lo2 = __shfl_sync(0xffffffffu, d2, srcLo), lo3 = __shfl_sync(0xffffffffu, d3, srcLo);");
  w.line("const float hi0 = __shfl_sync(0xffffffffu, d0, srcHi), hi1 = __shfl_sync(0xffffffffu, d1, srcHi);");
  w.line("const float hi2 = __shfl_sync(0xffffffffu, d2, srcHi), hi3 = __shfl_sync(0xffffffffu, d3, srcHi);");
  w.line(cat(st.acc, "[mt][2 * c][2 * r] = oddLane ? lo2 : lo0;"));
  w.line(cat(st.acc, "[mt][2 * c][2 * r + 1] = oddLane ? lo3 : lo1;"));
  w.line(cat(st.acc, "[mt][2 * c + 1][2 * r] = oddLane ? hi2 : hi0;"));
  w.line(cat(st.acc, "[mt][2 * c + 1][2 * r + 1] = oddLane ? hi3 : hi1;"));
  w.close();
  w.close();
  w.close();
  w.close();
}

std::string TileTargetSm80::e4m3RegistersPrelude() const {
  const bool bf16 = shape.dtype == "bf16" && !f16Mma; // kv-f16-mma: the fragments stay f16
  std::string text = R"cuda(// kv-convert 1: MMA fragments read from the 8-bit tiles and converted in registers.
// Four e4m3 values (the bytes of x, lowest first) to two pairs of the kernel's 16-bit type: out[0] = bytes 0 and 1,
// out[1] = bytes 2 and 3 (sm_89 and later convert each half of x in place, no shift).
__device__ __forceinline__ void widenE4m3x4(unsigned x, unsigned (&out)[2]) {
  unsigned h[2];
#if __CUDA_ARCH__ >= 890
  asm("{.reg .b16 l, u; mov.b32 {l, u}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, u;}"
      : "=r"(h[0]), "=r"(h[1]) : "r"(x));
#else
  h[0] = e4m3x2ToF16x2(x);
  h[1] = e4m3x2ToF16x2(x >> 16);
#endif
)cuda";
  if (bf16) {
    text += R"cuda(#pragma unroll
  for (int i = 0; i < 2; ++i) {  // f16 to bf16 through fp32, exactly
    float lo, hi;
    asm("{.reg .f16 l, u; mov.b32 {l, u}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, u;}" : "=f"(lo), "=f"(hi) : "r"(h[i]));
    out[i] = packBf16x2(lo, hi);
  }
}
)cuda";
  } else {
    text += R"cuda(  out[0] = h[0];
  out[1] = h[1];
}
)cuda";
  }
  text +=
      R"cuda(// Two registers of ldmatrix.trans over 8-bit rows (keys 2q, 2q + 1 of columns 2g, 2g + 1: bytes (2q, 2g),
// (2q, 2g + 1), (2q + 1, 2g), (2q + 1, 2g + 1); a of keys k, b of keys k + 8) to the B fragments of column 2g (even)
// and column 2g + 1 (odd): each a pair of keys in the kernel's 16-bit type.
__device__ __forceinline__ void widenE4m3x4Trans(unsigned a, unsigned b, unsigned (&even)[2], unsigned (&odd)[2]) {
  unsigned t[2];
  widenE4m3x4(__byte_perm(a, 0u, 0x3120), t);  // bytes 0, 2 (column 2g) low, 1, 3 (column 2g + 1) high
  even[0] = t[0];
  odd[0] = t[1];
  widenE4m3x4(__byte_perm(b, 0u, 0x3120), t);
  even[1] = t[0];
  odd[1] = t[1];
}
__device__ __forceinline__ uint2 loadShared8(unsigned address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(address));
  return v;
}
} // namespace sm80
)cuda";
  return text;
}

std::string TileTargetSm80::e4m3WidenPrelude() const {
  const bool bf16 = shape.dtype == "bf16";
  std::string text = R"cuda(
// ==== e4m3 K/V (an e4m3 KV cache, tile.kv_dtype): widening 8-bit values to the kernel's 16-bit type ====
namespace sm80 {
// Two e4m3 values (the low and high byte of x) to f16x2, exactly (every e4m3 value is an f16 value). sm_89 and
// later convert in one instruction; sm_80 in integer and f16 arithmetic: each byte s.eeee.mmm moves to an f16's
// sign, exponent and mantissa bits (s.0eeee.mmm0000000), which reads as 2^-8 times the e4m3 value, subnormals
// included (an e4m3 subnormal 0.mmm x 2^-6 is the f16 subnormal 0.mmm x 2^-14), then an exact multiply by 2^8;
// e4m3's NaN (s.1111.111) becomes an f16 NaN.
__device__ __forceinline__ unsigned e4m3x2ToF16x2(unsigned x) {
#if __CUDA_ARCH__ >= 890
  unsigned r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(static_cast<unsigned short>(x)));
  return r;
#else
  const unsigned y = __byte_perm(x, 0u, 0x1404);  // byte 0 to bits 8-15, byte 1 to bits 24-31
  const unsigned bits = ((y & 0x7f007f00u) >> 1) | (y & 0x80008000u);
  unsigned r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(bits), "r"(0x5c005c00u));  // x 2^8 (f16 2^8 = 0x5c00)
  const unsigned nan = ((y & 0x7f007f00u) + 0x01000100u) & 0x80008000u;  // 0x8000 in a half whose byte is NaN
  return r | (nan - (nan >> 6));  // 0x7e00: an f16 NaN
#endif
}
)cuda";
  if (bf16) {
    text += R"cuda(// Two e4m3 values to bf16x2, exactly: through f16 (exact) and fp32 (exact), packed without rounding.
__device__ __forceinline__ unsigned widenE4m3x2(unsigned x) {
  const unsigned h = e4m3x2ToF16x2(x);
  float lo, hi;
  asm("{.reg .f16 l, u; mov.b32 {l, u}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, u;}" : "=f"(lo), "=f"(hi) : "r"(h));
  return packBf16x2(lo, hi);
}
)cuda";
  } else {
    text += R"cuda(// Two e4m3 values to f16x2, exactly.
__device__ __forceinline__ unsigned widenE4m3x2(unsigned x) { return e4m3x2ToF16x2(x); }
)cuda";
  }
  if (kvRegisters)
    return text + e4m3RegistersPrelude();
  text += R"cuda(// 16 e4m3 values (16 bytes, in order) to 16 16-bit values (two 16-byte chunks, in order).
__device__ __forceinline__ void widenE4m3x16(uint4 x, uint4 (&out)[2]) {
  const unsigned in[4] = {x.x, x.y, x.z, x.w};
  unsigned wide[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    wide[2 * i] = widenE4m3x2(in[i] & 0xffffu);
    wide[2 * i + 1] = widenE4m3x2(in[i] >> 16);
  }
  out[0] = make_uint4(wide[0], wide[1], wide[2], wide[3]);
  out[1] = make_uint4(wide[4], wide[5], wide[6], wide[7]);
}
__device__ __forceinline__ uint4 loadShared16(unsigned address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(address));
  return v;
}
__device__ __forceinline__ void storeShared16(unsigned address, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(address), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
} // namespace sm80
)cuda";
  return text;
}

void TileTargetSm80::copyRoutine(CudaWriter &w, Operand operand, int elementBytes) {
  OperandNames n = names(operand);
  // Elements a 16-byte chunk holds: 8 of 16 bits, 16 of an e4m3 cache's bytes.
  const int perChunk = 16 / elementBytes;
  const char *element = elementBytes == 1 ? "unsigned char" : "unsigned short";
  int rows = operand == Operand::Q ? shape.blockM : shape.blockN;
  int width = operand == Operand::V ? shape.headDimV : shape.headDim;
  int chunks = rows * width / perChunk, threads = shape.warps * kWarpSize;
  bool even = chunks % threads == 0;
  std::string chunkCount = cat(n.rows, " * ", n.width, " / ", perChunk);
  bool isQ = operand == Operand::Q;
  w.open(cat("auto ", n.copy, " = [&](", isQ ? "" : "int tile", ")"));
  int chunksPerRow = width / perChunk;
  if (!isQ && even && threads % chunksPerRow == 0) {
    // Each thread keeps one column and steps down kThreads / chunks-per-row rows at a time: one source pointer
    // advanced by a fixed stride, rather than a 64-bit row offset per chunk that the compiler would precompute
    // and keep live across the K/V loop (at two m16 tiles per warp those registers spilled).
    std::string perRow = cat("(", n.width, " / ", perChunk, ")");
    w.line(cat("const int row0 = threadIdx.x / ", perRow, ", col = threadIdx.x % ", perRow, ";"));
    w.line(cat("const int seqRow0 = ", isQ ? "m0" : cat("tile * ", n.rows), " + row0;"));
    if (!isQ && shape.kvCache)
      pagedTileCopy(w, operand, perRow, elementBytes);
    w.line(cat("const ", element, " *src = ", n.global, " + seqRow0 * ", n.rowStride, " + col * ", perChunk, ";"));
    w.line(cat("const long long step = (kThreads / ", perRow, ") * ", n.rowStride, ";"));
    w.openUnrolledFor("i", cat(chunkCount, " / kThreads"));
    w.line(cat("const int row = row0 + i * (kThreads / ", perRow, ");"));
    w.line(cat("const bool inside = seqRow0 + i * (kThreads / ", perRow, ") < ", n.seqlen, ";"));
    w.line(cat("sm80::cpAsync16(", bufferAddress(operand, "tile"), " + sm80::swizzle<", n.width, " / ", perChunk,
               ">(row, col), inside ? src : ", n.global, ", inside);"));
    w.line("src += step;");
    w.close();
    w.close(";");
    return;
  }
  assert(elementBytes == 2 && "8-bit tiles are copied here only where every thread keeps one column");
  w.openUnrolledFor("i", even ? cat(chunkCount, " / kThreads") : cat("(", chunkCount, " + kThreads - 1) / kThreads"));
  w.line("const int chunk = threadIdx.x + i * kThreads;");
  if (!even)
    w.open(cat("if (chunk < ", chunkCount, ")"));
  w.line(cat("const int row = chunk / (", n.width, " / 8), col = chunk % (", n.width, " / 8);"));
  w.line(cat("const int seqRow = ", isQ ? "m0" : cat("tile * ", n.rows), " + row;"));
  if (isQ && shape.packQueryHeads) {
    w.line("const bool inside = seqRow < packedRows;");
    w.line("const int qi = inside ? seqRow / headsPerKv : 0;");
    w.line("const int qh = hKv * headsPerKv + (inside ? seqRow % headsPerKv : 0);");
    w.line(cat("sm80::cpAsync16(sm80::smemAddress(sQ) + sm80::swizzle<", n.width, " / 8>(row, col),"));
    w.line(cat("                ", n.global, " + qi * ", n.rowStride, " + qh * p.qHeadStride + col * 8, inside);"));
  } else {
    if (!isQ && shape.kvCache) {
      w.open("if (p.kvCache == 2)");
      pagedCopy(w, operand, "seqRow",
                cat(bufferAddress(operand, "tile"), " + sm80::swizzle<", n.width, " / 8>(row, col)"), "col");
      w.close();
      w.open("else");
    }
    w.line(cat("const bool inside = seqRow < ", n.seqlen, ";"));
    w.line(cat("sm80::cpAsync16(", isQ ? std::string("sm80::smemAddress(sQ)") : bufferAddress(operand, "tile"),
               " + sm80::swizzle<", n.width, " / 8>(row, col),"));
    w.line(cat("                ", n.global, " + (inside ? seqRow : 0) * ", n.rowStride, " + col * 8, inside);"));
    if (!isQ && shape.kvCache)
      w.close();
  }
  if (!even)
    w.close();
  w.close();
  w.close(";");
}

void TileTargetSm80::pagedCopy(CudaWriter &w, Operand operand, const std::string &key, const std::string &dst,
                               const std::string &col) {
  OperandNames n = names(operand);
  const char *pageStride = operand == Operand::K ? "p.kCacheBatchStride" : "p.vCacheBatchStride";
  w.comment(
      "paged cache: key row `key` is row key % pageSize of page blockTable[key / pageSize] (clamped to the pool)");
  w.line(cat("const int key = ", key, ";"));
  w.line(cat("const bool inside = key < ", n.seqlen, ";"));
  w.line("const int page = inside ? min(max(p.blockTable[key >> p.pageShift], 0), p.cacheBatches - 1) : 0;");
  w.line("const int pageMask = (1 << p.pageShift) - 1;");
  w.line(cat("sm80::cpAsync16(", dst, ","));
  w.line(cat("                ", n.global, " + page * ", pageStride, " + (inside ? key & pageMask : 0) * ", n.rowStride,
             " + ", col, " * 8, inside);"));
}

void TileTargetSm80::pagedTileCopy(CudaWriter &w, Operand operand, const std::string &perRow, int elementBytes) {
  OperandNames n = names(operand);
  const int perChunk = 16 / elementBytes;
  const char *element = elementBytes == 1 ? "unsigned char" : "unsigned short";
  const char *pageStride = operand == Operand::K ? "p.kCacheBatchStride" : "p.vCacheBatchStride";
  w.open("if (p.kvCache == 2)");
  w.comment("paged cache: key row `key` is row key % pageSize of page blockTable[key / pageSize] (clamped to the");
  w.comment("pool). This thread's rows are kRowStep apart, so consecutive ones share a page until one lands on a page");
  w.comment("start: only there (and at its first row) does it read the block table; in between it steps its pointer");
  w.comment("as in a contiguous cache. The body is unrolled once per page size (16 to 256 keys, powers of two, as are");
  w.comment("kBlockN and kRowStep; tiles start at multiples of kBlockN): row i starts a page when i * kRowStep is a");
  w.comment("multiple of it, known at compile time, so the copies issue back to back with no per-row branch.");
  w.line(cat("constexpr int kRowStep = kThreads / ", perRow, ", kCopies = ", n.rows, " * ", n.width, " / ", perChunk,
             " / kThreads;"));
  w.open("auto copyPages = [&](auto pageShift)");
  w.line("constexpr int kPageShift = decltype(pageShift)::value, kPageMask = (1 << kPageShift) - 1;");
  w.line(cat("const long long step = kRowStep * ", n.rowStride, ";"));
  w.line(cat("const ", element, " *src = ", n.global, ";"));
  w.openUnrolledFor("i", "kCopies");
  w.line("const int row = row0 + i * kRowStep, key = seqRow0 + i * kRowStep;");
  w.line(cat("const bool inside = key < ", n.seqlen, ";"));
  w.comment("keys grow with i: past the sequence here, past it for the rest of the tile (src is then unused)");
  w.open("if (i * kRowStep % (1 << kPageShift) == 0)");
  w.line("const int page = inside ? min(max(p.blockTable[key >> kPageShift], 0), p.cacheBatches - 1) : 0;");
  w.line(cat("src = ", n.global, " + page * ", pageStride, " + (inside ? key & kPageMask : 0) * ", n.rowStride,
             " + col * ", perChunk, ";"));
  w.close();
  w.line(cat("sm80::cpAsync16(", bufferAddress(operand, "tile"), " + sm80::swizzle<", n.width, " / ", perChunk,
             ">(row, col), inside ? src : ", n.global, ", inside);"));
  w.line("src += step;");
  w.close();
  w.close(";");
  w.comment("the host accepts pages of 16 to 256 keys (KvCache.h): shifts 4 to 8");
  w.open("switch (p.pageShift)");
  for (int shift = 4; shift <= 8; ++shift)
    w.line(cat("case ", shift, ": copyPages(sm80::PageShift<", shift, ">{}); break;"));
  w.line("default: break;  // rejected on the host; no copy rather than one through a wrong page size");
  w.close();
  w.line("return;");
  w.close();
}

std::string TileTargetSm80::bufferAddress(Operand operand, const std::string &tile) const {
  OperandNames n = names(operand);
  std::string base = cat("sm80::smemAddress(", n.smem, ")");
  if (operand == Operand::Q || shape.stages == 1)
    return base;
  // Tile indices may be -1 where a load is predicated off (its result unused): & keeps the buffer in range.
  return cat("(", base, " + (", tile, " & (kStages - 1)) * ", operand == Operand::K ? "kKTileBytes" : "kVTileBytes",
             ")");
}

bool TileTargetSm80::copyAsync(CudaWriter &w, Operand operand, const std::string &tile, const std::string &pred) {
  OperandNames n = names(operand);
  std::string call = cat(n.copy, "(", tile, ");");
  w.comment(cat("start copying ", n.name, operand == Operand::Q ? "" : cat(" tile ", tile), " into ", n.smem,
                operand != Operand::Q && shape.stages > 1 ? cat(" buffer ", tile, " % kStages") : "",
                pred.empty() ? "" : " (one commit group either way: group counts stay static)"));
  w.line(pred.empty() ? call : cat("if (", pred, ")"));
  if (!pred.empty())
    w.line("  " + call);
  w.line("sm80::cpAsyncCommit();");
  return true;
}

bool TileTargetSm80::wait(CudaWriter &w, const std::vector<Operand> &operands, int64_t newerCopies) {
  std::string waited;
  for (size_t i = 0; i < operands.size(); ++i)
    waited += cat(i == 0 ? "" : i + 1 == operands.size() ? " and " : ", ", names(operands[i]).name);
  std::string inFlight = newerCopies == 0
                             ? ""
                             : cat(" (", newerCopies, newerCopies == 1 ? " newer copy group" : " newer copy groups",
                                   " may stay in flight)");
  bool onlyQ = operands.size() == 1 && operands.front() == Operand::Q;
  if (shape.stages > 1 && newerCopies == 0 && !onlyQ)
    w.comment("wait for every copy in flight (cp.async groups land in order: this K/V tile and the ones before it);");
  w.comment(cat("wait for ", waited, inFlight, "; the barrier makes it visible to all warps and means they are all"));
  w.comment("done with the buffers the next copies overwrite");
  w.line(cat("sm80::cpAsyncWait<", newerCopies, ">();"));
  w.line("__syncthreads();");
  return true;
}

void TileTargetSm80::load(CudaWriter &w, Operand operand, const std::string &tile) {
  // kv-convert 1 (kvRegisters): K and V stay e4m3 in shared memory, ldmatrix reads their bytes into fragments that are
  // converted in registers, and Q's fragments follow the 8-bit K fragments' column order. Otherwise an e4m3 K or V
  // tile is widened into its 16-bit buffer here.
  if (kvE4m3 && !kvRegisters && operand != Operand::Q)
    widenE4m3(w, operand, tile);
  const std::string buffer = shape.stages > 1 ? cat(" buffer ", tile, " % kStages") : "";
  const char *eightBit = kvRegisters ? " as e4m3: ldmatrix" : ": ldmatrix";
  const char *fragments = kvRegisters ? " reads its 8-bit B fragments inside " : " reads its B fragments inside ";
  switch (operand) {
  case Operand::Q:
    if (!qInRegisters) {
      w.comment(kvRegisters ? "Q stays in sQ: its A fragments (in the 8-bit K fragments' column order) are read at every "
                              "k-step"
                            : "Q stays in sQ: its A fragments are read with ldmatrix.x4 at every k-step of S = Q·Kᵀ");
      return;
    }
    if (kvRegisters) {
      w.comment("Q as mma A fragments, kept in registers for the whole K/V walk, in the column order of the 8-bit K");
      w.comment("fragments (sm80::loadQPermuted)");
    } else {
      w.comment("Q as mma A fragments: ldmatrix.x4 from sQ, kept in registers for the whole K/V walk");
    }
    w.line("unsigned qFrag[kMTiles][kHeadDim / 16][4];");
    w.openUnrolledFor("mt", "kMTiles");
    w.openUnrolledFor("ks", "kHeadDim / 16");
    if (kvRegisters)
      loadQPermuted(w, "qFrag[mt][ks]");
    else
      w.line("sm80::ldmatrixX4(qFrag[mt][ks], sm80::smemAddress(sQ) + ldRowQ + mt * 16 * kRowBytesQK + (ldChunkQ ^ "
             "(32 * ks)));");
    w.close();
    w.close();
    if (f16Mma)
      scaleQToF16(w);
    return;
  case Operand::K:
    w.comment(cat("K tile ", tile, " is in sK", buffer, eightBit, ".x4", fragments, "S = Q·Kᵀ"));
    return;
  case Operand::V:
    w.comment(cat("V tile ", tile, " is in sV", buffer, eightBit, ".x4.trans", fragments, "P·V"));
    return;
  }
}

bool TileTargetSm80::rotateQ(CudaWriter &w, bool interleaved, bool perRow) {
  w.comment("---- rotary embedding of Q in sQ (tile.rotary; flash_attn_with_kvcache's rotary_cos/rotary_sin), before");
  w.comment(std::string("any read of it: pair i of the first rotaryDim columns, ") +
            (interleaved ? "(2i, 2i + 1)" : "(i, i + rotaryDim / 2)") + ", of query row q at position " +
            (perRow ? "cached + q" : "cached"));
  w.comment(
      "(cached = the keys before this call's new ones: cacheSeqlens[b]), clamped to the tables' rows; one pair a");
  w.comment("thread at a time, so no pair is read after another thread wrote it ----");
  w.open("");
  w.line("const int half = min(p.rotaryDim, kHeadDim) / 2, cached = p.seqlenK - p.seqlenNew;");
  w.line("const unsigned short *const cosTable = static_cast<const unsigned short *>(p.rotaryCos);");
  w.line("const unsigned short *const sinTable = static_cast<const unsigned short *>(p.rotarySin);");
  w.open("for (int t = threadIdx.x; t < kBlockM * half; t += kThreads)");
  w.line("const int row = t / half, i = t % half;");
  if (shape.packQueryHeads) {
    w.line("if (m0 + row >= packedRows)");
    w.line("  break;  // rows past the sequence (zero-filled) are never stored: rows only grow with t");
  } else {
    w.line("if (m0 + row >= p.seqlenQ)");
    w.line("  break;  // rows past the sequence (zero-filled) are never stored: rows only grow with t");
  }
  if (perRow)
    w.line(cat("const int pos = min(max(cached + ", shape.packQueryHeads ? "(m0 + row) / headsPerKv" : "m0 + row",
               ", 0), p.seqlenRo - 1);  // the row's query row"));
  else
    w.line("const int pos = min(max(cached, 0), p.seqlenRo - 1);  // every row at the first position");
  w.line(interleaved ? "const int c0 = 2 * i, c1 = 2 * i + 1;" : "const int c0 = i, c1 = i + half;");
  w.line("unsigned short *const x0 = reinterpret_cast<unsigned short *>(sQ + sm80::swizzle<kHeadDim / 8>(row, c0 / "
         "8)) + c0 % 8;");
  w.line("unsigned short *const x1 = reinterpret_cast<unsigned short *>(sQ + sm80::swizzle<kHeadDim / 8>(row, c1 / "
         "8)) + c1 % 8;");
  w.line("const unsigned short v0 = *x0, v1 = *x1, cr = cosTable[pos * half + i], sr = sinTable[pos * half + i];");
  w.line("*x0 = rotaryOut(v0, v1, cr, sr, true);");
  w.line("*x1 = rotaryOut(v0, v1, cr, sr, false);");
  w.close();
  w.close();
  w.line("__syncthreads();  // rotated Q visible to every warp");
  return true;
}

bool TileTargetSm80::stateLoad(CudaWriter &w, const StateNames &st) {
  if (shape.packQueryHeads)
    return false; // the workspace is indexed by LSE row, one head a block
  initState(w, st);
  w.comment("---- K/V step p.kvStep > 0: the state of this thread's rows as the previous step stored it (fp32, at LSE");
  w.comment("row r = (b, h, q) as p.lse is indexed): m in every lane of the row's quad, the row's l in its first lane");
  w.comment("(finalize sums the quad's partial sums), acc in the fragments' own columns ----");
  w.open("if (p.kvStep > 0)");
  w.line("const long long lseRow = (p.lse - params.lse) + b * p.lseBatchStride + h * p.lseHeadStride;");
  forEachRow(w, [&] {
    w.line(cat("const int q = ", threadRow(), ";"));
    w.open("if (q < p.seqlenQ)");
    w.line(cat(st.rowMax, "[mt][r] = p.stateMax[lseRow + q];"));
    w.line(cat(st.rowSum, "[mt][r] = lane % 4 == 0 ? p.stateSum[lseRow + q] : 0.f;"));
    w.openUnrolledFor("nt", "kOTiles");
    w.line("const float2 c = *reinterpret_cast<const float2 *>(p.stateAcc + (lseRow + q) * kHeadDimV + 8 * nt + "
           "fragCol);");
    w.line(cat(st.acc, "[mt][nt][2 * r] = c.x;"));
    w.line(cat(st.acc, "[mt][nt][2 * r + 1] = c.y;"));
    w.close();
    w.close();
  });
  w.close();
  return true;
}

bool TileTargetSm80::stateStore(CudaWriter &w, const StateNames &st) {
  if (shape.packQueryHeads)
    return false;
  w.comment(
      "---- state_store: this thread's rows of the state (rows < seqlen_q) to the workspace for the next K/V step:");
  w.comment(
      "m and the quad's sum of l by the quad's first lane, acc from the fragments; the registers stay the state ----");
  w.open("");
  w.line("const long long lseRow = (p.lse - params.lse) + b * p.lseBatchStride + h * p.lseHeadStride;");
  forEachRow(w, [&] {
    w.line(cat("const float l = sm80::quadSum(", st.rowSum, "[mt][r]);  // every lane of the quad takes part in the shuffles"));
    w.line(cat("const int q = ", threadRow(), ";"));
    w.open("if (q < p.seqlenQ)");
    w.open("if (lane % 4 == 0)");
    w.line(cat("p.stateMax[lseRow + q] = ", st.rowMax, "[mt][r];"));
    w.line("p.stateSum[lseRow + q] = l;");
    w.close();
    w.openUnrolledFor("nt", "kOTiles");
    w.line("*reinterpret_cast<float2 *>(p.stateAcc + (lseRow + q) * kHeadDimV + 8 * nt + fragCol) =");
    w.line(cat("    make_float2(", st.acc, "[mt][nt][2 * r], ", st.acc, "[mt][nt][2 * r + 1]);"));
    w.close();
    w.close();
  });
  w.close();
  return true;
}

void TileTargetSm80::qk(CudaWriter &w, const std::string &kTile, const std::string &scores) {
  if (kvRegisters)
    return qkRegisters(w, kTile, scores);
  w.comment(cat(scores, " = Q·Kᵀ for K tile ", kTile, " (mma.sync m16n8k16, fp32): K rows are the n dimension, so"));
  w.comment("ldmatrix.x4 of sK (no transpose) gives the B fragments of two n8 tiles");
  w.line(cat("float ", scores, "[kMTiles][kSTiles][4] = {};"));
  w.openUnrolledFor("ks", "kHeadDim / 16");
  std::string qOperand = "qFrag[mt][ks]";
  if (!qInRegisters) {
    qOperand = "qFrag[mt]";
    w.line("unsigned qFrag[kMTiles][4];");
    w.openUnrolledFor("mt", "kMTiles");
    w.line("sm80::ldmatrixX4(qFrag[mt], sm80::smemAddress(sQ) + ldRowQ + mt * 16 * kRowBytesQK + (ldChunkQ ^ (32 * "
           "ks)));");
    w.close();
  }
  w.openUnrolledFor("np", "kBlockN / 16");
  w.line("unsigned kFrag[4];");
  w.line(cat("sm80::ldmatrixX4(kFrag, ", bufferAddress(Operand::K, kTile),
             " + ldRowK + np * 16 * kRowBytesQK + (ldChunkK ^ (32 * ks)));"));
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat(mma, "(", scores, "[mt][2 * np], ", qOperand, ", kFrag[0], kFrag[1]);"));
  w.line(cat(mma, "(", scores, "[mt][2 * np + 1], ", qOperand, ", kFrag[2], kFrag[3]);"));
  w.close();
  w.close();
  w.close();
}

void TileTargetSm80::pv(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vTile) {
  if (kvRegisters)
    return pvRegisters(w, st, p, vTile);
  w.comment("acc += P·V (mma.sync m16n8k16, fp32): ldmatrix.x4.trans of sV gives the B fragments of two n8 tiles");
  w.openUnrolledFor("k", "kBlockN / 16");
  w.openUnrolledFor("np", "kHeadDimV / 16");
  w.line("unsigned vFrag[4];");
  w.line(cat("sm80::ldmatrixX4Trans(vFrag, ", bufferAddress(Operand::V, vTile),
             " + ldRowV + k * 16 * kRowBytesV + (ldChunkV ^ (32 * np)));"));
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat(mma, "(", st.acc, "[mt][2 * np], ", p, "[mt][k], vFrag[0], vFrag[1]);"));
  w.line(cat(mma, "(", st.acc, "[mt][2 * np + 1], ", p, "[mt][k], vFrag[2], vFrag[3]);"));
  w.close();
  w.close();
  if (shape.headDimV % 16 != 0) {
    w.comment("the last n8 tile of V (head_dim_v is an odd multiple of 8): ldmatrix.x2.trans");
    w.open("");
    w.line("unsigned vFrag[2];");
    w.line(cat("sm80::ldmatrixX2Trans(vFrag, ", bufferAddress(Operand::V, vTile),
               " + ldRowV + k * 16 * kRowBytesV + sm80::swizzledChunk<kHeadDimV / 8>(lane % 8, kOTiles - 1));"));
    w.openUnrolledFor("mt", "kMTiles");
    w.line(cat(mma, "(", st.acc, "[mt][kOTiles - 1], ", p, "[mt][k], vFrag[0], vFrag[1]);"));
    w.close();
    w.close();
  }
  w.close();
}

void TileTargetSm80::storeO(CudaWriter &w, const StateNames &st, bool stagedInQ) {
  if (shape.packQueryHeads) {
    w.comment(cat("store O: convert to ", shape.dtype, ", two adjacent columns (4 bytes) per store, each row to its"));
    w.comment("own query row and head (GQA packing), rows < packedRows");
    w.line("unsigned short *const gO = static_cast<unsigned short *>(p.o) + b * p.oBatchStride;");
    forEachRow(w, [&] {
      w.open(cat("if (", threadRow(), " < packedRows)"));
      w.line("unsigned short *const dst = gO + rowQuery[mt][r] * p.oRowStride + rowHead[mt][r] * p.oHeadStride;");
      w.openUnrolledFor("nt", "kOTiles");
      w.line(cat("*reinterpret_cast<unsigned *>(dst + 8 * nt + fragCol) = ", fragments.packedPair(st), ";"));
      w.close();
      w.close();
    });
    return;
  }
  if (!stagedInQ) {
    fragments.storeODirect(w, st);
    return;
  }
  w.comment(cat("store O: convert to ", shape.dtype, " and stage this warp's rows in its own rows of sQ (swizzled),"));
  w.comment("then write rows < seqlen_q with 16-byte stores. Each warp only ever read its own Q rows, so the warp");
  w.comment("needs no block-wide barrier.");
  w.line(cat("unsigned short *const gO = static_cast<unsigned short *>(p.o) + b * p.oBatchStride + h * "
             "p.oHeadStride;"));
  w.line("unsigned char *const sO = sQ + warp * kWarpRows * kRowBytesQK;");
  w.line("__syncwarp();  // every lane is done reading these Q rows");
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("nt", "kOTiles");
  w.openUnrolledFor("r", "2");
  w.line("const int row = 16 * mt + fragRow + 8 * r;");
  w.line(cat("*reinterpret_cast<unsigned *>(sO + sm80::swizzle<kHeadDimV / 8>(row, nt) + 2 * fragCol) = ",
             fragments.packedPair(st), ";"));
  w.close();
  w.close();
  w.close();
  w.line("__syncwarp();");
  bool even = shape.warpRows * shape.headDimV / kChunkElements % kWarpSize == 0;
  std::string chunkCount = "kWarpRows * kHeadDimV / 8";
  w.openUnrolledFor("i", even ? chunkCount + " / 32" : "(" + chunkCount + " + 31) / 32");
  w.line("const int chunk = lane + 32 * i;");
  if (!even)
    w.open("if (chunk < " + chunkCount + ")");
  w.line("const int row = chunk / (kHeadDimV / 8), col = chunk % (kHeadDimV / 8);");
  w.line("const int q = warpRow0 + row;");
  w.line("if (q < p.seqlenQ)");
  w.line("  *reinterpret_cast<uint4 *>(gO + q * p.oRowStride + 8 * col) =");
  w.line("      *reinterpret_cast<const uint4 *>(sO + sm80::swizzle<kHeadDimV / 8>(row, col));");
  if (!even)
    w.close();
  w.close();
}

bool TileTargetSm80::storeSplit(CudaWriter &w, const StateNames &st, const std::string &sinkFn, bool stagedInQ) {
  w.comment("---- store_split: one split (p.numSplits == 1) stores O and LSE itself; more store fp32 partials ----");
  w.open("if (p.numSplits == 1)");
  if (!sinkFn.empty()) {
    w.comment(
        cat("the attention sink s = ", sinkFn, "(b, h) joins once: LSE' = ln(e^LSE + e^s), O' = O·e^(LSE - LSE')"));
    w.comment("(log2 domain; a row with neither a key nor a finite sink keeps O = 0, LSE = -inf)");
    if (!shape.packQueryHeads)
      w.line(cat("const float sinkLog2 = ", sinkFn, "(b, h, p) * sm80::kLog2e;"));
    forEachRow(w, [&] {
      if (shape.packQueryHeads)
        w.line(cat("const float sinkLog2 = ", sinkFn, "(b, rowHead[mt][r], p) * sm80::kLog2e;  // this row's head"));
      w.line("const float lseLog2 = lse[mt][r] * sm80::kLog2e;");
      w.line("const float maxLog2 = fmaxf(lseLog2, sinkLog2);");
      w.line("const float maxUsed = maxLog2 == sm80::kNegInf ? 0.f : maxLog2;");
      w.line("const float keep = sm80::exp2(lseLog2 - maxUsed), sum = keep + sm80::exp2(sinkLog2 - maxUsed);");
      w.line("const float invSum = sum == 0.f ? 0.f : 1.f / sum;");
      w.line("lse[mt][r] = sum == 0.f ? sm80::kNegInf : (maxUsed + log2f(sum)) * sm80::kLn2;");
      w.openUnrolledFor("nt", "kOTiles");
      w.line(cat(st.acc, "[mt][nt][2 * r] *= keep * invSum;"));
      w.line(cat(st.acc, "[mt][nt][2 * r + 1] *= keep * invSum;"));
      w.close();
    });
  }
  storeO(w, st, stagedInQ);
  storeLse(w);
  w.close();
  w.open("else");
  w.line("sm80::launchDependents();  // the combine kernel may launch now; it waits for this grid's partials");
  w.comment("split `split` of LSE row r = (b, h, q) (as p.lse is indexed; varlen rows included): O at");
  w.comment("oAccum[(split * accumSplitStride + r) * kHeadDimV + d], LSE at lseAccum[split * accumSplitStride + r]");
  if (shape.packQueryHeads) {
    w.comment("GQA packing: each row's LSE row is that of its own query row and head");
    w.line("const long long lseRow = (p.lse - params.lse) + b * p.lseBatchStride;");
  } else {
    w.line("const long long lseRow = (p.lse - params.lse) + b * p.lseBatchStride + h * p.lseHeadStride;");
  }
  w.line("float *const gOAccum = p.oAccum + (split * p.accumSplitStride + lseRow) * kHeadDimV;");
  w.line("float *const gLseAccum = p.lseAccum + split * p.accumSplitStride + lseRow;");
  forEachRow(w, [&] {
    if (shape.packQueryHeads) {
      w.line("const long long q = rowHead[mt][r] * p.lseHeadStride + rowQuery[mt][r];  // its LSE row, from lseRow");
      w.open(cat("if (", threadRow(), " < packedRows)"));
    } else {
      w.line(cat("const int q = ", threadRow(), ";"));
      w.open("if (q < p.seqlenQ)");
    }
    w.openUnrolledFor("nt", "kOTiles");
    w.line("*reinterpret_cast<float2 *>(gOAccum + q * (long long)kHeadDimV + 8 * nt + fragCol) =");
    w.line(cat("    make_float2(", st.acc, "[mt][nt][2 * r], ", st.acc, "[mt][nt][2 * r + 1]);"));
    w.close();
    w.line("if (lane % 4 == 0)");
    w.line("  gLseAccum[q] = lse[mt][r];");
    w.close();
  });
  w.close();
  return true;
}

bool TileTargetSm80::combineRow(CudaWriter &w, const std::string &sinkFn) {
  // Latency, not bandwidth, is the combine's cost (a row's partials are a few KiB): every load a lane makes is
  // issued in as few dependent rounds as possible — the LSEs in one, the partial O rows eight splits at a time.
  const int headDimV = static_cast<int>(shape.headDimV);
  const int vec = headDimV % 128 == 0 ? 4 : 2; // fp32 columns a lane loads at once (float4 / float2)
  const int chunks = (headDimV + 32 * vec - 1) / (32 * vec);
  w.line("const long long lseRow = (p.lse - params.lse) + b * p.lseBatchStride + h * p.lseHeadStride + q;");
  w.line(cat("const int splits = p.numSplits;  // 2..", kMaxSplits, " (the runtime checks numSplits)"));
  w.line("const float *const gLseAccum = p.lseAccum + lseRow;");
  w.line("const float *const gOAccum = p.oAccum + lseRow * kHeadDimV;");
  w.line("sm80::gridDependencyWait();  // launched early (programmatic dependent launch): the partials are complete");
  w.line(cat("constexpr int kSplitsPerLane = ", kMaxSplits / 32, ";  // lane l holds splits l, l + 32, ..."));
  w.comment("every split's LSE in registers, log2 domain (an absent split: -inf)");
  w.line("float weight[kSplitsPerLane];");
  w.openUnrolledFor("i", "kSplitsPerLane");
  w.line("const int s = lane + 32 * i;");
  w.line("weight[i] = s < splits ? gLseAccum[s * p.accumSplitStride] * sm80::kLog2e : sm80::kNegInf;");
  w.close();
  w.comment(cat("the row's largest LSE over its splits", sinkFn.empty() ? "" : " and the sink", ", over the warp"));
  if (!sinkFn.empty())
    w.line(cat("const float sinkLog2 = ", sinkFn, "(b, h, p) * sm80::kLog2e;"));
  w.line(sinkFn.empty() ? "float maxLog2 = sm80::kNegInf;" : "float maxLog2 = sinkLog2;");
  w.openUnrolledFor("i", "kSplitsPerLane");
  w.line("maxLog2 = fmaxf(maxLog2, weight[i]);");
  w.close();
  w.openUnrolledFor("off", "5");
  w.line("maxLog2 = fmaxf(maxLog2, __shfl_xor_sync(0xffffffffu, maxLog2, 16 >> off));");
  w.close();
  w.comment("an empty split (LSE -inf) weighs 0; a row no split saw has sum 0: O = 0, LSE = -inf");
  w.line("const float maxUsed = maxLog2 == sm80::kNegInf ? 0.f : maxLog2;");
  w.line(sinkFn.empty() ? "float sum = 0.f;" : "float sum = lane == 0 ? sm80::exp2(sinkLog2 - maxUsed) : 0.f;");
  w.openUnrolledFor("i", "kSplitsPerLane");
  w.line("weight[i] = sm80::exp2(weight[i] - maxUsed);");
  w.line("sum += weight[i];");
  w.close();
  w.openUnrolledFor("off", "5");
  w.line("sum += __shfl_xor_sync(0xffffffffu, sum, 16 >> off);");
  w.close();
  w.line("const float invSum = sum == 0.f ? 0.f : 1.f / sum;");
  w.comment(cat("O = sum_s weight_s O_s, weight_s = e^(LSE_s - LSE): warp w sums splits w, w + kWarps, ...; lane l ",
                "columns [", vec, "l, ", vec, "l + ", vec, ") of every chunk of ", 32 * vec,
                " columns; weight_s comes from lane s mod 32"));
  w.line(cat("constexpr int kVec = ", vec, ", kChunks = ", chunks, ";"));
  w.line("float o[kChunks][kVec] = {};");
  w.openUnrolledFor("i", "kSplitsPerLane");
  w.line("if (32 * i >= splits)");
  w.line("  break;  // uniform over the block");
  w.line("const float scaled = weight[i] * invSum;");
  w.comment("all of a warp's loads of these 32 splits issue before the first is used");
  w.openUnrolledFor("t", "32 / kWarps");
  w.line("const int s = 32 * i + warp + kWarps * t;");
  w.line("const float wt = __shfl_sync(0xffffffffu, scaled, warp + kWarps * t);");
  w.line("if (s >= splits)");
  w.line("  continue;");
  w.line("const float *const part = gOAccum + s * p.accumSplitStride * kHeadDimV;");
  w.openUnrolledFor("c", "kChunks");
  w.line("const int col = (32 * c + lane) * kVec;");
  w.open("if (col < kHeadDimV)");
  if (vec == 4) {
    w.line("const float4 x = *reinterpret_cast<const float4 *>(part + col);");
    w.line("o[c][0] = fmaf(wt, x.x, o[c][0]);");
    w.line("o[c][1] = fmaf(wt, x.y, o[c][1]);");
    w.line("o[c][2] = fmaf(wt, x.z, o[c][2]);");
    w.line("o[c][3] = fmaf(wt, x.w, o[c][3]);");
  } else {
    w.line("const float2 x = *reinterpret_cast<const float2 *>(part + col);");
    w.line("o[c][0] = fmaf(wt, x.x, o[c][0]);");
    w.line("o[c][1] = fmaf(wt, x.y, o[c][1]);");
  }
  w.close();
  w.close();
  w.close();
  w.close();
  w.comment("the warps' sums added in shared memory, then converted to " + shape.dtype +
            ", two adjacent columns a 32-bit store");
  w.line("__shared__ float sO[kWarps][kHeadDimV];");
  w.openUnrolledFor("c", "kChunks");
  w.line("const int col = (32 * c + lane) * kVec;");
  w.open("if (col < kHeadDimV)");
  w.openUnrolledFor("k", "kVec");
  w.line("sO[warp][col + k] = o[c][k];");
  w.close();
  w.close();
  w.close();
  w.line("__syncthreads();");
  w.line("unsigned short *const gO = static_cast<unsigned short *>(p.o) + b * p.oBatchStride + h * p.oHeadStride + "
         "q * p.oRowStride;");
  w.open("for (int col = 2 * threadIdx.x; col < kHeadDimV; col += 64 * kWarps)");
  w.line("float o0 = 0.f, o1 = 0.f;");
  w.openUnrolledFor("v", "kWarps");
  w.line("o0 += sO[v][col];");
  w.line("o1 += sO[v][col + 1];");
  w.close();
  w.line(cat("*reinterpret_cast<unsigned *>(gO + col) = ", pack, "(o0, o1);"));
  w.close();
  w.line("if (threadIdx.x == 0)");
  w.line("  p.lse[b * p.lseBatchStride + h * p.lseHeadStride + q] = sum == 0.f ? sm80::kNegInf : "
         "(maxUsed + log2f(sum)) * sm80::kLn2;");
  return true;
}

class FamilySm80 final : public TargetFamily {
public:
  std::string_view name() const override { return "sm80"; }
  std::string_view summary() const override { return "mma.sync.m16n8k16, ldmatrix, cp.async (sm_80 and later)"; }
  const std::vector<ArchLimits> &archs() const override {
    // Per-block opt-in dynamic shared memory; the 8.x GPUs all run sm_80 cubins, the smallest limit (A100: 163
    // KB) is the one that holds for all of them that have one this large.
    static const std::vector<ArchLimits> limits = {
        {"sm_80", 163 * 1024, /*dependentLaunch=*/false},
        {"sm_90a", 227 * 1024, /*dependentLaunch=*/true},
        {"sm_100a", 227 * 1024, /*dependentLaunch=*/true}};
    return limits;
  }
  MmaShape mmaShape() const override { return {kMmaM, 8, 16}; }

  std::optional<std::string> checkShape(const KernelShape &shape) const override {
    if (shape.dtype != "bf16" && shape.dtype != "f16")
      return "sm80 MMAs take bf16 or f16 tiles, got " + shape.dtype;
    if (!shape.kvDtype.empty() && shape.kvDtype != "e4m3")
      return "sm80: K and V of kv_dtype " + shape.kvDtype + " are not read; accepted: the dtype, or e4m3";
    if (shape.kvDtype == "e4m3" && (shape.headDim % 16 != 0 || shape.headDimV % 16 != 0))
      return cat("sm80: e4m3 K and V are copied 16 values a chunk: head_dim (", shape.headDim, ") and head_dim_v (",
                 shape.headDimV, ") must be multiples of 16");
    if (shape.kvConvertRegisters && shape.kvDtype != "e4m3")
      return std::string("sm80: kv-convert 1 converts e4m3 K/V fragments; this program's K and V are 16-bit");
    if (shape.kvF16Mma && (!shape.kvConvertRegisters || shape.dtype != "bf16"))
      return std::string("sm80: kv-f16-mma runs a bf16 program's MMAs in f16 over kv-convert 1's e4m3 fragments");
    if (shape.kvF16Mma && (shape.warpRows / kMmaM) * (shape.headDim / 16) * 4 > kMaxQFragmentRegisters)
      return cat("sm80: kv-f16-mma converts Q's fragments once, in registers: head_dim (", shape.headDim, ") at ",
                 shape.warpRows, " rows a warp takes more than ", kMaxQFragmentRegisters,
                 " registers of them (Q is re-read from shared memory there)");
    if (shape.kvConvertRegisters && (shape.blockN % 32 != 0 || shape.headDimV % 32 != 0))
      return cat("sm80: kv-convert 1 reads 8-bit fragments 32 keys and 32 columns of V at a time: block-n (",
                 shape.blockN, ") and head_dim_v (", shape.headDimV, ") must be multiples of 32");
    if (shape.exp2PolyShare != 0)
      return std::string("sm80: no software exp2 here (tile.exp2_poly_share must be 0)");
    if (shape.maxChains != 1)
      return std::string("sm80: the row maxima take one chain here (tile.max_chains must be 1)");
    if (shape.laneVote)
      return std::string("sm80: the rescale vote is taken from the quad maxima here (no tile.lane_vote)");
    if (shape.latePvWait)
      return std::string("sm80: no wgmma wait to place here (no tile.late_pv_wait)");
    if (shape.warpLayout != WarpLayout::SplitQ)
      return cat("sm80: warp layout ", warpLayoutName(shape.warpLayout),
                 " is not printed; accepted: ", warpLayoutName(WarpLayout::SplitQ));
    // The register tiles are a warp's m16 tiles of its own rows, and every warp of the block holds rows (the
    // backward's key-warps: keyWarps warps share each row group's rows, a part of the keys each).
    if (shape.keyWarps < 1 || shape.warps < 1 || shape.warpRows * shape.warps != shape.blockM * shape.keyWarps)
      return cat("sm80: split_q needs every one of the ", shape.warps, " warps to own warpRows (", shape.warpRows,
                 ") rows of block-m (", shape.blockM, ")",
                 shape.keyWarps > 1 ? cat(" with ", shape.keyWarps, " warps sharing each row group") : std::string());
    if (shape.warpRows % kMmaM != 0)
      return cat("sm80: block-m (", shape.blockM, ") must give every one of the ", shape.warps, " warps a multiple of ",
                 kMmaM, " rows");
    if (shape.blockN < 16 || shape.blockN % 16 != 0)
      return cat("sm80: block-n (", shape.blockN, ") must be a positive multiple of 16");
    if (shape.stages < 1 || shape.stages > 2)
      return cat("sm80: stages (", shape.stages, ") must be 1 or 2 shared-memory buffers per K/V operand");
    if (shape.headDim % 16 != 0 || shape.headDim < 16 || shape.headDim > 256)
      return cat("sm80: head_dim (", shape.headDim, ") must be a multiple of 16 up to 256");
    if (shape.headDimV % 8 != 0 || shape.headDimV < 8 || shape.headDimV > 256)
      return cat("sm80: head_dim_v (", shape.headDimV, ") must be a multiple of 8 up to 256");
    return std::nullopt;
  }

  int64_t smemBytes(const KernelShape &shape) const override {
    // One Q tile and `stages` K and V tiles (and as many 8-bit staging tiles of each with e4m3 K/V; only the 8-bit
    // tiles, rows padded as the 16-bit ones, when their fragments are converted in registers).
    if (shape.kvDtype == "e4m3" && shape.kvConvertRegisters)
      return int64_t(shape.blockM) * rowBytes(shape.headDim) +
             int64_t(shape.stages) * shape.blockN * (rowBytes(shape.headDim / 2) + rowBytes(shape.headDimV / 2));
    return int64_t(shape.blockM) * rowBytes(shape.headDim) +
           int64_t(shape.stages) * shape.blockN * (rowBytes(shape.headDim) + rowBytes(shape.headDimV)) +
           (shape.kvDtype == "e4m3" ? int64_t(shape.stages) * shape.blockN * (shape.headDim + shape.headDimV) : 0);
  }

  std::unique_ptr<TileTarget> createPrinter(const KernelShape &shape) const override {
    assert(!checkShape(shape) && "createPrinter needs a shape checkShape accepts");
    return std::make_unique<TileTargetSm80>(shape);
  }

  std::unique_ptr<BackwardTarget> createBackwardPrinter(const KernelShape &shape) const override {
    assert(!checkShape(shape) && "createBackwardPrinter needs a shape checkShape accepts");
    return createBackwardTarget(shape);
  }
};

} // namespace

std::unique_ptr<TargetFamily> createFamily() { return std::make_unique<FamilySm80>(); }

int64_t rowBytes(int64_t width) {
  int64_t chunks = (width + kChunkElements - 1) / kChunkElements;
  return (chunks % 8 == 0 ? chunks : (chunks | 1)) * 16;
}

} // namespace flashtile::codegen::sm80
