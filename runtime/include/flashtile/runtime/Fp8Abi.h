/* Fp8Abi.h — the last kernel parameter of e4m3 (FP8) modules (KernelInfo::dtype "e4m3", docs/fp8.md).
 *
 * Shared verbatim by the host runtime and the generated CUDA (codegen embeds its text), so host C++ and NVRTC both
 * compile it: no includes. Every kernel of an e4m3 module takes it by value as its last parameter (after the TMA
 * descriptors where the kernel takes them); kernels of other dtypes do not, and their CUDA does not mention it, so
 * FlashtileFwdParams (KernelAbi.h) and the text of bf16/f16 kernels are unchanged by FP8.
 */
#ifndef FLASHTILE_RUNTIME_FP8ABI_H
#define FLASHTILE_RUNTIME_FP8ABI_H

struct FlashtileFp8Params {
  /* flash-attn 3's descales: each null (= 1) or batch x headsKv contiguous fp32 values, indexed [b * headsKv + hKv]
   * by the sequence and the query head's K/V head. qDescale * kDescale joins the softmax scale of that (batch, K/V
   * head); vDescale multiplies O when it is finalized. */
  const float *qDescale;
  const float *kDescale;
  const float *vDescale;
  /* Vᵀ as the launch plan's first kernel (`<entry>_vt`) writes it for the attention kernel, a workspace: per key tile
   * of blockN keys, per K/V head, the shared-memory image of the tile's Vᵀ (headDimV rows of blockN keys, the keys of
   * each 32-key group permuted so that P·V's A operand is P's accumulator in place, keys past the sequence zero),
   * headDimV x blockN bytes. Sequence b's key tile j is image (keyOffset_b / blockN + b + j) * headsKv + hKv, where
   * keyOffset_b is b * seqlenK (dense) or cuSeqlensK[b] (varlen). */
  void *vTransposed;
};

#endif /* FLASHTILE_RUNTIME_FP8ABI_H */
