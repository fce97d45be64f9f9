// TensorMap.cpp — validation of TMA descriptor specs, the attention tile layout, and encoding through the driver.
#include "flashtile/runtime/TensorMap.h"

#include "flashtile/runtime/CudaDriver.h"

#include <algorithm>

using namespace flashtile;

namespace {

constexpr int kMaxRank = 5;
constexpr uint64_t kMaxDim = uint64_t(1) << 32;
constexpr uint64_t kMaxStride = uint64_t(1) << 40;
constexpr uint32_t kMaxBox = 256;
constexpr uint64_t kGlobalAlignment = 16; // bytes: address and strides
// The prelude's sm90::TensorMap, the kernel-side view of the descriptor, is 128 bytes, 64-byte aligned (the
// driver's requirement; CUDA 13's header aligns CUtensorMap to 128, which satisfies it).
static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) >= 64, "CUtensorMap: 128 bytes, 64-byte aligned");

std::string str(uint64_t value) { return std::to_string(value); }

CUtensorMapDataType driverType(DType dtype) {
  // e4m3 tiles are bytes to TMA (no conversion happens on the way).
  return dtype == DType::E4M3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
         : dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

bool mappedDtype(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::E4M3; }

CUtensorMapSwizzle driverSwizzle(TmaSwizzle swizzle) {
  switch (swizzle) {
  case TmaSwizzle::Bytes32:
    return CU_TENSOR_MAP_SWIZZLE_32B;
  case TmaSwizzle::Bytes64:
    return CU_TENSOR_MAP_SWIZZLE_64B;
  case TmaSwizzle::Bytes128:
    return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_128B;
}

bool validSwizzle(TmaSwizzle swizzle) {
  return swizzle == TmaSwizzle::Bytes32 || swizzle == TmaSwizzle::Bytes64 || swizzle == TmaSwizzle::Bytes128;
}

} // namespace

int flashtile::tmaSwizzleBytes(TmaSwizzle swizzle) {
  switch (swizzle) {
  case TmaSwizzle::Bytes32:
    return 32;
  case TmaSwizzle::Bytes64:
    return 64;
  case TmaSwizzle::Bytes128:
    return 128;
  }
  return 0;
}

StatusOr<TmaSwizzle> flashtile::tmaSwizzleOfBytes(int bytes) {
  for (TmaSwizzle swizzle : {TmaSwizzle::Bytes32, TmaSwizzle::Bytes64, TmaSwizzle::Bytes128})
    if (tmaSwizzleBytes(swizzle) == bytes)
      return swizzle;
  return Status::error("swizzle span " + std::to_string(bytes) + " bytes: accepted 32, 64 or 128");
}

Status flashtile::validateTensorMapSpec(const TensorMapSpec &spec) {
  const std::string prefix = "tensor map: ";
  if (!mappedDtype(spec.dtype))
    return Status::error(prefix + "dtype must be bf16, f16 or e4m3");
  const int elementBytes = dtypeBytes(spec.dtype);
  if (spec.rank < 1 || spec.rank > kMaxRank)
    return Status::error(prefix + "rank " + std::to_string(spec.rank) + " is not supported; accepted: 1 to 5");
  if (!spec.address)
    return Status::error(prefix + "the global address is null");
  if (reinterpret_cast<uintptr_t>(spec.address) % kGlobalAlignment != 0)
    return Status::error(prefix + "the global address " + str(reinterpret_cast<uintptr_t>(spec.address)) +
                         " is not 16-byte aligned (TMA needs 16-byte-aligned tensors)");
  if (!validSwizzle(spec.swizzle))
    return Status::error(prefix + "swizzle must be 32, 64 or 128 bytes");
  if (spec.l2Promotion < CU_TENSOR_MAP_L2_PROMOTION_NONE || spec.l2Promotion > CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
    return Status::error(prefix + "L2 promotion " + std::to_string(int(spec.l2Promotion)) +
                         " is not one of none, 64, 128 or 256 bytes");
  for (int i = 0; i < spec.rank; ++i) {
    const std::string dim = "dims[" + std::to_string(i) + "]";
    if (spec.dims[i] == 0 || spec.dims[i] > kMaxDim)
      return Status::error(prefix + dim + " = " + str(spec.dims[i]) + " must be in [1, 2^32]");
    if (spec.box[i] == 0 || spec.box[i] > kMaxBox)
      return Status::error(prefix + "box[" + std::to_string(i) + "] = " + str(spec.box[i]) +
                           " must be in [1, 256] elements");
  }
  for (int i = 0; i + 1 < spec.rank; ++i) {
    const std::string stride = "strides[" + std::to_string(i) + "]";
    if (spec.strides[i] % kGlobalAlignment != 0)
      return Status::error(prefix + stride + " = " + str(spec.strides[i]) +
                           " bytes is not a multiple of 16 (TMA needs 16-byte-aligned rows)");
    if (spec.strides[i] >= kMaxStride)
      return Status::error(prefix + stride + " = " + str(spec.strides[i]) + " bytes must be below 2^40");
  }
  const uint64_t innerBytes = uint64_t(spec.box[0]) * elementBytes;
  if (innerBytes % kGlobalAlignment != 0)
    return Status::error(prefix + "the inner box dimension is " + str(innerBytes) +
                         " bytes; it must be a multiple of 16 bytes");
  const int span = tmaSwizzleBytes(spec.swizzle);
  if (innerBytes > uint64_t(span))
    return Status::error(prefix + "the inner box dimension is " + str(innerBytes) + " bytes, more than the " +
                         std::to_string(span) +
                         "-byte swizzle span (box[0] <= " + std::to_string(span / elementBytes) + " " +
                         std::to_string(8 * elementBytes) + "-bit elements)");
  return Status();
}

uint32_t flashtile::tensorMapBoxBytes(const TensorMapSpec &spec) {
  uint64_t bytes = dtypeBytes(spec.dtype);
  for (int i = 0; i < std::clamp(spec.rank, 0, kMaxRank); ++i)
    bytes *= spec.box[i];
  return uint32_t(bytes);
}

StatusOr<TensorMapSpec> flashtile::attentionTileMapSpec(const AttentionTileSpec &tile) {
  const std::string name = tile.name && *tile.name ? tile.name : "tensor";
  auto fail = [&](const std::string &message) { return Status::error(name + ": " + message); };
  if (!mappedDtype(tile.dtype))
    return fail("dtype must be bf16, f16 or e4m3");
  const int elementBytes = dtypeBytes(tile.dtype);
  if (!validSwizzle(tile.swizzle))
    return fail("swizzle must be 32, 64 or 128 bytes");
  if (!tile.data)
    return fail("the data pointer is null");
  if (tile.batch < 1 || tile.seqlen < 1 || tile.heads < 1)
    return fail("batch, seqlen and heads must be positive (got " + std::to_string(tile.batch) + ", " +
                std::to_string(tile.seqlen) + ", " + std::to_string(tile.heads) +
                "); a call with no rows has nothing to load");
  const int atom = tmaSwizzleBytes(tile.swizzle) / elementBytes;
  if (tile.headDim < atom || tile.headDim % atom != 0)
    return fail("head dim " + std::to_string(tile.headDim) + " is not a multiple of " + std::to_string(atom) +
                " (the " + std::to_string(atom * elementBytes) +
                "-byte swizzle atom); use a narrower swizzle for this head dim");
  const int boxHeadDim = tile.boxHeadDim == 0 ? tile.headDim : tile.boxHeadDim;
  if (boxHeadDim < atom || boxHeadDim % atom != 0 || boxHeadDim > tile.headDim)
    return fail("box head dim " + std::to_string(boxHeadDim) + " must be a multiple of " + std::to_string(atom) +
                " no larger than the head dim " + std::to_string(tile.headDim));
  if (tile.boxRows < 1 || tile.boxRows > int(kMaxBox))
    return fail("box rows " + std::to_string(tile.boxRows) + " must be in [1, 256]");
  if (tile.strides[3] != 1)
    return fail("the dim stride is " + std::to_string(tile.strides[3]) + "; it must be 1 (contiguous head dim)");
  const std::array<const char *, 3> strideNames = {"batch", "seq", "head"};
  const std::array<int, 3> extents = {tile.batch, tile.seqlen, tile.heads};
  for (int i = 0; i < 3; ++i) {
    const long long stride = tile.strides[i];
    if (extents[i] == 1)
      continue; // never stepped along: any value, varlen's 0 included
    if (stride <= 0)
      return fail(std::string(strideNames[i]) + " stride " + std::to_string(stride) +
                  " must be positive (TMA cannot describe broadcast or reversed dimensions)");
    if ((stride * elementBytes) % kGlobalAlignment != 0)
      return fail(std::string(strideNames[i]) + " stride " + std::to_string(stride) + " elements is not a multiple of " +
                  std::to_string(kGlobalAlignment / elementBytes) + " (16 bytes, as TMA needs)");
  }

  TensorMapSpec spec;
  spec.dtype = tile.dtype;
  spec.address = tile.data;
  spec.rank = 5;
  spec.swizzle = tile.swizzle;
  spec.dims = {uint64_t(atom), uint64_t(tile.seqlen), uint64_t(tile.headDim / atom), uint64_t(tile.heads),
               uint64_t(tile.batch)};
  auto bytes = [elementBytes](long long elements) { return uint64_t(elements) * elementBytes; };
  // An extent-1 dimension is never stepped along, but the driver still checks its stride: give it the row
  // stride, which the check above made valid when seqlen > 1, or one atom row otherwise.
  const uint64_t rowBytes = tile.seqlen > 1 ? bytes(tile.strides[1]) : uint64_t(atom) * elementBytes;
  spec.strides = {rowBytes, uint64_t(atom) * elementBytes, tile.heads > 1 ? bytes(tile.strides[2]) : rowBytes,
                  tile.batch > 1 ? bytes(tile.strides[0]) : rowBytes};
  spec.box = {uint32_t(atom), uint32_t(tile.boxRows), uint32_t(boxHeadDim / atom), 1, 1};
  if (Status s = validateTensorMapSpec(spec); !s.ok())
    return fail(s.message());
  return spec;
}

StatusOr<CUtensorMap> flashtile::encodeTensorMap(const TensorMapSpec &spec) {
  if (Status s = validateTensorMapSpec(spec); !s.ok())
    return s;
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 4> strides{};
  std::array<cuuint32_t, 5> box{};
  std::array<cuuint32_t, 5> elementStrides{};
  for (int i = 0; i < spec.rank; ++i) {
    dims[i] = spec.dims[i];
    box[i] = spec.box[i];
    elementStrides[i] = 1;
    if (i + 1 < spec.rank)
      strides[i] = spec.strides[i];
  }
  CUtensorMap map{};
  const CUresult result = (*driver)->cuTensorMapEncodeTiled(
      &map, driverType(spec.dtype), cuuint32_t(spec.rank), const_cast<void *>(spec.address), dims.data(),
      strides.data(), box.data(), elementStrides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, driverSwizzle(spec.swizzle),
      spec.l2Promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (Status s = (*driver)->check(result, "cuTensorMapEncodeTiled"); !s.ok())
    return s;
  return map;
}

StatusOr<CUtensorMap> flashtile::encodeAttentionTileMap(const AttentionTileSpec &tile) {
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  if (!spec.ok())
    return spec.status();
  StatusOr<CUtensorMap> map = encodeTensorMap(*spec);
  if (!map.ok())
    return map.status().withContext(tile.name && *tile.name ? tile.name : "tensor");
  return map;
}

Status flashtile::replaceTensorMapAddress(CUtensorMap &map, const void *address) {
  if (!address)
    return Status::error("tensor map: the new global address is null");
  if (reinterpret_cast<uintptr_t>(address) % kGlobalAlignment != 0)
    return Status::error("tensor map: the new global address " + str(reinterpret_cast<uintptr_t>(address)) +
                         " is not 16-byte aligned (TMA needs 16-byte-aligned tensors)");
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  return (*driver)->check((*driver)->cuTensorMapReplaceAddress(&map, const_cast<void *>(address)),
                          "cuTensorMapReplaceAddress");
}

namespace {
/// One tensor of a call (dense: (batch, seq, head, dim); varlen: batch 1 over the packed rows) in boxes of `rows`.
AttentionTileSpec callTile(const AttentionArgs &args, TmaSwizzle swizzle, const char *name, const void *data,
                           int seqlen, int heads, int headDim, const std::array<long long, 4> &strides, int rows) {
  const bool varlen = args.isVarlen();
  AttentionTileSpec spec;
  spec.name = name;
  spec.dtype = args.dtype;
  spec.data = data;
  spec.batch = varlen ? 1 : args.batch;
  spec.seqlen = seqlen;
  spec.heads = heads;
  spec.headDim = headDim;
  spec.strides = strides;
  if (varlen)
    spec.strides[0] = 0;
  spec.boxRows = rows;
  spec.swizzle = swizzle;
  return spec;
}
} // namespace

StatusOr<AttentionTensorMaps> flashtile::attentionTensorMaps(const AttentionArgs &args, int blockM, int blockN,
                                                             TmaSwizzle swizzle) {
  auto tile = [&](const char *name, const void *data, int seqlen, int heads, int headDim,
                  const std::array<long long, 4> &strides, int rows) {
    return encodeAttentionTileMap(callTile(args, swizzle, name, data, seqlen, heads, headDim, strides, rows));
  };
  AttentionTensorMaps maps{};
  StatusOr<CUtensorMap> q = tile("q", args.q, args.seqlenQ, args.headsQ, args.headDim, args.qStride, blockM);
  if (!q.ok())
    return q.status();
  maps.q = *q;
  if (args.seqlenK == 0)
    return maps;
  StatusOr<CUtensorMap> k = tile("k", args.k, args.seqlenK, args.headsKv, args.headDim, args.kStride, blockN);
  if (!k.ok())
    return k.status();
  StatusOr<CUtensorMap> v = tile("v", args.v, args.seqlenK, args.headsKv, args.headDimV, args.vStride, blockN);
  if (!v.ok())
    return v.status();
  maps.k = *k;
  maps.v = *v;
  return maps;
}

StatusOr<BackwardTensorMaps> flashtile::backwardTensorMaps(const BackwardArgs &args, int blockM, int blockN,
                                                           TmaSwizzle swizzle) {
  const AttentionArgs &f = args.forward;
  // dO's tile is checked first, so that what the driver would reject is named without one.
  const AttentionTileSpec dOTile =
      callTile(f, swizzle, "do", args.dO, f.seqlenQ, f.headsQ, f.headDimV, args.dOStride, blockM);
  if (StatusOr<TensorMapSpec> spec = attentionTileMapSpec(dOTile); !spec.ok())
    return spec.status();
  StatusOr<AttentionTensorMaps> qkv = attentionTensorMaps(f, blockM, blockN, swizzle);
  if (!qkv.ok())
    return qkv.status();
  StatusOr<CUtensorMap> dO = encodeAttentionTileMap(dOTile);
  if (!dO.ok())
    return dO.status();
  return BackwardTensorMaps{qkv->q, qkv->k, qkv->v, *dO};
}
