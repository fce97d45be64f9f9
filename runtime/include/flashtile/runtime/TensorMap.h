// TensorMap.h — TMA descriptors (CUtensorMap) for attention tensors, built through the dlopen'd driver.
//
// An sm90 kernel loads its Q/K/V tiles and stores O with the Tensor Memory Accelerator; each tensor is described
// to TMA by a 128-byte, 64-byte-aligned CUtensorMap made on the host by cuTensorMapEncodeTiled and passed to the
// kernel as a `const __grid_constant__ sm90::TensorMap` parameter (codegen/sm90/PreludeSm90.h). Everything the
// driver would reject is checked here first, without a GPU, and named in the error: the driver only says
// CUDA_ERROR_INVALID_VALUE.
//
// The attention layout (attentionTileMapSpec): a tensor of (batch, seq, head, dim) with any 16-byte-multiple strides
// and a contiguous dim — BSHD, or varlen's packed (total, head, dim) as batch 1 — is described to TMA as five
// dimensions, innermost first: {swizzle atom (64 elements for 128-byte swizzle), seq, dim / atom, head, batch}.
// One box is `boxRows` rows x `boxHeadDim` columns of one (batch, head), and lands in shared memory as
// boxHeadDim / atom column blocks of boxRows x span bytes, swizzled: exactly the K-major (Q, K) and MN-major (V)
// operand layouts of wgmma (codegen/sm90/README.md). The kernel's coordinates for the tile at row r, column block
// c are {0, r, c, head, batch}; rows past seqlen are zero-filled on loads and dropped on stores.
#ifndef FLASHTILE_RUNTIME_TENSORMAP_H
#define FLASHTILE_RUNTIME_TENSORMAP_H

#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Status.h"

#include <cuda.h>

#include <array>
#include <cstdint>
#include <string>

namespace flashtile {

/// How TMA arranges a box's rows in shared memory: 16-byte chunks XOR-permuted within a span of this many bytes.
/// The inner box dimension must fit in the span (wgmma reads the same layouts).
enum class TmaSwizzle { Bytes32, Bytes64, Bytes128 };

/// The span of a swizzle mode in bytes (32, 64, 128).
int tmaSwizzleBytes(TmaSwizzle swizzle);
/// The swizzle mode of a span of `bytes` (32, 64 or 128), or an error naming the accepted spans.
StatusOr<TmaSwizzle> tmaSwizzleOfBytes(int bytes);

/// A tiled TMA descriptor in the driver's terms: dimension 0 is the innermost (contiguous) one.
struct TensorMapSpec {
  DType dtype = DType::BF16;
  const void *address = nullptr;     // device address of element (0, ..., 0); 16-byte aligned
  int rank = 0;                      // 1..5
  std::array<uint64_t, 5> dims{};    // elements per dimension, 1..2^32
  std::array<uint64_t, 4> strides{}; // bytes between consecutive indices of dimensions 1..rank-1
  std::array<uint32_t, 5> box{};     // elements per dimension of one copy, 1..256
  TmaSwizzle swizzle = TmaSwizzle::Bytes128;
  CUtensorMapL2promotion l2Promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
};

/// Checks a spec against cuTensorMapEncodeTiled's rules (rank, alignment, extents, strides, box sizes, the
/// swizzle span); the message names the field and the accepted values. Needs no GPU.
Status validateTensorMapSpec(const TensorMapSpec &spec);

/// Bytes one box copies (what a load's mbarrier must expect).
uint32_t tensorMapBoxBytes(const TensorMapSpec &spec);

/// One attention tensor (Q, K, V or O) and the tile one TMA copy moves.
struct AttentionTileSpec {
  const char *name = "tensor"; // for messages: "q", "k", "v", "o"
  DType dtype = DType::BF16;
  const void *data = nullptr;
  int batch = 0;  // varlen: 1
  int seqlen = 0; // rows per batch entry; varlen: the total rows of the packed tensor
  int heads = 0;
  int headDim = 0; // a multiple of the swizzle atom (64 elements for 128-byte swizzle)
  /// Strides in elements, ordered {batch, seq, head, dim} as in AttentionArgs; dim must be 1, the others
  /// non-negative multiples of 8 elements (16 bytes). A dimension of extent 1 may have any stride (varlen's 0).
  std::array<long long, 4> strides{};
  int boxRows = 0;    // rows per tile, 1..256
  int boxHeadDim = 0; // columns per tile, a multiple of the atom up to headDim; 0: the whole head dim
  TmaSwizzle swizzle = TmaSwizzle::Bytes128;
};

/// The five-dimensional spec described at the top of this file, or an error naming `name` and the field.
StatusOr<TensorMapSpec> attentionTileMapSpec(const AttentionTileSpec &tile);

/// Validates `spec` and encodes it with the driver's cuTensorMapEncodeTiled (libcuda is loaded on first use; no
/// context is needed). The result is 64-byte aligned: pass it to cuLaunchKernel like any by-value parameter.
StatusOr<CUtensorMap> encodeTensorMap(const TensorMapSpec &spec);

/// attentionTileMapSpec + encodeTensorMap.
StatusOr<CUtensorMap> encodeAttentionTileMap(const AttentionTileSpec &tile);

/// The TMA descriptors of an sm90 attention kernel (PlanLaunch::tensorMaps): its second kernel parameter, laid out
/// as the device's `sm90::TensorMaps` (codegen/sm90/PreludeSm90.h).
struct AttentionTensorMaps {
  CUtensorMap q, k, v;
};

/// Encodes Q, K and V of `args` with boxes of `blockM` (Q) and `blockN` (K, V) rows x the whole head dim, swizzled
/// over `swizzle` (the kernel's span: its launch plan's tensorMaps); dense tensors as (batch, seq, head, dim), varlen
/// ones as batch 1 over the packed rows. With no keys (seqlenK 0) K and V are never read, and their descriptors are
/// left zero.
StatusOr<AttentionTensorMaps> attentionTensorMaps(const AttentionArgs &args, int blockM, int blockN,
                                                  TmaSwizzle swizzle = TmaSwizzle::Bytes128);

/// The TMA descriptors of an sm90 backward main kernel with a load warp (its plan's tensor maps q, k, v, do): its
/// second parameter, laid out as the device's `sm90::BackwardTensorMaps` (codegen/sm90/BackwardSm90.cpp).
struct BackwardTensorMaps {
  CUtensorMap q, k, v, dO;
};

/// Encodes the forward call's Q, K and V of `args` as attentionTensorMaps does, and dO (O's shape, dOStride) with
/// Q's boxes of `blockM` rows.
StatusOr<BackwardTensorMaps> backwardTensorMaps(const BackwardArgs &args, int blockM, int blockN,
                                                TmaSwizzle swizzle = TmaSwizzle::Bytes128);

/// Points an encoded map at another tensor of the same shape and strides (cuTensorMapReplaceAddress): a cached
/// descriptor reused for a new call's pointer. `address` must be non-null and 16-byte aligned; `map` is unchanged
/// on error.
Status replaceTensorMapAddress(CUtensorMap &map, const void *address);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_TENSORMAP_H
