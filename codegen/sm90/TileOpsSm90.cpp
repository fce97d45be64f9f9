//===- TileOpsSm90.cpp - tile ops as wgmma, TMA and mbarriers -------------===//
//
// Prints warp-specialized programs for sm_90a. What changes from the sm80 family is the orchestration, not the
// math:
//   roles          consecutive warpgroups in IR order; each sets its register budget (setmaxnreg) once; a role that
//                  only moves tiles (the producer) runs its region in one thread, which issues every TMA copy
//   barriers       one mbarrier per ring slot: full (the producer's arrive.expect_tx plus the copy's bytes complete a
//                  phase) and empty (one arrival per consumer warp once it is done with the slot)
//   copies         one TMA box per tile (cp.async.bulk.tensor.5d: the whole head dim of `rows` rows, swizzled over
//                  128 bytes, or 64 where the head dims are not whole 64-column blocks), the descriptors in the
//                  kernel's second parameter
//   Q·Kᵀ, P·V      wgmma m64nNk16: SS with Q and K from their slots, RS with P from registers and V from its slot
// The register tiles of a consumer warp (its 16 rows: score, prob, acc, rowMax, rowSum) are in the C-fragment layout
// with one m16 tile a warp — a wgmma accumulator is mma.sync's C fragment per warp — so the softmax, masks, score
// mods, finalize and LSE are the common register-tile math (FragmentTiles.h), as for the sm80 family.
//===----------------------------------------------------------------------===//
#include "codegen/sm90/TileOpsSm90.h"
#include "codegen/sm90/BackwardSm90.h"
#include "codegen/common/Concat.h"
#include "codegen/common/Exp2Poly.h"
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/common/TmaRing.h"
#include "codegen/sm90/InstructionsSm90.h"
#include "codegen/sm90/PreludeSm90.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace flashtile::codegen::sm90 {
namespace {

constexpr int kWarpSize = 32, kWarpgroupWarps = 4;
/// Rows of an m64 wgmma accumulator a warp of the issuing warpgroup holds: the split-Q warpRows this family prints.
constexpr int kRowsPerWarp = kWgmmaM / kWarpgroupWarps;
/// Shared memory kept past the tiles: the alignment of the first tile to the swizzle atom (the dynamic
/// shared-memory base is only 16-byte aligned) and the barriers (8 bytes each, at most 2 + 4 x 8 slots, 2 more for a
/// work queue) with the work queue's 4-byte cell.
constexpr int kSmemReserve = 2 * kSwizzleAtomBytes;
/// Named barrier of consumer warpgroup 0's GEMM turn (ping-pong); warpgroup g uses this + g. Barrier 0 is
/// __syncthreads'.
constexpr int kFirstTurnBarrier = 1;
/// Registers per thread at launch with one block of `threads` threads an SM (what ptxas fixes for
/// __launch_bounds__(threads, 1)); roles move from there with setmaxnreg.
int launchRegisters(int threads) { return std::min(kMaxRegisters - 1, kRegisterFile / threads) / 8 * 8; }

/// e4m3 programs (docs/fp8.md): Q, K and V are 8-bit, O is bf16.
bool isE4m3(const KernelShape &shape) { return shape.dtype == "e4m3"; }
/// The span of a kernel's Q and K tiles (and V's, 16-bit): from 16-bit columns for bf16 and f16, from the head dims'
/// bytes for e4m3.
int tileSwizzleBytes(const KernelShape &shape) {
  if (!isE4m3(shape))
    return swizzleBytesFor(shape.headDim, shape.headDimV);
  // One span for the three TMA maps the plan names (q, k, v: LaunchPlan::verify), V's map being unread here.
  return swizzleBytesForRow(std::gcd(shape.headDim, shape.headDimV));
}

class TileTargetSm90 final : public TileTarget {
public:
  explicit TileTargetSm90(const KernelShape &shape)
      : shape(shape), e4m3(isE4m3(shape)), swizzle(tileSwizzleBytes(shape)),
        vtSwizzle(e4m3 ? swizzleBytesForRow(shape.blockN) : 0),
        fragments({kFragmentNamespace, e4m3 ? std::string("bf16") : shape.dtype, shape.packQueryHeads}) {
    consumerWarps = shape.blockM / shape.warpRows; // the schedule's split-Q over its computing role
    bool bf16 = shape.dtype == "bf16";
    mmaType = e4m3 ? "e4m3" : bf16 ? "bf16" : "f16";
    const int widths[] = {shape.blockN, shape.headDimV};
    // e4m3 kernels print the 8-bit wgmma wrappers (WgmmaE4m3<N>) instead of the 16-bit ones.
    preludeText = e4m3 ? fragmentPrelude(kFragmentNamespace) + ::flashtile::codegen::sm90::prelude({}) +
                             preludeE4m3(widths)
                       : fragmentPrelude(kFragmentNamespace) + ::flashtile::codegen::sm90::prelude(widths);
    // The software exp2 (fa3's exp2-poly-share) only where a share asks for it: other kernels' text is unchanged.
    if (shape.exp2PolyShare > 0)
      preludeText += exp2PolyText("sm90");
  }

  std::string_view prelude() const override { return preludeText; }
  std::string_view preludeNamespace() const override { return "sm90"; }
  std::vector<std::string> reservedNames() const override {
    std::vector<std::string> names = fragments.reservedNames();
    for (const char *name : {"sm90",   "maps",   "smemRaw", "kQTileBytes", "qRow0",     "kRow0",   "tmaBatch",
                             "qAddr",  "kAddr",  "vAddr",   "slot",        "fullQ",     "fullK",   "fullV",
                             "emptyQ", "emptyK", "emptyV",  "fullWork",    "emptyWork", "workCell"})
      names.push_back(name);
    if (e4m3)
      for (const char *name : {"fp8", "descaleIndex", "qkDescale", "vDescale", "vtImage"})
        names.push_back(name);
    return names;
  }

  void setup(CudaWriter &w, const std::vector<Operand> &copied) override;
  void setupTile(CudaWriter &w) override;
  /// Copies arrive on barriers here (copyToSlot), and waits are barrier waits: no cp.async groups.
  bool copyAsync(CudaWriter &, Operand, const std::string &, const std::string &) override { return false; }
  bool wait(CudaWriter &, const std::vector<Operand> &, int64_t) override { return false; }
  void load(CudaWriter &w, Operand operand, const std::string &tile) override;
  void initState(CudaWriter &w, const StateNames &st) override { fragments.initState(w, st); }
  void qk(CudaWriter &w, const std::string &kSlot, const std::string &scores) override;
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
  /// P stays fp32 in the scores until roundProbabilities: with the intra-warpgroup overlap the P·V that reads the
  /// probabilities (the previous tile's) is still in flight during this softmax.
  void softmaxUpdate(CudaWriter &w, const StateNames &st, const std::string &s, const std::string &, bool foldScale,
                     int rescaleThreshold) override {
    fragments.softmaxUpdate(w, st, s, foldScale, rescaleThreshold, "sm90::math::exp2Poly3x2", shape.exp2PolyShare,
                            shape.maxChains, shape.laneVote);
  }
  void roundProbabilities(CudaWriter &w, const std::string &s, const std::string &p, bool carried) override {
    if (carried)
      w.comment(cat("the P·V that read ", p, " has completed: this tile's P goes there for the next iteration"));
    if (e4m3)
      packProbabilitiesE4m3(w, s, p, !carried);
    else
      fragments.packProbabilities(w, s, p, !carried);
  }
  bool declareCarriedProbabilities(CudaWriter &w, const std::string &p) override {
    w.comment("P carried from one K/V iteration to the next one's P·V (A fragments, rounded)");
    w.line(cat("unsigned ", p, "[kMTiles][kBlockN / ", kStepKeys(), "][4] = {};"));
    return true;
  }
  void rescale(CudaWriter &w, const StateNames &st, bool onlyWhenMoved) override {
    fragments.rescale(w, st, onlyWhenMoved);
  }
  void pv(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vSlot) override;
  void finalize(CudaWriter &w, const StateNames &st, const std::string &sinkFn) override {
    fragments.finalize(w, st, sinkFn);
    if (e4m3)
      fragments.scaleByVDescale(w, st);
  }
  /// O from the accumulator registers, or staged in this warp's rows of sQ (stmatrix) and written in whole rows.
  void storeO(CudaWriter &w, const StateNames &st, bool stagedInQ) override;
  void storeLse(CudaWriter &w) override { fragments.storeLse(w); }
  /// No split of the key range (split-KV) here.
  bool storeSplit(CudaWriter &, const StateNames &, const std::string &, bool) override { return false; }
  bool combineRow(CudaWriter &, const std::string &) override { return false; }

  std::string extraKernelParams() const override { return ", const __grid_constant__ sm90::TensorMaps maps"; }
  int printOperandPrepass(CudaWriter &w, const std::string &entry) override;
  bool takesTensorMaps() const override { return true; }
  int tensorMapSwizzleBytes() const override { return swizzle; }
  std::optional<RoleProblem> checkRoles(const std::vector<RoleInfo> &roles) const override;
  void setupRoles(CudaWriter &w, const std::vector<RoleInfo> &roles, const std::vector<BarrierInfo> &barriers) override;
  void openRole(CudaWriter &w, int role) override;
  void closeRole(CudaWriter &w, int role) override;
  void barrierWait(CudaWriter &w, int barrier, const std::string &position) override;
  void barrierArrive(CudaWriter &w, int barrier, const std::string &position) override;
  void copyToSlot(CudaWriter &w, Operand operand, const std::string &tile, const std::string &position,
                  int barrier) override;
  bool publishWorkUnit(CudaWriter &w, int barrier, const std::string &unit) override;
  bool receiveWorkUnit(CudaWriter &w, int barrier, const std::string &position, const std::string &unit) override;
  void mmaWait(CudaWriter &w, MmaResult result, const std::string &tile, const std::string &operand, int newerInFlight,
               bool afterUnmaskedSoftmax) override;
  void mmaTurn(CudaWriter &w, bool begin) override;

private:
  /// Keys of P·V's k step: 16 (k16, 16-bit P) or 32 (k32, e4m3 P).
  int kStepKeys() const { return e4m3 ? kWgmmaKE4m3 : kWgmmaK; }
  /// P's e4m3 A fragments from the fp32 scores, in place (the Vᵀ permutation, docs/fp8.md).
  void packProbabilitiesE4m3(CudaWriter &w, const std::string &s, const std::string &p, bool declare);
  /// The bulk copy of V tile `tile`'s Vᵀ image (the prepass's) into its slot.
  void copyVtImage(CudaWriter &w, const std::string &tile, const std::string &position, const BarrierInfo &barrier);
  /// The prelude's span template argument, as C: none for the 128-byte default (the text of kernels printed before
  /// narrower spans existed stays as it was), "<64>" otherwise.
  std::string spanArg() const { return swizzle == kSwizzleBytes ? std::string() : cat("<", swizzle, ">"); }
  /// The byte offset of k step `step` in a K-major tile of `rows` rows and span `span` (0: this kernel's), as C: what
  /// desc::kMajorStep adds to the tile's address (desc-advance adds it to a descriptor made once).
  std::string kMajorStepBytes(const std::string &step, const std::string &rows, int span = 0) const {
    const int bytes = span ? span : swizzle;
    return cat("unsigned(", step, " / sm90::Swizzle<", bytes, ">::kStepsPerBlock) * unsigned(", rows, ") * ", bytes,
               "u + unsigned(", step, " % sm90::Swizzle<", bytes, ">::kStepsPerBlock) * 32u");
  }
  /// The prelude's byte offset of (row, column) in a swizzled tile of this kernel's span, as C.
  std::string offsetFn() const {
    return swizzle == kSwizzleBytes ? std::string("sm90::swizzle128Offset") : cat("sm90::swizzleOffset<", swizzle, ">");
  }

  KernelShape shape;
  bool e4m3 = false;           ///< 8-bit Q, K, V (docs/fp8.md): k32 wgmmas, V from the prepass's Vᵀ images
  int swizzle = kSwizzleBytes; ///< the span of every tile: swizzleBytesFor(head dims)
  int vtSwizzle = 0;           ///< e4m3: the span of a Vᵀ image (rows of blockN keys)
  int consumerWarps = 0;
  FragmentTiles fragments;
  std::string mmaType, preludeText;
  std::vector<RoleInfo> roles;
  std::vector<BarrierInfo> barriers;
  std::vector<int> firstWarp; ///< per role
};

void TileTargetSm90::setup(CudaWriter &w, const std::vector<Operand> &) {
  w.comment("---- shared memory: sQ, then kStages K tiles and kStages V tiles, each a TMA box of its rows x the whole");
  if (swizzle == kSwizzleBytes) {
    w.comment("head dim in 128-byte-swizzled column blocks of 64 columns (block c of a tile of R rows at c·R·128 bytes,");
    w.comment("row r's 16-byte chunk k at r·128 + (k ^ r % 8)·16: the layout wgmma's descriptors read). Tiles start on");
    w.comment("1024-byte boundaries (the swizzle repeats every 8 rows); the dynamic base is only 16-byte aligned. ----");
  } else {
    // 64-byte span (codegen/sm90/README.md): the head dims are not whole 64-column blocks.
    w.comment(cat("head dim in ", swizzle, "-byte-swizzled column blocks of ", swizzle / 2,
                  " columns (block c of a tile of R rows at c·R·", swizzle, " bytes,"));
    w.comment(cat("row r's 16-byte chunk k at r·", swizzle, " + (k ^ r / ", kSwizzleBytes / swizzle, " % ", swizzle / 16,
                  ")·16: the layout wgmma's descriptors read). Tiles start on"));
    w.comment(cat("1024-byte boundaries (the swizzle repeats every ", 8 * swizzle,
                  " bytes); the dynamic base is only 16-byte aligned. ----"));
  }
  if (e4m3) {
    w.comment(cat("e4m3: 8-bit Q and K tiles (a ", swizzle, "-byte block row holds ", swizzle,
                  " elements); each V slot holds a Vᵀ image the prepass wrote"));
    w.comment(cat("(kHeadDimV rows of kBlockN keys in ", vtSwizzle,
                  "-byte-swizzled column blocks, keys permuted per 32-key group), copied as it is."));
  }
  printRingTiles(w, kIsa, shape.stages, e4m3 ? 1 : 2);
}

void TileTargetSm90::setupTile(CudaWriter &w) {
  printRingTileCoordinates(w);
  if (!e4m3)
    return;
  w.comment("---- FP8 descales of this (batch, K/V head) (FlashtileFp8Params; null = 1): q_descale·k_descale joins the");
  w.comment("softmax scale, so the variant's functions see the scores of the dequantized inputs, and v_descale");
  w.comment("multiplies O at finalize ----");
  w.line("const int descaleIndex = b * p.headsKv + hKv;");
  w.line("const float qkDescale = (fp8.qDescale ? fp8.qDescale[descaleIndex] : 1.f) *");
  w.line("                        (fp8.kDescale ? fp8.kDescale[descaleIndex] : 1.f);");
  w.line("const float vDescale = fp8.vDescale ? fp8.vDescale[descaleIndex] : 1.f;");
  w.line("p.softmaxScale = params.softmaxScale * qkDescale;");
  w.line("p.scaleLog2 = params.scaleLog2 * qkDescale;");
  w.line("p.invSoftmaxScale = 1.f / p.softmaxScale;");
}

void TileTargetSm90::packProbabilitiesE4m3(CudaWriter &w, const std::string &s, const std::string &p, bool declare) {
  w.comment("P as e4m3 A fragments of P·V, k32 step k = n8 tiles 4k .. 4k + 3 of the scores: the lane's own keys");
  w.comment("{2q, 2q+1, 2q+8, 2q+9} and {2q+16, 2q+17, 2q+24, 2q+25} of the step (q = lane % 4) fill A positions");
  w.comment("4q .. 4q+3 and 4q+16 .. 4q+19, and Vᵀ's keys are permuted alike (the prepass): no data moves between lanes");
  if (declare)
    w.line(cat("unsigned ", p, "[kMTiles][kBlockN / 32][4];"));
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("k", "kBlockN / 32");
  for (int reg = 0; reg < 4; ++reg) {
    const int tile = 2 * (reg / 2), row = 2 * (reg % 2); // n8 tiles 4k + {0, 1} or {2, 3}; row g or g + 8
    w.line(cat(p, "[mt][k][", reg, "] = sm90::warpgroup::packE4m3x4(", s, "[mt][4 * k + ", tile, "][", row, "], ", s,
               "[mt][4 * k + ", tile, "][", row + 1, "],"));
    w.line(cat("                                               ", s, "[mt][4 * k + ", tile + 1, "][", row, "], ", s,
               "[mt][4 * k + ", tile + 1, "][", row + 1, "]);"));
  }
  w.close();
  w.close();
}


void TileTargetSm90::copyVtImage(CudaWriter &w, const std::string &tile, const std::string &position,
                                 const BarrierInfo &barrier) {
  w.comment(cat("bulk copy: the Vᵀ image of V tile ", tile, " (the prepass wrote it, Fp8Abi.h) into the slot of ring"));
  w.comment(cat("position ", position, "; its bytes complete the phase of ", barrier.name));
  w.open("");
  w.line(cat("const int slot = ", ringSlot(position, barrier.slots), ";"));
  w.line(cat("const long long vtImage = static_cast<long long>(p.keyOffset / kBlockN + b + ", tile,
             ") * p.headsKv + hKv;"));
  w.line(cat("sm90::mbarrier::arriveExpectTx(&", barrier.name, "[slot], kVTileBytes);"));
  w.line(cat("sm90::bulk::load(sV + slot * kVTileBytes, static_cast<const unsigned char *>(fp8.vTransposed) + vtImage * "
             "kVTileBytes,"));
  w.line(cat("                 kVTileBytes, &", barrier.name, "[slot]);"));
  w.close();
}

int TileTargetSm90::printOperandPrepass(CudaWriter &w, const std::string &entry) {
  if (!e4m3)
    return 0;
  constexpr int kThreads = 256;
  w.line("");
  w.comment("==== Vᵀ for P·V: 8-bit wgmma reads both operands K-major, so V's keys must be a row's contiguous bytes.");
  w.comment("One block per (key tile j, K/V head, sequence) writes the tile's shared-memory image (FlashtileFp8Params::");
  w.comment("vTransposed): kHeadDimV rows of kBlockN keys in the attention kernel's swizzled column blocks, each 32-key");
  w.comment("group's keys in the order P's accumulator holds them (A position 4q + i: the i-th of 2q, 2q+1, 2q+8, 2q+9;");
  w.comment("4q + 16 + i: of 2q+16, 2q+17, 2q+24, 2q+25), keys past the sequence zero. The attention kernel copies");
  w.comment("an image into a V slot as it is (one cp.async.bulk). ====");
  w.open(cat("extern \"C\" __global__ void __launch_bounds__(", kThreads, ") ", entry,
             "(const FlashtileFwdParams params, const FlashtileFp8Params fp8)"));
  w.line(cat("constexpr int kBlockN = ", shape.blockN, ", kHeadDimV = ", shape.headDimV, ", kGroupKeys = 32;"));
  w.line("constexpr unsigned kVTileBytes = kBlockN * kHeadDimV;");
  w.line("constexpr int kRowChunks = kHeadDimV / 16;  // 16-byte chunks of a V row");
  w.line("const int j = blockIdx.x, hKv = blockIdx.y, b = blockIdx.z;");
  w.comment("the sequence's keys: rows [keyBegin, keyBegin + keys) of V (varlen: of the packed V)");
  w.line("int keyBegin = b * params.seqlenK, keys = params.seqlenK;");
  w.line("const unsigned char *v = static_cast<const unsigned char *>(params.v) + b * params.vBatchStride;");
  w.open("if (params.cuSeqlensK)");
  w.line("keyBegin = min(max(params.cuSeqlensK[b], 0), params.seqlenK);");
  w.line("keys = min(max(params.cuSeqlensK[b + 1], keyBegin), params.seqlenK) - keyBegin;");
  w.line("v = static_cast<const unsigned char *>(params.v) + keyBegin * params.vRowStride;");
  w.close();
  w.line("if (j * kBlockN >= keys)");
  w.line("  return;  // varlen: the grid covers the longest sequence; the attention kernel reads no tile here");
  w.line("v += hKv * params.vHeadStride;");
  w.line("unsigned char *const image = static_cast<unsigned char *>(fp8.vTransposed) +");
  w.line("                             (static_cast<long long>(keyBegin / kBlockN + b + j) * params.headsKv + hKv) * "
         "kVTileBytes;");
  w.line("__shared__ __align__(16) unsigned char group[kGroupKeys][kHeadDimV];");
  w.line("#pragma unroll 1");
  w.open("for (int g = 0; g < kBlockN / kGroupKeys; ++g)");
  w.line("const int key0 = j * kBlockN + g * kGroupKeys;");
  w.comment("the group's 32 V rows into shared memory (16-byte loads; rows past the sequence are zeros)");
  w.open("for (int c = threadIdx.x; c < kGroupKeys * kRowChunks; c += blockDim.x)");
  w.line("const int row = c / kRowChunks, col = 16 * (c % kRowChunks);");
  w.line("uint4 x = make_uint4(0u, 0u, 0u, 0u);");
  w.line("if (key0 + row < keys)");
  w.line("  x = *reinterpret_cast<const uint4 *>(v + static_cast<long long>(key0 + row) * params.vRowStride + col);");
  w.line("*reinterpret_cast<uint4 *>(&group[row][col]) = x;");
  w.close();
  w.line("__syncthreads();");
  w.comment("Vᵀ row d, A positions 16 half .. 16 half + 15 of the group: one 16-byte chunk of the image");
  w.open("for (int c = threadIdx.x; c < kHeadDimV * 2; c += blockDim.x)");
  w.line("const int d = c / 2, half = c % 2;");
  w.line("unsigned words[4];");
  w.openUnrolledFor("q", "4");
  w.line("unsigned word = 0;");
  w.openUnrolledFor("i", "4");
  w.line("const int key = 16 * half + 2 * q + (i & 1) + 8 * (i >> 1);  // position 16 half + 4q + i");
  w.line("word |= unsigned(group[key][d]) << (8 * i);");
  w.close();
  w.line("words[q] = word;");
  w.close();
  w.line(cat("*reinterpret_cast<uint4 *>(image + sm90::swizzleOffset8<", vtSwizzle,
             ">(d, g * kGroupKeys + 16 * half, kHeadDimV)) ="));
  w.line("    make_uint4(words[0], words[1], words[2], words[3]);");
  w.close();
  w.line("__syncthreads();");
  w.close();
  w.close();
  return kThreads;
}

std::optional<RoleProblem> TileTargetSm90::checkRoles(const std::vector<RoleInfo> &roleList) const {
  for (size_t i = 0; i < roleList.size(); ++i)
    if (roleList[i].warps % kWarpgroupWarps != 0)
      return RoleProblem{static_cast<int>(i), cat("has ", roleList[i].warps, " warps"),
                         "lays roles out as whole warpgroups (setmaxnreg)"};
  auto computing = std::find_if(roleList.begin(), roleList.end(), [](const RoleInfo &r) { return r.computes; });
  const int computingRoles =
      static_cast<int>(std::count_if(roleList.begin(), roleList.end(), [](const RoleInfo &r) { return r.computes; }));
  if (computingRoles != 1 || computing->warps != consumerWarps)
    return RoleProblem{-1,
                       computingRoles == 1 ? cat("has a computing role of ", computing->warps, " warps")
                                           : cat("has ", computingRoles, " computing roles"),
                       cat("needs one computing role of ", consumerWarps, " warps (16 query rows a warp)")};
  return std::nullopt;
}

void TileTargetSm90::setupRoles(CudaWriter &w, const std::vector<RoleInfo> &roleList,
                                const std::vector<BarrierInfo> &barrierList) {
  roles = roleList;
  barriers = barrierList;
  int warp = 0, computing = -1;
  for (size_t i = 0; i < roles.size(); ++i) {
    firstWarp.push_back(warp);
    warp += roles[i].warps;
    if (roles[i].computes)
      computing = static_cast<int>(i);
  }
  w.comment("---- roles: consecutive warpgroups in IR order ----");
  for (size_t i = 0; i < roles.size(); ++i)
    w.comment(cat("\"", roles[i].name, "\": warps [", firstWarp[i], ", ", firstWarp[i] + roles[i].warps, "), ",
                  roles[i].regs, " registers a thread", roles[i].computes ? "" : ", its region in one thread"));
  const int consumerFirst = firstWarp[computing];
  w.comment("The computing role's warp w owns query rows [16w, 16w + 16) of the block (warpgroup w / 4 issues the");
  w.comment("m64 wgmmas of rows [64 (w / 4), 64 (w / 4) + 64)); a wgmma accumulator gives lane l rows fragRow and");
  w.comment("fragRow + 8 of the warp's 16, columns fragCol and fragCol + 1 of every n8 block, as mma.sync's C fragment.");
  w.line("constexpr int kWarpRows = 16, kMTiles = 1;");
  w.line("constexpr int kSTiles = kBlockN / 8;     // n8 blocks of a score row");
  w.line("constexpr int kOTiles = kHeadDimV / 8;   // n8 blocks of an output row");
  w.line(cat("const int warp = threadIdx.x / 32 - ", consumerFirst, ", lane = threadIdx.x % 32;"));
  w.line("const int fragRow = lane / 4, fragCol = 2 * (lane % 4);");
  w.line("");

  w.comment("---- barriers, one per ring slot: full (one arrival, the producer's arrive.expect_tx, plus the copy's");
  w.comment("bytes), empty (one arrival per computing warp and arriving role; a slot starts released) ----");
  const int offset = printRingBarrierDeclarations(w, kIsa, barriers);
  if (std::any_of(barriers.begin(), barriers.end(), [](const BarrierInfo &b) { return b.workUnit; })) {
    w.comment("the work queue's cell: the unit the producer took for the block's next tile (dynamic scheduler)");
    w.line(cat("volatile int *const workCell = reinterpret_cast<volatile int *>(barriers + ", offset, ");"));
  }
  w.open("if (threadIdx.x == 0)");
  printRingBarrierInits(w, kIsa, barriers, consumerWarps);
  w.line("sm90::mbarrier::initFence();");
  w.close();
  w.line("__syncthreads();");
}

void TileTargetSm90::openRole(CudaWriter &w, int index) {
  const RoleInfo &role = roles[index];
  const int first = firstWarp[index], regs = launchRegisters(shape.warps * kWarpSize);
  w.comment(cat("==== role \"", role.name, "\": warps [", first, ", ", first + role.warps, ") ===="));
  w.open(cat("if (threadIdx.x / 32 >= ", first, " && threadIdx.x / 32 < ", first + role.warps, ")"));
  if (role.regs < regs)
    w.line(cat("sm90::warpgroup::decreaseRegisters<", role.regs, ">();  // from ", regs, " at launch"));
  else if (role.regs > regs)
    w.line(cat("sm90::warpgroup::increaseRegisters<", role.regs, ">();  // from ", regs, " at launch"));
  if (role.computes && role.pingpong) {
    w.comment(cat("ping-pong: warpgroup g issues its GEMMs after named barrier ", kFirstTurnBarrier,
                  " + g completes (its own 128 threads and the previous warpgroup's arrival), then arrives on the"));
    w.comment("next one's; the first warpgroup's first turn is pre-arrived here");
    w.line("if (warp / 4 == 0)");
    w.line(cat("  sm90::namedBarrier::arrive(", kFirstTurnBarrier, ", 256);"));
  }
  if (!role.computes) {
    w.comment("one thread issues the role's copies and waits (TMA copies are issued by a thread, not a warp)");
    w.open(cat("if (threadIdx.x == ", first * kWarpSize, ")"));
  }
}

void TileTargetSm90::closeRole(CudaWriter &w, int index) {
  if (!roles[index].computes)
    w.close();
  w.close();
}

void TileTargetSm90::barrierWait(CudaWriter &w, int index, const std::string &position) {
  printRingWait(w, kIsa, barriers[index], position);
}

void TileTargetSm90::barrierArrive(CudaWriter &w, int index, const std::string &position) {
  printRingRelease(w, kIsa, barriers[index], position, "one arrival per warp, after all its lanes are done with it");
}

void TileTargetSm90::copyToSlot(CudaWriter &w, Operand operand, const std::string &tile, const std::string &position,
                                int index) {
  if (e4m3 && operand == Operand::V)
    return copyVtImage(w, tile, position, barriers[index]);
  printRingCopy(w, kIsa, operand, tile, position, barriers[index]);
}

bool TileTargetSm90::publishWorkUnit(CudaWriter &w, int index, const std::string &unit) {
  const BarrierInfo &barrier = barriers[index];
  w.comment(cat("hand ", unit, " to the consumers: the cell, then one arrival on ", barrier.name,
                " (its release orders the write before the phase completes)"));
  w.line(cat("*workCell = ", unit, ";"));
  w.line(cat("sm90::mbarrier::arrive(&", barrier.name, "[0]);"));
  return true;
}

bool TileTargetSm90::receiveWorkUnit(CudaWriter &w, int index, const std::string &position, const std::string &unit) {
  const BarrierInfo &barrier = barriers[index];
  w.comment(cat("wait until the producer handed over the unit of tile ", position, " (phase parity), then read it"));
  w.line(cat("sm90::mbarrier::wait(&", barrier.name, "[0], (", position, ") & 1);"));
  w.line(cat("const int ", unit, " = *workCell;"));
  return true;
}

void TileTargetSm90::storeO(CudaWriter &w, const StateNames &st, bool stagedInQ) {
  // An e4m3 sQ holds half of O's bf16 bytes: the pipeline never stages O there (tile-role-pipeline).
  assert(!(e4m3 && stagedInQ) && "e4m3 O is stored from the registers");
  if (!stagedInQ || e4m3) {
    fragments.storeODirect(w, st);
    return;
  }
  const char *pack = shape.dtype == "bf16" ? "sm90::warpgroup::packBf16x2" : "sm90::warpgroup::packF16x2";
  w.comment(cat("store O staged in sQ: this warp's Q rows are dead (its warpgroup's last Q·Kᵀ wgmma was waited on);"));
  w.comment("stmatrix writes the accumulator fragments, converted, in sQ's swizzled layout (each 8x8 matrix row one");
  w.comment("16-byte chunk), then each lane copies 16-byte chunks of whole rows < seqlen_q to O: 128-byte row");
  w.comment("segments instead of 4-byte fragment pairs. Only this warp touches these rows: __syncwarp suffices.");
  w.line(cat("unsigned short *const gO = static_cast<unsigned short *>(p.o) + b * p.oBatchStride + h * "
             "p.oHeadStride;"));
  w.line("const int stageRow0 = warpRow0 - m0;  // this warp's first row of sQ");
  w.open("");
  w.comment("lane l addresses row l % 8 of matrix l / 8: matrices (rows 0-7, n8 tile nt), (8-15, nt), (0-7, nt + 1),");
  w.comment("(8-15, nt + 1), whose lane pairs are acc[mt][nt][0..1], [2..3], acc[mt][nt + 1][0..1], [2..3]");
  w.line("const int matrixRow = (lane / 8 % 2) * 8 + lane % 8, matrixTile = lane / 16;");
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("np", "kOTiles / 2");
  w.line("const int nt = 2 * np;");
  const std::string &acc = st.acc;
  w.line(cat("const unsigned pairs[4] = {", pack, "(", acc, "[mt][nt][0], ", acc, "[mt][nt][1]), ", pack, "(", acc,
             "[mt][nt][2], ", acc, "[mt][nt][3]),"));
  w.line(cat("                           ", pack, "(", acc, "[mt][nt + 1][0], ", acc, "[mt][nt + 1][1]), ", pack, "(",
             acc, "[mt][nt + 1][2], ", acc, "[mt][nt + 1][3])};"));
  const std::string offset = offsetFn();
  const std::string call = cat("sm90::warp::stmatrixX4(sm90::smemAddress(sQ) + ", offset, "(");
  w.line(cat(call, "stageRow0 + 16 * mt + matrixRow,"));
  w.line(cat(std::string(call.size() + 2, ' '), "8 * (nt + matrixTile), kBlockM),")); // as the 128-byte text had it
  w.line("                       pairs);");
  w.close();
  w.close();
  w.close();
  w.line("__syncwarp();");
  w.line("constexpr int kRowChunks = kHeadDimV / 8, kChunks = kWarpRows * kRowChunks;  // 16-byte chunks");
  w.openUnrolledFor("i", "(kChunks + 31) / 32");
  w.line("const int chunk = lane + 32 * i, row = chunk / kRowChunks, col = chunk % kRowChunks;");
  w.line("const int q = warpRow0 + row;");
  w.line("if ((kChunks % 32 == 0 || chunk < kChunks) && q < p.seqlenQ)");
  w.line("  *reinterpret_cast<uint4 *>(gO + q * p.oRowStride + 8 * col) = *reinterpret_cast<const uint4 *>(");
  w.line(cat("      sQ + ", offset, "(stageRow0 + row, 8 * col, kBlockM));"));
  w.close();
  w.line("sm90::fence::proxyAsync();  // these generic writes to sQ before a later TMA copy of Q into it (persistent)");
}

void TileTargetSm90::load(CudaWriter &w, Operand operand, const std::string &tile) {
  w.comment(cat(operandName(operand), operand == Operand::Q ? "" : cat(" tile ", tile),
                " stays in its slot: wgmma reads it there through a descriptor"));
}

void TileTargetSm90::qk(CudaWriter &w, const std::string &kSlot, const std::string &scores) {
  w.comment(cat(scores, " = Q·Kᵀ: wgmma m64n", shape.blockN, "k", kStepKeys(), " ", mmaType,
                " SS, this warpgroup's 64 rows of sQ and the K tile in slot ", kSlot, " % kStages, both K-major;"));
  w.comment("issued here, read after its wait");
  w.line(cat("float ", scores, "[kMTiles][kSTiles][4];"));
  w.open("");
  // The operands' addresses broadcast from lane 0 (sm90::warp::uniform): their descriptors then stay in uniform
  // registers (SASS at hd128: 179 R2URs and 36 bytes of spills without, 28 and none with).
  w.line(cat("const unsigned qAddr = sm90::warp::uniform(sm90::smemAddress(sQ) + (warp / 4) * 64 * ", swizzle, ");"));
  w.line(cat("const unsigned kAddr = sm90::warp::uniform(sm90::smemAddress(sK) + (", kSlot, ") % kStages * kKTileBytes);"));
  if (shape.descAdvance)
    w.line(cat("const unsigned long long qDesc = sm90::desc::kMajor", spanArg(), "(qAddr), kDesc = sm90::desc::kMajor",
               spanArg(), "(kAddr);  // advanced a k step at a time (desc-advance)"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("ks", cat("kHeadDim / ", kStepKeys()));
  if (e4m3)
    w.line("sm90::warpgroup::WgmmaE4m3<kBlockN>::ss(");
  else
    w.line(cat("sm90::warpgroup::Wgmma<kBlockN>::", mmaType, "SS<sm90::warpgroup::kKMajor>("));
  if (shape.descAdvance) {
    w.line(cat("    reinterpret_cast<float (&)[kSTiles * 4]>(", scores, "[0]), sm90::desc::advance(qDesc, ",
               kMajorStepBytes("ks", "kBlockM"), "),"));
    w.line(cat("    sm90::desc::advance(kDesc, ", kMajorStepBytes("ks", "kBlockN"), "), ks > 0);"));
  } else {
    w.line(cat("    reinterpret_cast<float (&)[kSTiles * 4]>(", scores, "[0]), sm90::desc::kMajorStep", spanArg(),
               "(qAddr, ks, kBlockM),"));
    w.line(cat("    sm90::desc::kMajorStep", spanArg(), "(kAddr, ks, kBlockN), ks > 0);"));
  }
  w.close();
  w.line("sm90::warpgroup::commitGroup();");
  w.close();
}

void TileTargetSm90::pv(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vSlot) {
  if (e4m3) {
    w.comment(cat("acc += P·V: wgmma m64n", shape.headDimV, "k32 e4m3 RS, P from registers (", p,
                  ": e4m3 A fragments in place), the Vᵀ image in slot ", vSlot, " % kStages K-major"));
    w.open("");
    w.line(cat("const unsigned vAddr = sm90::warp::uniform(sm90::smemAddress(sV) + (", vSlot,
               ") % kStages * kVTileBytes);"));
    const std::string vtSpan = vtSwizzle == kSwizzleBytes ? std::string() : cat("<", vtSwizzle, ">");
    if (shape.descAdvance)
      w.line(cat("const unsigned long long vDesc = sm90::desc::kMajor", vtSpan,
                 "(vAddr);  // advanced a k step at a time (desc-advance)"));
    w.line(cat("sm90::warpgroup::fenceOperands(reinterpret_cast<float (&)[kOTiles * 4]>(", st.acc, "[0]));"));
    w.line("sm90::warpgroup::arrive();");
    w.openUnrolledFor("k", "kBlockN / 32");
    w.line("sm90::warpgroup::WgmmaE4m3<kHeadDimV>::rs(");
    if (shape.descAdvance)
      w.line(cat("    reinterpret_cast<float (&)[kOTiles * 4]>(", st.acc, "[0]), ", p, "[0][k], sm90::desc::advance(vDesc, ",
                 kMajorStepBytes("k", "kHeadDimV", vtSwizzle), "), 1);"));
    else
      w.line(cat("    reinterpret_cast<float (&)[kOTiles * 4]>(", st.acc, "[0]), ", p, "[0][k], sm90::desc::kMajorStep",
                 vtSpan, "(vAddr, k, kHeadDimV), 1);"));
    w.close();
    w.line("sm90::warpgroup::commitGroup();");
    w.close();
    return;
  }
  w.comment(cat("acc += P·V: wgmma m64n", shape.headDimV, "k16 ", mmaType,
                " RS, P from registers (", p, ": the A fragments in place), the V tile in slot ", vSlot,
                " % kStages MN-major"));
  w.open("");
  w.line(cat("const unsigned vAddr = sm90::warp::uniform(sm90::smemAddress(sV) + (", vSlot, ") % kStages * kVTileBytes);"));
  if (shape.descAdvance)
    w.line(cat("const unsigned long long vDesc = sm90::desc::mnMajor", spanArg(), "(vAddr, kBlockN * ", swizzle,
               ");  // advanced a k step at a time (desc-advance)"));
  w.line(cat("sm90::warpgroup::fenceOperands(reinterpret_cast<float (&)[kOTiles * 4]>(", st.acc, "[0]));"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("k", "kBlockN / 16");
  w.line(cat("sm90::warpgroup::Wgmma<kHeadDimV>::", mmaType, "RS<sm90::warpgroup::kMNMajor>("));
  if (shape.descAdvance)
    w.line(cat("    reinterpret_cast<float (&)[kOTiles * 4]>(", st.acc, "[0]), ", p,
               "[0][k], sm90::desc::advance(vDesc, unsigned(k) * 16u * ", swizzle, "u), 1);"));
  else
    w.line(cat("    reinterpret_cast<float (&)[kOTiles * 4]>(", st.acc,
               "[0]), ", p, "[0][k], sm90::desc::mnMajorStep", spanArg(), "(vAddr, k, kBlockN), 1);"));
  w.close();
  w.line("sm90::warpgroup::commitGroup();");
  w.close();
}

void TileTargetSm90::mmaWait(CudaWriter &w, MmaResult result, const std::string &tile, const std::string &operand,
                             int newerInFlight, bool afterUnmaskedSoftmax) {
  const char *count = result == MmaResult::Scores ? "kSTiles" : "kOTiles";
  w.comment(cat("retire the wgmma group: ", tile, " is readable and its shared-memory operands are free",
                newerInFlight ? cat(" (", newerInFlight, " newer group", newerInFlight > 1 ? "s" : "", " stay in flight)")
                              : std::string()));
  if (result == MmaResult::Acc && shape.latePvWait && afterUnmaskedSoftmax) {
    w.comment(
        "late-pv-wait: a branch the compiler keeps (never taken: the host refuses seqlen_k < 0) ends the block of");
    w.comment("the softmax's exponentials, so that ptxas cannot hoist this wait above them");
    w.line("if (p.seqlenK < 0) __trap();");
  }
  w.line(cat("sm90::warpgroup::wait<", newerInFlight, ">();"));
  w.line(cat("sm90::warpgroup::fenceOperands(reinterpret_cast<float (&)[", count, " * 4]>(", tile, "[0]));"));
  if (result == MmaResult::Acc) {
    // The RS operand (P) too: the compiler sees the wgmma read it at issue and must not reuse its registers before
    // the hardware has.
    w.line(cat("sm90::warpgroup::fenceOperands(reinterpret_cast<unsigned (&)[kBlockN / ", kStepKeys(), " * 4]>(",
               operand, "[0]));"));
  }
}

void TileTargetSm90::mmaTurn(CudaWriter &w, bool begin) {
  const int groups = consumerWarps / kWarpgroupWarps;
  if (begin) {
    w.comment("wait for this warpgroup's turn to issue GEMMs (ping-pong)");
    w.line(cat("sm90::namedBarrier::sync(", kFirstTurnBarrier, " + warp / 4, 256);"));
  } else {
    w.comment("hand the turn to the next warpgroup");
    w.line(cat("sm90::namedBarrier::arrive(", kFirstTurnBarrier, " + (warp / 4 + 1) % ", groups, ", 256);"));
  }
}

class FamilySm90 final : public TargetFamily {
public:
  std::string_view name() const override { return kIsa; }
  std::string_view summary() const override {
    return "wgmma.mma_async, TMA (cp.async.bulk.tensor), mbarrier, setmaxnreg (sm_90a)";
  }
  const std::vector<ArchLimits> &archs() const override {
    static const std::vector<ArchLimits> limits = {{kArch, kMaxSmemBytes, /*dependentLaunch=*/true}};
    return limits;
  }
  MmaShape mmaShape() const override { return {kWgmmaM, kWgmmaNStep, kWgmmaK}; }
  bool asyncProtocol() const override { return true; }

  std::optional<std::string> checkShape(const KernelShape &shape) const override {
    if (shape.dtype != "bf16" && shape.dtype != "f16" && shape.dtype != "e4m3")
      return "sm90 wgmmas take bf16, f16 or e4m3 tiles here, got " + shape.dtype;
    if (!shape.kvDtype.empty())
      return "sm90: K and V are read in the program's dtype here; kv_dtype " + shape.kvDtype +
             " (an e4m3 KV cache) is read by the sm80 family's decode kernels";
    if (isE4m3(shape)) {
      // 8-bit wgmma (k32): head dims of whole 32-byte swizzle rows, P·V's keys in k32 steps; no backward, no GQA
      // packing (docs/fp8.md).
      for (auto [name, value] : {std::pair{"head_dim", shape.headDim}, {"head_dim_v", shape.headDimV}})
        if (value % kWgmmaKE4m3 != 0 || value < kWgmmaKE4m3 || value > kWgmmaMaxN)
          return cat("sm90 e4m3: ", name, " (", value, ") must be a multiple of ", kWgmmaKE4m3, " up to ", kWgmmaMaxN,
                     " (k32 steps of 8-bit wgmma)");
      if (shape.blockN % kWgmmaKE4m3 != 0 || shape.blockN > kWgmmaMaxN)
        return cat("sm90 e4m3: block-n (", shape.blockN, ") must be a multiple of ", kWgmmaKE4m3, " up to ",
                   kWgmmaMaxN, " (the k32 steps of P·V)");
      if (!checkBackwardShape(shape))
        return std::string("sm90 e4m3: no backward (as flash-attn 3's FP8 forward)");
    }
    if (shape.exp2PolyShare < 0 || shape.exp2PolyShare > 8)
      return cat("sm90: exp2 poly share (", shape.exp2PolyShare, ") must be 0 to 8 eighths of the n8 tiles");
    if (shape.maxChains != 1 && shape.maxChains != 2 && shape.maxChains != 4)
      return cat("sm90: max chains (", shape.maxChains, ") must be 1, 2 or 4");
    if (shape.blockN / 8 < shape.maxChains)
      return cat("sm90: max chains (", shape.maxChains, ") needs block-n (", shape.blockN,
                 ") >= ", 8 * shape.maxChains);
    constexpr int kNarrowColumns = kNarrowSwizzleBytes / 2;
    for (auto [name, value] : {std::pair{"head_dim", shape.headDim}, {"head_dim_v", shape.headDimV}})
      if (value % kNarrowColumns != 0 || value < kNarrowColumns || value > kWgmmaMaxN)
        return cat("sm90: ", name, " (", value, ") must be a multiple of ", kNarrowColumns, " up to ", kWgmmaMaxN,
                   " (whole column blocks of the 128-byte or the ", kNarrowSwizzleBytes, "-byte swizzle)");
    if (shape.blockN < 16 || shape.blockN % 16 != 0 || shape.blockN > kWgmmaMaxN)
      return cat("sm90: block-n (", shape.blockN, ") must be a multiple of 16 up to ", kWgmmaMaxN,
                 " (the n of Q·Kᵀ's wgmma and the k16 steps of P·V)");
    if (shape.warpLayout != WarpLayout::SplitQ)
      return cat("sm90: warp layout ", warpLayoutName(shape.warpLayout),
                 " is not printed; accepted: ", warpLayoutName(WarpLayout::SplitQ));
    // The backward's main program (BackwardSm90.cpp): warpgroups that all compute and copy, split-Q or by keys.
    const bool backwardBlock = !checkBackwardShape(shape);
    if (!backwardBlock && (shape.warps % kWarpgroupWarps != 0 || shape.blockM % kWgmmaM != 0 ||
                           shape.blockM != kRowsPerWarp * (shape.warps - kWarpgroupWarps)))
      return cat("sm90: block-m (", shape.blockM, ") with ", shape.warps,
                 " warps: a block is one producer warpgroup plus consumer warpgroups of 64 rows each (or, in a "
                 "backward, one or two computing warpgroups: ", *checkBackwardShape(shape), ")");
    if (shape.warpRows != kRowsPerWarp)
      return cat("sm90: split_q warpRows (", shape.warpRows, ") must be ", kRowsPerWarp,
                 ": a consumer warp holds its quarter of an m", kWgmmaM, " wgmma's rows");
    if (shape.stages < 1 || shape.stages > 8)
      return cat("sm90: stages (", shape.stages, ") must be 1 to 8 slots per K/V ring");
    if (shape.packQueryHeads)
      return std::string("sm90: GQA packing is printed by the sm80 family");
    return std::nullopt;
  }

  int64_t smemBytes(const KernelShape &shape) const override {
    return ringSmemBytes(shape, kSmemReserve);
  }

  std::unique_ptr<TileTarget> createPrinter(const KernelShape &shape) const override {
    assert(!checkShape(shape) && "createPrinter needs a shape checkShape accepts");
    return std::make_unique<TileTargetSm90>(shape);
  }

  std::unique_ptr<BackwardTarget> createBackwardPrinter(const KernelShape &shape) const override {
    assert(!checkShape(shape) && "createBackwardPrinter needs a shape checkShape accepts");
    return createBackwardTarget(shape);
  }
};

} // namespace

std::unique_ptr<TargetFamily> createFamily() { return std::make_unique<FamilySm90>(); }

} // namespace flashtile::codegen::sm90
