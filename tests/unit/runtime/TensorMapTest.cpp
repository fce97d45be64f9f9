// TensorMapTest.cpp — TMA descriptor specs for attention tensors, checked without a GPU: the five-dimensional
// layout for BSHD and varlen tensors, and every rule cuTensorMapEncodeTiled would otherwise reject with a bare
// CUDA_ERROR_INVALID_VALUE. Encoding itself needs the driver: the GPU tests (tests/gpu/Sm90PrimitivesTest.cpp) do it.
#include "flashtile/runtime/TensorMap.h"

#include <gmock/gmock.h>

#include <cstdint>
#include <cstring>

using namespace flashtile;
using testing::HasSubstr;

namespace {

/// A fake, suitably aligned device address: specs are only checked, never dereferenced.
const void *deviceAddress(uintptr_t value = 0x7f0000000000) { return reinterpret_cast<const void *>(value); }

/// A contiguous BSHD tensor of (batch, seqlen, heads, headDim) with a tile of `boxRows` rows.
AttentionTileSpec bshd(int batch, int seqlen, int heads, int headDim, int boxRows) {
  AttentionTileSpec tile;
  tile.name = "k";
  tile.dtype = DType::BF16;
  tile.data = deviceAddress();
  tile.batch = batch;
  tile.seqlen = seqlen;
  tile.heads = heads;
  tile.headDim = headDim;
  tile.strides = {(long long)seqlen * heads * headDim, (long long)heads * headDim, headDim, 1};
  tile.boxRows = boxRows;
  return tile;
}

std::string errorOf(const AttentionTileSpec &tile) {
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  return spec.ok() ? std::string("(accepted)") : spec.status().message();
}

TEST(TensorMap, BshdTileIsFiveDimensionsOfSwizzleAtoms) {
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(bshd(2, 1000, 8, 128, 128));
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->rank, 5);
  EXPECT_EQ(spec->swizzle, TmaSwizzle::Bytes128);
  // {atom, seq, dim / atom, head, batch}, innermost first.
  EXPECT_EQ(spec->dims, (std::array<uint64_t, 5>{64, 1000, 2, 8, 2}));
  // Bytes: row = heads * D * 2, column block = 128, head = D * 2, batch = seqlen * heads * D * 2.
  EXPECT_EQ(spec->strides, (std::array<uint64_t, 4>{8 * 128 * 2, 128, 128 * 2, 1000ull * 8 * 128 * 2}));
  EXPECT_EQ(spec->box, (std::array<uint32_t, 5>{64, 128, 2, 1, 1}));
  EXPECT_EQ(tensorMapBoxBytes(*spec), 128u * 128 * 2);
  EXPECT_TRUE(validateTensorMapSpec(*spec).ok());
}

TEST(TensorMap, PartialHeadDimBoxAndF16) {
  AttentionTileSpec tile = bshd(1, 64, 1, 256, 64);
  tile.dtype = DType::F16;
  tile.boxHeadDim = 64;
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->dtype, DType::F16);
  EXPECT_EQ(spec->dims[2], 4u);
  EXPECT_EQ(spec->box, (std::array<uint32_t, 5>{64, 64, 1, 1, 1}));
  EXPECT_EQ(tensorMapBoxBytes(*spec), 64u * 64 * 2);
}

TEST(TensorMap, E4m3TilesAreBytes) {
  // e4m3 (docs/fp8.md): a 128-byte span holds 128 elements, strides are elements = bytes; 16-element strides.
  AttentionTileSpec tile = bshd(2, 1000, 8, 128, 192);
  tile.dtype = DType::E4M3;
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->dims, (std::array<uint64_t, 5>{128, 1000, 1, 8, 2}));
  EXPECT_EQ(spec->strides, (std::array<uint64_t, 4>{8 * 128, 128, 128, 1000ull * 8 * 128}));
  EXPECT_EQ(spec->box, (std::array<uint32_t, 5>{128, 192, 1, 1, 1}));
  EXPECT_EQ(tensorMapBoxBytes(*spec), 192u * 128);
  // Head dim 96: three 32-byte blocks.
  AttentionTileSpec narrow = bshd(1, 64, 2, 96, 64);
  narrow.dtype = DType::E4M3;
  narrow.swizzle = TmaSwizzle::Bytes32;
  spec = attentionTileMapSpec(narrow);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->box, (std::array<uint32_t, 5>{32, 64, 3, 1, 1}));
  AttentionTileSpec odd = bshd(1, 64, 2, 128, 64);
  odd.dtype = DType::E4M3;
  odd.strides[1] = 264;
  EXPECT_THAT(errorOf(odd), HasSubstr("seq stride 264 elements is not a multiple of 16 (16 bytes, as TMA needs)"));
}

TEST(TensorMap, VarlenIsBatchOneWithAnyBatchStride) {
  // Packed (total_q, heads, D): batch 1 and AttentionArgs' batch stride 0, which TMA would reject if it were used.
  AttentionTileSpec tile = bshd(1, 3000, 4, 64, 128);
  tile.strides[0] = 0;
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->dims[4], 1u);
  EXPECT_EQ(spec->strides[3] % 16, 0u);
  EXPECT_GT(spec->strides[3], 0u);
  EXPECT_TRUE(validateTensorMapSpec(*spec).ok());
}

TEST(TensorMap, PaddedAndHeadMajorStridesAreKept) {
  // BHSD (heads outside rows) with padded rows: strides are taken as given.
  AttentionTileSpec tile = bshd(2, 100, 3, 64, 64);
  tile.strides = {3 * 100 * 72, 72, 100 * 72, 1};
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->strides, (std::array<uint64_t, 4>{72 * 2, 128, 100 * 72 * 2, 3 * 100 * 72 * 2}));
}

TEST(TensorMap, NarrowerSwizzleForHeadDim96And32) {
  AttentionTileSpec tile = bshd(1, 64, 1, 96, 64);
  EXPECT_THAT(errorOf(tile), HasSubstr("head dim 96 is not a multiple of 64"));
  EXPECT_THAT(errorOf(tile), HasSubstr("use a narrower swizzle"));
  tile.swizzle = TmaSwizzle::Bytes64;
  StatusOr<TensorMapSpec> spec = attentionTileMapSpec(tile);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->dims[0], 32u);
  EXPECT_EQ(spec->dims[2], 3u);
  EXPECT_EQ(spec->box[0], 32u);
  AttentionTileSpec hd32 = bshd(1, 64, 1, 32, 64);
  hd32.swizzle = TmaSwizzle::Bytes64;
  EXPECT_TRUE(attentionTileMapSpec(hd32).ok());
}

// A launch plan names the span in bytes (its tensorMaps' third field); the runtime encodes the maps with that mode.
TEST(TensorMap, SwizzleModeOfALaunchPlansSpan) {
  for (TmaSwizzle swizzle : {TmaSwizzle::Bytes32, TmaSwizzle::Bytes64, TmaSwizzle::Bytes128}) {
    StatusOr<TmaSwizzle> back = tmaSwizzleOfBytes(tmaSwizzleBytes(swizzle));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, swizzle);
  }
  StatusOr<TmaSwizzle> bad = tmaSwizzleOfBytes(48);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("swizzle span 48 bytes: accepted 32, 64 or 128"));
}

TEST(TensorMap, RejectsBadTilesWithTheirNames) {
  AttentionTileSpec tile = bshd(2, 128, 4, 128, 128);
  AttentionTileSpec nullData = tile;
  nullData.data = nullptr;
  EXPECT_THAT(errorOf(nullData), HasSubstr("k: the data pointer is null"));

  AttentionTileSpec misaligned = tile;
  misaligned.data = deviceAddress(0x7f0000000008);
  EXPECT_THAT(errorOf(misaligned), HasSubstr("not 16-byte aligned"));

  AttentionTileSpec rowStride = tile;
  rowStride.strides[1] = 4 * 128 + 4; // 1032 bytes: not a multiple of 16
  EXPECT_THAT(errorOf(rowStride), HasSubstr("seq stride 516 elements is not a multiple of 8"));

  AttentionTileSpec headStride = tile;
  headStride.strides[2] = 132;
  EXPECT_THAT(errorOf(headStride), HasSubstr("head stride 132"));

  AttentionTileSpec broadcast = tile;
  broadcast.strides[0] = 0;
  EXPECT_THAT(errorOf(broadcast), HasSubstr("batch stride 0 must be positive"));

  AttentionTileSpec dimStride = tile;
  dimStride.strides[3] = 2;
  EXPECT_THAT(errorOf(dimStride), HasSubstr("dim stride is 2; it must be 1"));

  for (int rows : {0, 257}) {
    AttentionTileSpec box = tile;
    box.boxRows = rows;
    EXPECT_THAT(errorOf(box), HasSubstr("box rows " + std::to_string(rows) + " must be in [1, 256]"));
  }
  AttentionTileSpec boxHeadDim = tile;
  boxHeadDim.boxHeadDim = 96;
  EXPECT_THAT(errorOf(boxHeadDim), HasSubstr("box head dim 96 must be a multiple of 64"));
  boxHeadDim.boxHeadDim = 192;
  EXPECT_THAT(errorOf(boxHeadDim), HasSubstr("no larger than the head dim 128"));

  AttentionTileSpec empty = tile;
  empty.seqlen = 0;
  EXPECT_THAT(errorOf(empty), HasSubstr("must be positive"));
}

TEST(TensorMap, ValidatesRawSpecs) {
  TensorMapSpec spec;
  spec.address = deviceAddress();
  spec.rank = 2;
  spec.dims = {64, 100};
  spec.strides = {128};
  spec.box = {64, 64};
  EXPECT_TRUE(validateTensorMapSpec(spec).ok());

  auto error = [](TensorMapSpec s) {
    Status status = validateTensorMapSpec(s);
    return status.ok() ? std::string("(accepted)") : status.message();
  };
  TensorMapSpec rank = spec;
  rank.rank = 6;
  EXPECT_THAT(error(rank), HasSubstr("rank 6 is not supported; accepted: 1 to 5"));
  rank.rank = 0;
  EXPECT_THAT(error(rank), HasSubstr("rank 0"));

  TensorMapSpec wide = spec;
  wide.box[0] = 128; // 256 bytes
  EXPECT_THAT(error(wide), HasSubstr("256 bytes, more than the 128-byte swizzle span"));
  wide.swizzle = TmaSwizzle::Bytes64;
  wide.box[0] = 64;
  EXPECT_THAT(error(wide), HasSubstr("more than the 64-byte swizzle span (box[0] <= 32"));

  TensorMapSpec odd = spec;
  odd.box[0] = 12; // 24 bytes
  EXPECT_THAT(error(odd), HasSubstr("24 bytes; it must be a multiple of 16"));

  TensorMapSpec stride = spec;
  stride.strides[0] = 120;
  EXPECT_THAT(error(stride), HasSubstr("strides[0] = 120 bytes is not a multiple of 16"));
  stride.strides[0] = uint64_t(1) << 40;
  EXPECT_THAT(error(stride), HasSubstr("below 2^40"));

  TensorMapSpec dim = spec;
  dim.dims[1] = 0;
  EXPECT_THAT(error(dim), HasSubstr("dims[1] = 0 must be in [1, 2^32]"));
  dim.dims[1] = (uint64_t(1) << 32) + 1;
  EXPECT_THAT(error(dim), HasSubstr("dims[1]"));

  TensorMapSpec box = spec;
  box.box[1] = 300;
  EXPECT_THAT(error(box), HasSubstr("box[1] = 300 must be in [1, 256]"));

  TensorMapSpec null = spec;
  null.address = nullptr;
  EXPECT_THAT(error(null), HasSubstr("global address is null"));

  TensorMapSpec promotion = spec;
  promotion.l2Promotion = static_cast<CUtensorMapL2promotion>(9);
  EXPECT_THAT(error(promotion), HasSubstr("L2 promotion 9 is not one of none, 64, 128 or 256 bytes"));

  TensorMapSpec dtype = spec;
  dtype.dtype = static_cast<DType>(7);
  EXPECT_THAT(error(dtype), HasSubstr("dtype must be bf16, f16 or e4m3"));
}

TEST(TensorMap, EncodingValidatesBeforeTheDriver) {
  // The validation error comes back whether or not a driver is present: nothing reaches cuTensorMapEncodeTiled.
  AttentionTileSpec tile = bshd(1, 64, 1, 128, 300);
  StatusOr<CUtensorMap> map = encodeAttentionTileMap(tile);
  ASSERT_FALSE(map.ok());
  EXPECT_THAT(map.status().message(), HasSubstr("box rows 300"));
}

// A backward kernel with a load warp takes dO's descriptor too (O's shape, the call's dOStride, Q's boxes): checked
// before any reaches the driver, and named "do".
TEST(TensorMap, BackwardMapsCheckDOFirst) {
  BackwardArgs args;
  AttentionArgs &f = args.forward;
  f.dtype = DType::BF16;
  f.batch = 2;
  f.seqlenQ = f.seqlenK = 256;
  f.headsQ = f.headsKv = 4;
  f.headDim = f.headDimV = 128;
  f.q = f.k = f.v = deviceAddress();
  f.qStride = f.kStride = f.vStride = {256LL * 4 * 128, 4 * 128, 128, 1};
  args.dO = deviceAddress();
  args.dOStride = {256LL * 4 * 128, 4 * 128, 128, 2}; // not contiguous in the head dim
  StatusOr<BackwardTensorMaps> maps = backwardTensorMaps(args, 64, 128);
  ASSERT_FALSE(maps.ok());
  EXPECT_THAT(maps.status().message(), HasSubstr("do: the dim stride is 2"));
  args.dOStride[3] = 1;
  args.dO = nullptr;
  maps = backwardTensorMaps(args, 64, 128);
  ASSERT_FALSE(maps.ok());
  EXPECT_THAT(maps.status().message(), HasSubstr("do: the data pointer is null"));
}

TEST(TensorMap, ReplacingTheAddressValidatesIt) {
  CUtensorMap map{};
  const CUtensorMap before = map;
  Status null = replaceTensorMapAddress(map, nullptr);
  ASSERT_FALSE(null.ok());
  EXPECT_THAT(null.message(), HasSubstr("new global address is null"));
  Status misaligned = replaceTensorMapAddress(map, deviceAddress(0x7f0000000004));
  ASSERT_FALSE(misaligned.ok());
  EXPECT_THAT(misaligned.message(), HasSubstr("not 16-byte aligned"));
  EXPECT_EQ(std::memcmp(&map, &before, sizeof map), 0);
}

} // namespace
