// AttentionArgs.cpp — building and checking an attention call's arguments; nothing here touches the GPU.
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

using namespace flashtile;

namespace {

/// Kernels read Q/K/V and write O with 16-byte vector accesses.
constexpr size_t kTensorAlignmentBytes = 16;
constexpr size_t kLseAlignmentBytes = alignof(float);
/// A 16-byte vector holds 8 fp16/bf16 elements, so every non-unit stride must be a multiple of this.
constexpr long long kStrideMultipleElements = 8;
/// CUDA's limit on gridDim.y and gridDim.z, which carry the query head and the batch index.
constexpr int kMaxGridYZ = 65535;

constexpr std::array<std::string_view, 4> kStrideNames = {"batch", "seq", "head", "dim"};

std::string supportedHeadDimsText() {
  std::string text;
  for (size_t i = 0; i < kSupportedHeadDims.size(); ++i)
    text += (i ? ", " : "") + std::to_string(kSupportedHeadDims[i]);
  return text;
}

std::string pointerText(const void *pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

Status checkStrides(std::string_view name, const std::array<long long, 4> &stride) {
  std::string prefix = std::string(name) + "Stride";
  if (stride[3] != 1)
    return Status::error(prefix + "[3] (dim stride) is " + std::to_string(stride[3]) +
                         "; the last dimension must be contiguous (stride 1)");
  for (size_t i = 0; i < 3; ++i)
    if (stride[i] < 0 || stride[i] % kStrideMultipleElements != 0)
      return Status::error(prefix + "[" + std::to_string(i) + "] (" + std::string(kStrideNames[i]) + " stride) is " +
                           std::to_string(stride[i]) +
                           "; batch, seq and head strides must be non-negative multiples of " +
                           std::to_string(kStrideMultipleElements) + " elements (16-byte vector loads)");
  return Status();
}

Status checkAligned(std::string_view name, const void *pointer, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(pointer) % alignment == 0)
    return Status();
  return Status::error(std::string(name) + " (" + pointerText(pointer) + ") is not " + std::to_string(alignment) +
                       "-byte aligned");
}

Status checkAtLeast(std::string_view name, int value, int minimum) {
  if (value >= minimum)
    return Status();
  return Status::error(std::string(name) + " is " + std::to_string(value) +
                       "; it must be >= " + std::to_string(minimum));
}

} // namespace

std::string_view flashtile::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  }
  return "invalid";
}

AttentionArgs AttentionArgs::contiguous(DType dtype, const void *q, const void *k, const void *v, void *o, float *lse,
                                        int batch, int seqlenQ, int seqlenK, int headsQ, int headsKv, int headDim) {
  auto packed = [](long long seqlen, long long heads, long long dim) {
    return std::array<long long, 4>{seqlen * heads * dim, heads * dim, dim, 1};
  };
  AttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.o = o;
  args.lse = lse;
  args.dtype = dtype;
  args.batch = batch;
  args.seqlenQ = seqlenQ;
  args.seqlenK = seqlenK;
  args.headsQ = headsQ;
  args.headsKv = headsKv;
  args.headDim = headDim;
  args.headDimV = headDim;
  args.qStride = packed(seqlenQ, headsQ, headDim);
  args.kStride = packed(seqlenK, headsKv, headDim);
  args.vStride = packed(seqlenK, headsKv, headDim);
  args.oStride = packed(seqlenQ, headsQ, headDim);
  return args;
}

Status Runtime::validate(const AttentionArgs &args) {
  for (auto [name, pointer] : {std::pair<std::string_view, const void *>{"q", args.q},
                               {"k", args.k},
                               {"v", args.v},
                               {"o", args.o},
                               {"lse", args.lse}})
    if (!pointer)
      return Status::error(std::string(name) + " is null; q, k, v, o and lse must all be device pointers");
  if (dtypeName(args.dtype) == "invalid")
    return Status::error("dtype has value " + std::to_string(static_cast<int>(args.dtype)) +
                         "; accepted: DType::F16, DType::BF16");
  if (std::find(kSupportedHeadDims.begin(), kSupportedHeadDims.end(), args.headDim) == kSupportedHeadDims.end())
    return Status::error("headDim " + std::to_string(args.headDim) +
                         " is not supported; supported: " + supportedHeadDimsText());
  if (args.headDimV != args.headDim)
    return Status::error("headDimV is " + std::to_string(args.headDimV) + "; it must equal headDim (" +
                         std::to_string(args.headDim) + ") for now");
  for (auto [name, value, minimum] : {std::tuple<std::string_view, int, int>{"batch", args.batch, 1},
                                      {"seqlenQ", args.seqlenQ, 0},
                                      {"seqlenK", args.seqlenK, 0},
                                      {"headsQ", args.headsQ, 1},
                                      {"headsKv", args.headsKv, 1}})
    if (Status s = checkAtLeast(name, value, minimum); !s.ok())
      return s;
  if (args.headsQ % args.headsKv != 0)
    return Status::error("headsQ (" + std::to_string(args.headsQ) + ") must be a multiple of headsKv (" +
                         std::to_string(args.headsKv) + ")");
  for (auto [name, value] : {std::pair<std::string_view, int>{"batch", args.batch}, {"headsQ", args.headsQ}})
    if (value > kMaxGridYZ)
      return Status::error(std::string(name) + " is " + std::to_string(value) + "; at most " +
                           std::to_string(kMaxGridYZ) + " are supported (CUDA grid dimension limit)");
  for (auto [name, stride] : {std::pair<std::string_view, const std::array<long long, 4> &>{"q", args.qStride},
                              {"k", args.kStride},
                              {"v", args.vStride},
                              {"o", args.oStride}})
    if (Status s = checkStrides(name, stride); !s.ok())
      return s;
  for (auto [name, pointer] :
       {std::pair<std::string_view, const void *>{"q", args.q}, {"k", args.k}, {"v", args.v}, {"o", args.o}})
    if (Status s = checkAligned(name, pointer, kTensorAlignmentBytes); !s.ok())
      return s;
  if (Status s = checkAligned("lse", args.lse, kLseAlignmentBytes); !s.ok())
    return s;
  if (!std::isfinite(args.softmaxScale))
    return Status::error("softmaxScale is " + std::to_string(args.softmaxScale) +
                         "; it must be finite (0 selects 1/sqrt(headDim))");
  if (!isValidId(args.variant))
    return Status::error("variant '" + args.variant +
                         "' is not a variant id: \"none\", \"causal\", or an id of characters [A-Za-z0-9_.:#-]");
  if (args.variantParams.size() > FLASHTILE_MAX_VARIANT_PARAMS)
    return Status::error("variantParams has " + std::to_string(args.variantParams.size()) + " values; at most " +
                         std::to_string(FLASHTILE_MAX_VARIANT_PARAMS) +
                         " (FLASHTILE_MAX_VARIANT_PARAMS) are supported");
  return Status();
}
