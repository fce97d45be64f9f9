//===- InstructionsSm100.h - the SM100 instruction family, as data --------===//
//
// What a lowering to the sm100 family (tcgen05.mma, tensor memory, TMA, mbarrier) needs to know without depending on
// a printer: the MMA shapes of tcgen05.mma.cta_group::1.kind::f16, the geometry of tensor memory (TMEM), the
// shared-memory budget and the instruction each operation becomes. Header-only and MLIR-free, like
// InstructionsSm90.h. No SM100 GPU exists here: what this family's code does on hardware is unverified; it is checked
// by NVRTC and ptxas for sm_100a, by its SASS and by CPU unit tests only (README.md).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_INSTRUCTIONSSM100_H
#define FLASHTILE_CODEGEN_SM100_INSTRUCTIONSSM100_H

#include <array>

namespace flashtile::codegen::sm100 {

inline constexpr const char *kIsa = "sm100";
/// The only architecture the family serves: tcgen05 is an sm_100a feature (ptxas refuses it for sm_100 without `a`).
inline constexpr const char *kArch = "sm_100a";

/// tcgen05.mma.cta_group::1.kind::f16 (PTX ISA Table 39, dense): M is 64 or 128 rows, N a multiple of 8 in [8, 256],
/// one instruction reduces over K = 16 (16-bit inputs). A single thread issues it for the whole CTA.
inline constexpr int kMmaM = 128, kMmaMSmall = 64, kMmaK = 16;
inline constexpr int kMmaNStep = 8, kMmaMinN = 8, kMmaMaxN = 256;
/// cta_group::2 (a CTA pair of a cluster): M = 256 across the pair, N in steps of 16.
inline constexpr int kMmaMPair = 256, kMmaPairNStep = 16;

/// Tensor memory: 128 lanes (rows) x 512 columns of 32-bit cells per CTA. An address is (lane << 16) | column.
/// Allocation is by columns, a power of two of at least 32, always all 128 lanes. A warp reaches only its quarter of
/// the lanes: warp w of a warpgroup lanes [32 (w % 4), 32 (w % 4) + 32), so a 128-row accumulator (M = 128: row i in
/// lane i) is read by one warpgroup.
inline constexpr int kTmemLanes = 128, kTmemColumns = 512, kTmemMinAllocColumns = 32;
inline constexpr int kTmemLaneShift = 16;
inline constexpr int kTmemLanesPerWarp = 32, kWarpsPerWarpgroup = 4, kWarpgroupThreads = 128;
/// tcgen05.ld/st .32x32b.xN: each thread of a warp moves N consecutive 32-bit columns of its lane; N is a power of two
/// in [1, 128].
inline constexpr std::array<int, 8> kTmemAccessWidths = {1, 2, 4, 8, 16, 32, 64, 128};

/// Where register `reg` of lane `lane` lies in one tcgen05.ld/st access (PTX ISA 9.7.16.2.3.1, "Matrix fragments for
/// shape ..."): the row relative to the access's first lane and the column (32-bit cells) relative to its first column.
struct TmemCell {
  int row = 0;
  int column = 0;
  constexpr bool operator==(const TmemCell &) const = default;
};
/// .32x32b.xN: 32 lanes, N columns; lane l holds its own lane's row, register r column r.
constexpr TmemCell cell32x32b(int lane, int reg) { return {lane, reg}; }
/// .16x256b.xN: 16 lanes, 8N columns; register r of lane l holds row l/4 + 8 ((r/2) % 2), column 2 (l % 4) + r % 2 +
/// 8 (r/4). Per 8-column block j, registers 4j..4j+3 are mma.sync's m16n8 C fragment: rows l/4 and l/4 + 8, columns
/// 2 (l % 4) and + 1. So S loads straight into the common register tiles' layout (FragmentTiles.h).
constexpr TmemCell cell16x256b(int lane, int reg) {
  return {lane / 4 + 8 * ((reg / 2) % 2), reg % 2 + 2 * (lane % 4) + 8 * (reg / 4)};
}
/// .16x128b.xN: 16 lanes, 4N columns; register r of lane l holds row l/4 + 8 (r % 2), column l % 4 + 4 (r/2). With
/// 16-bit pairs in 32-bit cells (column c holds K elements 2c and 2c + 1 of a row), registers 4k..4k+3 are mma.sync's
/// m16n8k16 A fragment of k16 step k (rows l/4, l/4 + 8; K pairs 2 (l % 4) and 2 (l % 4) + 8): P packed for P·V
/// (FragmentTiles::packProbabilities) stores straight into the layout the TMEM-A form of tcgen05.mma reads.
constexpr TmemCell cell16x128b(int lane, int reg) { return {lane / 4 + 8 * (reg % 2), lane % 4 + 4 * (reg / 2)}; }
/// The rows a 16-lane access covers: a warp reaches its 32 lanes as two accesses, at its first lane and 16 after.
inline constexpr int kFragmentAccessRows = 16;
/// The n8 tiles (N of .16x256b.xN and .16x128b.xN) of the register-tile accesses the prelude prints
/// (sm100::tmem::Fragments<N>): an even count (P's k16 steps are pairs of n8 tiles) up to 32 (128 registers).
inline constexpr std::array<int, 5> kFragmentAccessTiles = {2, 4, 8, 16, 32};

/// Shared-memory tiles use TMA's 128-byte swizzle (64 16-bit columns per column block), aligned to the swizzle's
/// 1024-byte repeat so that descriptors need no base offset.
inline constexpr int kSwizzleBytes = 128, kSwizzleAtomBytes = 1024, kSwizzleColumns = 64;
/// Dynamic shared memory one block may opt in to on sm_100 (227 KB of the SM's 228 KB).
inline constexpr int kMaxSmemBytes = 227 * 1024;

/// The instruction each operation lowers to (for `tile.inst` annotations and messages).
inline constexpr const char *kMmaSSInst = "tcgen05.mma.cta_group::1.kind::f16 (A, B in shared memory)";
inline constexpr const char *kMmaTSInst = "tcgen05.mma.cta_group::1.kind::f16 (A in tensor memory)";
inline constexpr const char *kCommitInst = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64";
inline constexpr const char *kTmemLoadInst = "tcgen05.ld.sync.aligned.32x32b";
inline constexpr const char *kTmemStoreInst = "tcgen05.st.sync.aligned.32x32b";
inline constexpr const char *kTmemFragmentLoadInst = "tcgen05.ld.sync.aligned.16x256b";
inline constexpr const char *kTmemFragmentStoreInst = "tcgen05.st.sync.aligned.16x128b";
inline constexpr const char *kLoadInst = "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes";
inline constexpr const char *kWaitInst = "mbarrier.try_wait.parity.shared::cta.b64";

} // namespace flashtile::codegen::sm100

#endif // FLASHTILE_CODEGEN_SM100_INSTRUCTIONSSM100_H
