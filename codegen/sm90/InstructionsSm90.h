//===- InstructionsSm90.h - the SM90 instruction family, as data ----------===//
//
// What a lowering to the sm90 family (wgmma, TMA, mbarrier, setmaxnreg) needs to know without depending on the
// printer: the wgmma shape, the swizzle both TMA and wgmma use, the register and shared-memory budgets, and the
// instruction each tile op becomes. Header-only and MLIR-free: the printer and the device prelude share it.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM90_INSTRUCTIONSSM90_H
#define FLASHTILE_CODEGEN_SM90_INSTRUCTIONSSM90_H

namespace flashtile::codegen::sm90 {

inline constexpr const char *kIsa = "sm90";
/// The only architecture that runs the family: wgmma and setmaxnreg are sm_90a features (sm_100a dropped wgmma).
inline constexpr const char *kArch = "sm_90a";
/// The namespace the kernels of this family print the shared fragment primitives in (codegen/ptx/FragmentPrelude.h:
/// mma.sync, ldmatrix, cp.async, packing), beside the family's own `sm90`; the same name as sm100's, and not the sm80
/// family's, whose kernels print them as `sm80`. Not `sm90` itself: the two preludes both define smemAddress and the
/// 16-bit packs.
inline constexpr const char *kFragmentNamespace = "frag";

/// wgmma.mma_async m64nNk16 for 16-bit inputs: a warpgroup (4 warps) computes 64 rows; N is a multiple of 8 in
/// [8, 256]; one instruction reduces over 16.
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kWgmmaM = 64, kWgmmaK = 16, kWgmmaNStep = 8, kWgmmaMaxN = 256;

/// 128-byte swizzle: rows of 64 16-bit elements per column block, tiles 1024-byte aligned (README.md).
inline constexpr int kSwizzleBytes = 128, kSwizzleAtomBytes = 1024, kSwizzleColumns = 64;
/// The narrower span kernels whose head dims are not whole 64-column blocks use: rows of 32 16-bit elements per
/// column block (head dims 32 and 96). TMA and wgmma also know a 32-byte span (16 columns); no head dim the runtime
/// serves needs it.
inline constexpr int kNarrowSwizzleBytes = 64;

/// The swizzle span of a kernel's tiles — its TMA boxes, its wgmma descriptors and O staged in sQ — in bytes: the
/// widest span whose column blocks (span / 2 columns) tile both head dims, 128 at 64, 128, 192, 256 and 192/128, 64
/// at 32 and 96; 0 when no span of the family does. One span for Q, K and V: O staged in sQ keeps each warp's rows
/// where its Q rows were only when both are laid out with the same span.
constexpr int swizzleBytesFor(int headDim, int headDimV) {
  for (int span : {kSwizzleBytes, kNarrowSwizzleBytes})
    if (headDim % (span / 2) == 0 && headDimV % (span / 2) == 0)
      return span;
  return 0;
}

/// e4m3 (FP8, docs/fp8.md): wgmma.mma_async m64nNk32 reduces over 32 8-bit elements, both operands K-major. A swizzle
/// span holds as many 8-bit elements as it has bytes, so a k32 step of an 8-bit tile is 32 bytes, as a k16 step of a
/// 16-bit one: the descriptors are the same.
inline constexpr int kWgmmaKE4m3 = 32;
/// The span of an 8-bit tile whose rows are `rowBytes` bytes (a head dim of Q and K, or the blockN keys of a Vᵀ
/// tile): the widest of 128, 64 and 32 bytes that divides it; 0 when none does.
constexpr int swizzleBytesForRow(int rowBytes) {
  for (int span : {kSwizzleBytes, kNarrowSwizzleBytes, kNarrowSwizzleBytes / 2})
    if (rowBytes % span == 0)
      return span;
  return 0;
}

/// Dynamic shared memory one block may opt in to on sm_90 (227 KB), and the register file a block's warpgroups
/// share through setmaxnreg (counts are multiples of 8 in [24, 256]).
inline constexpr int kMaxSmemBytes = 227 * 1024;
inline constexpr int kRegisterFile = 64 * 1024;
inline constexpr int kMinRegisters = 24, kMaxRegisters = 256, kRegisterStep = 8;

/// The instruction each tile op lowers to (recorded as `tile.inst` for readers of the IR).
inline constexpr const char *kMmaSSInst = "wgmma.mma_async.sync.aligned.m64nNk16.f32 (A, B in shared memory)";
inline constexpr const char *kMmaRSInst = "wgmma.mma_async.sync.aligned.m64nNk16.f32 (A in registers)";
inline constexpr const char *kLoadInst = "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes";
inline constexpr const char *kStoreInst = "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group";
inline constexpr const char *kWaitInst = "mbarrier.try_wait.parity.shared::cta.b64";

} // namespace flashtile::codegen::sm90

#endif // FLASHTILE_CODEGEN_SM90_INSTRUCTIONSSM90_H
