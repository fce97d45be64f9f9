// ReferenceKernels.h — the reference kernels' parameter structs, shared by the host code and the NVRTC source.
//
// Each struct is written once, as a macro: the host gets the definition, the CUDA source gets the macro's text, so
// the two cannot disagree on the layout. Internal to flashtile_reference.
#ifndef FLASHTILE_TOOLS_REFERENCE_REFERENCEKERNELS_H
#define FLASHTILE_TOOLS_REFERENCE_REFERENCEKERNELS_H

#include <cstddef>
#include <string>

namespace flashtile::reference::detail {

#define FLASHTILE_REFERENCE_REF_PARAMS                                                                                 \
  struct RefParams {                                                                                                   \
    const unsigned short *q; /* B x Sq x Hq x D, dtype bits, strided */                                                \
    const unsigned short *k; /* B x Sk x Hkv x D */                                                                    \
    const unsigned short *v; /* B x Sk x Hkv x Dv */                                                                   \
    float *o;                /* B x Sq x Hq x Dv, fp32, packed */                                                      \
    float *lse;              /* B x Hq x Sq, fp32 */                                                                   \
    long long qStride[3];    /* batch, seq, head (elements); the dim stride is 1 */                                    \
    long long kStride[3];                                                                                              \
    long long vStride[3];                                                                                              \
    int batch;                                                                                                         \
    int headsQ;                                                                                                        \
    int headsKv;                                                                                                       \
    int seqlenQ;                                                                                                       \
    int seqlenK;                                                                                                       \
    int headDim;                                                                                                       \
    int headDimV;                                                                                                      \
    float scale;                                                                                                       \
    int causal; /* bottom-right aligned: query i sees keys j <= i + Sk - Sq */                                         \
    int lowp;   /* 1: round S, P and O to the dtype like a framework running in bf16/f16 */                            \
    int isBf16; /* 1: bf16, 0: f16 */                                                                                  \
  };

#define FLASHTILE_REFERENCE_FILL_PARAMS                                                                                \
  struct FillParams {                                                                                                  \
    unsigned short *dst; /* B x S x H x D, dtype bits, strided */                                                      \
    long long stride[3];                                                                                               \
    int batch;                                                                                                         \
    int seqlen;                                                                                                        \
    int heads;                                                                                                         \
    int headDim;                                                                                                       \
    unsigned long long seed;                                                                                           \
    int isBf16;                                                                                                        \
  };

FLASHTILE_REFERENCE_REF_PARAMS
FLASHTILE_REFERENCE_FILL_PARAMS

/// attention_reference needs a multiple of 32 threads (one warp per key in the score loop).
constexpr int kAttentionThreads = 128;
/// Dynamic shared memory of attention_reference: q row, one score per key, one float per warp for reductions.
constexpr size_t attentionSharedBytes(int headDim, int seqlenK) {
  return size_t(headDim + seqlenK + 32) * sizeof(float);
}
/// fill_normal's launch: a grid-stride loop over at most this many blocks.
constexpr int kFillThreads = 256;
constexpr int kFillMaxBlocks = 8192;

constexpr const char *kAttentionEntry = "attention_reference";
constexpr const char *kFillEntry = "fill_normal";
constexpr const char *kProgramName = "flashtile_gpu_reference.cu";

/// The CUDA source of fill_normal and attention_reference (self-contained, for NVRTC).
const std::string &referenceSource();

} // namespace flashtile::reference::detail

#endif // FLASHTILE_TOOLS_REFERENCE_REFERENCEKERNELS_H
