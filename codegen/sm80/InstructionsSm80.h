//===- InstructionsSm80.h - the SM80 instruction family, as data ----------===//
//
// What `tile-lower-to-target` needs to know about the sm80 family (mma.sync, ldmatrix, cp.async) without
// depending on the printer: the MMA shape, the instruction each tile op becomes, and each architecture's
// shared-memory limit. Header-only and MLIR-free, so passes/ can include it while the instruction set stays here.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM80_INSTRUCTIONSSM80_H
#define FLASHTILE_CODEGEN_SM80_INSTRUCTIONSSM80_H

namespace flashtile::codegen::sm80 {

inline constexpr const char *kIsa = "sm80";
/// mma.sync.m16n8k16: warp tiles of 16 rows, k steps of 16, n tiles of 8.
inline constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;

/// The instruction each tile op lowers to (recorded as `tile.inst` for readers of the IR).
inline constexpr const char *kMmaInst = "mma.sync.aligned.m16n8k16.row.col.f32";
inline constexpr const char *kCopyInst = "cp.async.cg.shared.global.16";
inline constexpr const char *kWaitInst = "cp.async.wait_group+bar.sync";
inline constexpr const char *kLoadInst = "ldmatrix.x4";
inline constexpr const char *kLoadTransposedInst = "ldmatrix.x4.trans";
inline constexpr const char *kSoftmaxInst = "ex2.approx.f32+shfl.bfly";

/// Architectures that run the sm80 family, with the per-block opt-in dynamic shared memory limit.
struct ArchLimits {
  const char *arch;
  int maxSmemBytes;
};
inline constexpr ArchLimits kArchs[] = {{"sm_80", 163 * 1024}, {"sm_90a", 227 * 1024}, {"sm_100a", 227 * 1024}};

} // namespace flashtile::codegen::sm80

#endif // FLASHTILE_CODEGEN_SM80_INSTRUCTIONSSM80_H
