/* KernelAbi.h — the one struct every generated attention-forward kernel takes by value.
 *
 * This header is shared verbatim by the host runtime and by the generated CUDA (codegen embeds its text at build
 * time), so it must compile both as host C++ and under NVRTC: no includes, fixed-width types only.
 * Strides are in elements. Layout of Q/K/V/O is B x S x H x D (flash_attn_func); the last dim is contiguous.
 * LSE is fp32, B x Hq x Sq, contiguous.
 */
#ifndef FLASHTILE_RUNTIME_KERNELABI_H
#define FLASHTILE_RUNTIME_KERNELABI_H

#define FLASHTILE_MAX_VARIANT_PARAMS 8

struct FlashtileFwdParams {
  const void *q;
  const void *k;
  const void *v;
  void *o;
  float *lse;
  long long qBatchStride, qRowStride, qHeadStride;
  long long kBatchStride, kRowStride, kHeadStride;
  long long vBatchStride, vRowStride, vHeadStride;
  long long oBatchStride, oRowStride, oHeadStride;
  int batch;
  int headsQ;
  int headsKv; /* headsQ % headsKv == 0; query head h reads K/V head h / (headsQ / headsKv) */
  int seqlenQ;
  int seqlenK;
  float softmaxScale;
  float scaleLog2; /* softmaxScale * log2(e): scores are exponentiated with exp2 */
  float variantParams[FLASHTILE_MAX_VARIANT_PARAMS]; /* a variant's numbers, in declaration order */
};

#endif /* FLASHTILE_RUNTIME_KERNELABI_H */
