// AttentionArgs.cpp — building and checking an attention call's arguments; nothing here touches the GPU.
#include "flashtile/runtime/Excerpt.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"
#include "Fp8Internal.h"
#include "KvCacheInternal.h"
#include "PositionsInternal.h"
#include "SplitKvInternal.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

using namespace flashtile;

namespace {

/// Kernels read Q/K/V and write O with 16-byte vector accesses.
constexpr size_t kTensorAlignmentBytes = 16;
constexpr size_t kLseAlignmentBytes = alignof(float);
constexpr size_t kCuSeqlensAlignmentBytes = alignof(int);
/// A 16-byte vector holds 8 fp16/bf16 elements, so every non-unit stride must be a multiple of this.
constexpr long long kStrideMultipleElements = 8;
/// CUDA's limit on gridDim.y and gridDim.z, which carry the query head and the batch index.
constexpr int kMaxGridYZ = 65535;

constexpr std::array<std::string_view, 4> kStrideNames = {"batch", "seq", "head", "dim"};

std::string pointerText(const void *pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

/// `varlen`: the batch stride is ignored, so any value is accepted.
Status checkStrides(std::string_view name, const std::array<long long, 4> &stride, bool varlen) {
  std::string prefix = std::string(name) + "Stride";
  if (stride[3] != 1)
    return Status::error(prefix + "[3] (dim stride) is " + std::to_string(stride[3]) +
                         "; the last dimension must be contiguous (stride 1)");
  for (size_t i = varlen ? 1 : 0; i < 3; ++i)
    if (stride[i] < 0 || stride[i] % kStrideMultipleElements != 0)
      return Status::error(prefix + "[" + std::to_string(i) + "] (" + std::string(kStrideNames[i]) + " stride) is " +
                           std::to_string(stride[i]) +
                           "; batch, seq and head strides must be non-negative multiples of " +
                           std::to_string(kStrideMultipleElements) + " elements (16-byte vector loads)");
  return Status();
}

/// Q, K, V, O and their gradients hold fp16 or bf16 elements.
constexpr long long kElementBytes = 2;

/// A tensor's extents, ordered as its strides {batch, seq, head, dim}.
using Extents = std::array<long long, 4>;

/// Whether every element of tensor `name` lies within a 64-bit byte offset of its pointer: stride x (extent - 1) x
/// element size, summed over the dimensions, must fit in int64 (the kernels and the driver compute addresses in 64
/// bits; a sum that wraps would address memory outside the tensor). An empty tensor addresses nothing.
Status checkByteReach(std::string_view name, const std::array<long long, 4> &stride, const Extents &extent) {
  if (std::any_of(extent.begin(), extent.end(), [](long long e) { return e <= 0; }))
    return Status();
  long long reach = 0;
  for (size_t i = 0; i < 4; ++i) {
    long long term = 0;
    if (__builtin_mul_overflow(stride[i], extent[i] - 1, &term) || __builtin_mul_overflow(term, kElementBytes, &term) ||
        __builtin_add_overflow(reach, term, &reach))
      return Status::error(std::string(name) + "Stride[" + std::to_string(i) + "] (" + std::string(kStrideNames[i]) +
                           " stride) is " + std::to_string(stride[i]) + " over " + std::to_string(extent[i]) +
                           " entries: the byte offset of " + std::string(name) +
                           "'s last element (stride x (extent - 1) x " + std::to_string(kElementBytes) +
                           " bytes, summed over batch, seq, head and dim) does not fit in a signed 64-bit integer; " +
                           "pass strides of a tensor that exists");
  }
  return Status();
}

/// The forward's tensors: Q and O as given, K and V as the call reads them (a contiguous KV cache has cacheBatch
/// rows, a paged one numPages pages of pageSize keys), and a KV-cache call's new keys and values. A varlen call's
/// batch stride is ignored (one batch entry).
Status checkForwardByteReach(const AttentionArgs &args) {
  const long long batch = args.isVarlen() ? 1 : args.batch;
  const KvCacheArgs &c = args.kvCache;
  long long kvBatch = batch, kvRows = args.seqlenK;
  if (c.layout == KvCacheLayout::Contiguous) {
    kvBatch = c.cacheBatch;
  } else if (c.layout == KvCacheLayout::Paged) {
    kvBatch = c.numPages;
    kvRows = c.pageSize;
  }
  const std::array<std::tuple<std::string_view, const std::array<long long, 4> &, Extents>, 4> tensors = {{
      {"q", args.qStride, {batch, args.seqlenQ, args.headsQ, args.headDim}},
      {"k", args.kStride, {kvBatch, kvRows, args.headsKv, args.headDim}},
      {"v", args.vStride, {kvBatch, kvRows, args.headsKv, args.headDimV}},
      {"o", args.oStride, {batch, args.seqlenQ, args.headsQ, args.headDimV}},
  }};
  for (const auto &[name, stride, extent] : tensors)
    if (Status s = checkByteReach(name, stride, extent); !s.ok())
      return s;
  if (c.enabled() && c.kNew)
    for (auto [name, stride, headDim] : {std::tuple<std::string_view, const std::array<long long, 4> &, int>{
                                             "kvCache.kNew", c.kNewStride, args.headDim},
                                         {"kvCache.vNew", c.vNewStride, args.headDimV}})
      if (Status s = checkByteReach(name, stride, {args.batch, c.seqlenNew, args.headsKv, headDim}); !s.ok())
        return s;
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

/// One sequence-offset array: offsets[0..batch] non-decreasing, inside [0, total], lengths at most maxSeqlen.
Status checkOffsets(std::string_view name, const int *offsets, int batch, std::string_view totalName, int total,
                    std::string_view maxName, int maxSeqlen) {
  auto at = [&](int b) { return std::string(name) + "[" + std::to_string(b) + "] = " + std::to_string(offsets[b]); };
  if (offsets[0] < 0)
    return Status::error(at(0) + "; offsets must be >= 0");
  for (int b = 0; b < batch; ++b) {
    if (offsets[b + 1] < offsets[b])
      return Status::error(std::string(name) + " is not non-decreasing: " + at(b + 1) + " < " + at(b));
    if (offsets[b + 1] - offsets[b] > maxSeqlen)
      return Status::error(std::string(name) + ": sequence " + std::to_string(b) + " has " +
                           std::to_string(offsets[b + 1] - offsets[b]) + " rows, more than " + std::string(maxName) +
                           " = " + std::to_string(maxSeqlen));
  }
  if (offsets[batch] > total)
    return Status::error(at(batch) + " is past the packed rows: " + std::string(totalName) + " (the total) is " +
                         std::to_string(total));
  return Status();
}

/// The varlen arguments (cuSeqlensQ and friends); defined after Runtime::validate.
Status checkVarlen(const AttentionArgs &args);

} // namespace

bool flashtile::supportsHeadDims(int headDim, int headDimV) {
  if (headDimV == headDim)
    return std::find(kSupportedHeadDims.begin(), kSupportedHeadDims.end(), headDim) != kSupportedHeadDims.end();
  return std::find(kSupportedHeadDimPairs.begin(), kSupportedHeadDimPairs.end(), std::pair{headDim, headDimV}) !=
         kSupportedHeadDimPairs.end();
}

std::string flashtile::supportedHeadDimsText() {
  std::string text;
  for (size_t i = 0; i < kSupportedHeadDims.size(); ++i)
    text += (i ? ", " : "") + std::to_string(kSupportedHeadDims[i]);
  text += " (headDimV = headDim)";
  for (size_t i = 0; i < kSupportedHeadDimPairs.size(); ++i)
    text += (i ? ", " : ", or ") + std::to_string(kSupportedHeadDimPairs[i].first) + "/" +
            std::to_string(kSupportedHeadDimPairs[i].second);
  return text + (kSupportedHeadDimPairs.empty() ? "" : " (headDim/headDimV)");
}

std::string_view flashtile::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::E4M3:
    return "e4m3";
  }
  return "invalid";
}

int flashtile::dtypeBytes(DType dtype) { return dtype == DType::E4M3 ? 1 : 2; }

DType flashtile::outputDtype(DType dtype) { return dtype == DType::E4M3 ? DType::BF16 : dtype; }

float AttentionArgs::effectiveScale() const {
  return softmaxScale != 0.f ? softmaxScale : 1.f / std::sqrt(static_cast<float>(headDim));
}

AttentionArgs AttentionArgs::contiguous(DType dtype, const void *q, const void *k, const void *v, void *o, float *lse,
                                        int batch, int seqlenQ, int seqlenK, int headsQ, int headsKv, int headDim,
                                        int headDimV) {
  if (headDimV == 0)
    headDimV = headDim;
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
  args.headDimV = headDimV;
  args.qStride = packed(seqlenQ, headsQ, headDim);
  args.kStride = packed(seqlenK, headsKv, headDim);
  args.vStride = packed(seqlenK, headsKv, headDimV);
  args.oStride = packed(seqlenQ, headsQ, headDimV);
  return args;
}

AttentionArgs AttentionArgs::varlen(DType dtype, const void *q, const void *k, const void *v, void *o, float *lse,
                                    const int *cuSeqlensQ, const int *cuSeqlensK, int batch, int totalQ, int totalK,
                                    int maxSeqlenQ, int maxSeqlenK, int headsQ, int headsKv, int headDim,
                                    int headDimV) {
  // Packed sequences are one batch entry of totalQ (totalK) rows; the batch strides are ignored.
  AttentionArgs args =
      contiguous(dtype, q, k, v, o, lse, /*batch=*/1, totalQ, totalK, headsQ, headsKv, headDim, headDimV);
  args.batch = batch;
  args.cuSeqlensQ = cuSeqlensQ;
  args.cuSeqlensK = cuSeqlensK;
  args.maxSeqlenQ = maxSeqlenQ;
  args.maxSeqlenK = maxSeqlenK;
  for (std::array<long long, 4> *stride : {&args.qStride, &args.kStride, &args.vStride, &args.oStride})
    (*stride)[0] = 0;
  return args;
}

Status Runtime::validate(const AttentionArgs &args) {
  // A call without query rows (dense seqlenQ = 0, or varlen total_q = 0: every sequence empty) reads and writes
  // nothing, and PyTorch hands such empty tensors over as null pointers. Likewise K and V without keys (dense
  // seqlenK = 0, or varlen total_k = 0): the kernels read no key and write O = 0 and LSE = -inf, as flash-attn.
  // KV-cache calls always read their caches.
  const bool keysRead = args.seqlenK != 0 || args.kvCache.enabled();
  if (args.seqlenQ != 0)
    for (auto [name, pointer, needed] : {std::tuple<std::string_view, const void *, bool>{"q", args.q, true},
                                         {"k", args.k, keysRead},
                                         {"v", args.v, keysRead},
                                         {"o", args.o, true},
                                         {"lse", args.lse, true}})
      if (needed && !pointer)
        return Status::error(std::string(name) + " is null; q, k, v, o and lse must all be device pointers (k and v " +
                             "may be null without keys: seqlenK = 0)");
  if (dtypeName(args.dtype) == "invalid")
    return Status::error("dtype has value " + std::to_string(static_cast<int>(args.dtype)) +
                         "; accepted: DType::F16, DType::BF16, DType::E4M3");
  if (std::find(kSupportedHeadDims.begin(), kSupportedHeadDims.end(), args.headDim) == kSupportedHeadDims.end())
    return Status::error("headDim " + std::to_string(args.headDim) +
                         " is not supported; supported: " + supportedHeadDimsText());
  if (!supportsHeadDims(args.headDim, args.headDimV))
    return Status::error("headDimV " + std::to_string(args.headDimV) + " with headDim " + std::to_string(args.headDim) +
                         " is not supported; supported: " + supportedHeadDimsText());
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
    if (Status s = checkStrides(name, stride, args.isVarlen()); !s.ok())
      return s;
  for (auto [name, pointer] :
       {std::pair<std::string_view, const void *>{"q", args.q}, {"k", args.k}, {"v", args.v}, {"o", args.o}})
    if (Status s = checkAligned(name, pointer, kTensorAlignmentBytes); !s.ok())
      return s;
  if (Status s = checkAligned("lse", args.lse, kLseAlignmentBytes); !s.ok())
    return s;
  if (Status s = checkVarlen(args); !s.ok())
    return s;
  if (!std::isfinite(args.softmaxScale))
    return Status::error("softmaxScale is " + std::to_string(args.softmaxScale) +
                         "; it must be finite (0 selects 1/sqrt(headDim))");
  if (!isValidId(args.variant))
    return Status::error("variant '" + excerpt(args.variant) +
                         "' is not a variant id: \"none\", \"causal\", or an id of characters [A-Za-z0-9_.:#-]");
  if (args.variantParams.size() > FLASHTILE_MAX_VARIANT_PARAMS)
    return Status::error("variantParams has " + std::to_string(args.variantParams.size()) + " values; at most " +
                         std::to_string(FLASHTILE_MAX_VARIANT_PARAMS) +
                         " (FLASHTILE_MAX_VARIANT_PARAMS) are supported");
  if (args.inputs.size() > FLASHTILE_MAX_VARIANT_INPUTS)
    return Status::error("inputs has " + std::to_string(args.inputs.size()) + " pointers; at most " +
                         std::to_string(FLASHTILE_MAX_VARIANT_INPUTS) +
                         " (FLASHTILE_MAX_VARIANT_INPUTS) are supported");
  if (Status s = detail::checkFp8Args(args); !s.ok())
    return s;
  if (Status s = detail::checkKvCacheArgs(args); !s.ok())
    return s;
  if (Status s = detail::checkPositionArgs(args); !s.ok())
    return s;
  if (Status s = checkForwardByteReach(args); !s.ok())
    return s;
  return detail::checkSplitKvArgs(args);
}

Status Runtime::validateFor(const AttentionArgs &args, const KernelInfo &kernel) {
  if (Status s = validateVariantArgs(args, kernel); !s.ok())
    return s;
  if (Status s = detail::checkFp8Launch(args, kernel); !s.ok())
    return s;
  if (Status s = detail::checkPositionsLaunch(args, kernel); !s.ok())
    return s;
  // The kernels number their blocks with 32-bit integers (the block order walks the whole grid linearly).
  const long long gridRows = args.isVarlen() ? args.maxSeqlenQ : args.seqlenQ;
  const long long blocks = (gridRows + kernel.blockM - 1) / std::max(kernel.blockM, 1) * args.headsQ * args.batch;
  if (blocks > std::numeric_limits<int>::max())
    return Status::error("the launch grid would have " + std::to_string(blocks) + " thread blocks (ceil(" +
                         (args.isVarlen() ? "maxSeqlenQ" : "seqlenQ") + " / " + std::to_string(kernel.blockM) +
                         ") x headsQ x batch); at most " + std::to_string(std::numeric_limits<int>::max()) +
                         " are supported: split the batch into several calls");
  return Status();
}

Status Runtime::validateVariantArgs(const AttentionArgs &args, const KernelInfo &kernel) {
  auto listed = [](const std::vector<std::string> &names) {
    std::string text;
    for (const std::string &name : names)
      text += (text.empty() ? "" : ", ") + name;
    return text.empty() ? std::string("none") : text;
  };
  if (args.variantParams.size() != kernel.paramNames.size())
    return Status::error("variantParams has " + std::to_string(args.variantParams.size()) + " values but variant '" +
                         args.variant + "' takes " + std::to_string(kernel.paramNames.size()) + " (" +
                         listed(kernel.paramNames) + ")");
  if (args.inputs.size() != kernel.inputNames.size())
    return Status::error("inputs has " + std::to_string(args.inputs.size()) + " pointers but variant '" + args.variant +
                         "' takes " + std::to_string(kernel.inputNames.size()) + " (" + listed(kernel.inputNames) +
                         ")");
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    std::string name = "inputs[" + std::to_string(i) + "] ('" + kernel.inputNames[i] + "')";
    if (!args.inputs[i])
      return Status::error(name + " is null; variant '" + args.variant + "' reads it");
    // Inputs hold fp32 or int32 elements.
    if (Status s = checkAligned(name, args.inputs[i], sizeof(float)); !s.ok())
      return s;
  }
  if (Status s = checkParamRules(args.variant, kernel.paramRules, kernel.paramNames, args.variantParams); !s.ok())
    return s.withContext("variantParams");
  return Status();
}

namespace {

Status checkVarlen(const AttentionArgs &args) {
  if (!args.isVarlen()) {
    if (args.cuSeqlensQHost || args.cuSeqlensKHost)
      return Status::error("cuSeqlensQHost/cuSeqlensKHost are set but cuSeqlensQ and cuSeqlensK (the device offsets) "
                           "are null; host copies only check a varlen call");
    return Status();
  }
  if (!args.cuSeqlensQ || !args.cuSeqlensK)
    return Status::error(std::string(args.cuSeqlensQ ? "cuSeqlensK" : "cuSeqlensQ") + " is null but " +
                         (args.cuSeqlensQ ? "cuSeqlensQ" : "cuSeqlensK") +
                         " is set; varlen needs both cuSeqlensQ and cuSeqlensK (dense: neither)");
  for (auto [name, pointer] : {std::pair<std::string_view, const void *>{"cuSeqlensQ", args.cuSeqlensQ},
                               {"cuSeqlensK", args.cuSeqlensK},
                               {"cuSeqlensQHost", args.cuSeqlensQHost},
                               {"cuSeqlensKHost", args.cuSeqlensKHost}})
    if (Status s = checkAligned(name, pointer, kCuSeqlensAlignmentBytes); !s.ok())
      return s;
  for (auto [name, value] :
       {std::pair<std::string_view, int>{"maxSeqlenQ", args.maxSeqlenQ}, {"maxSeqlenK", args.maxSeqlenK}})
    if (Status s = checkAtLeast(name, value, 0); !s.ok())
      return s;
  return Runtime::validateCuSeqlens(args, args.cuSeqlensQHost, args.cuSeqlensKHost);
}

} // namespace

Status Runtime::validateCuSeqlens(const AttentionArgs &args, const int *cuSeqlensQHost, const int *cuSeqlensKHost) {
  if (cuSeqlensQHost)
    if (Status s = checkOffsets("cuSeqlensQ", cuSeqlensQHost, args.batch, "seqlenQ", args.seqlenQ, "maxSeqlenQ",
                                args.maxSeqlenQ);
        !s.ok())
      return s;
  if (cuSeqlensKHost)
    if (Status s = checkOffsets("cuSeqlensK", cuSeqlensKHost, args.batch, "seqlenK", args.seqlenK, "maxSeqlenK",
                                args.maxSeqlenK);
        !s.ok())
      return s;
  return Status();
}

Status Runtime::validateBackward(const BackwardArgs &args) {
  const AttentionArgs &forward = args.forward;
  if (forward.kvCache.enabled())
    return Status::error("forward.kvCache is set; the KV-cache mode (flash_attn_with_kvcache) has no backward");
  if (Status s = detail::checkFp8Backward(forward); !s.ok())
    return s;
  if (Status s = validate(forward); !s.ok())
    return s.withContext("forward");
  // As the forward's tensors: without query rows dO and dQ may be null, without keys dK and dV.
  const bool rows = forward.seqlenQ != 0, keys = forward.seqlenK != 0;
  for (auto [name, pointer, needed] : {std::tuple<std::string_view, const void *, bool>{"dO", args.dO, rows},
                                       {"dQ", args.dQ, rows},
                                       {"dK", args.dK, keys},
                                       {"dV", args.dV, keys}})
    if (needed && !pointer)
      return Status::error(std::string(name) + " is null; dO and dQ must be device pointers when there are query rows, " +
                           "dK and dV when there are keys");
  for (auto [name, stride] : {std::pair<std::string_view, const std::array<long long, 4> &>{"dO", args.dOStride},
                              {"dQ", args.dQStride},
                              {"dK", args.dKStride},
                              {"dV", args.dVStride}})
    if (Status s = checkStrides(name, stride, forward.isVarlen()); !s.ok())
      return s;
  // The gradients have the shapes of O, Q, K and V (the backward has no KV cache).
  const long long batch = forward.isVarlen() ? 1 : forward.batch;
  const Extents queryShape = {batch, forward.seqlenQ, forward.headsQ, 0};
  const Extents keyShape = {batch, forward.seqlenK, forward.headsKv, 0};
  for (auto [name, stride, shape, headDim] :
       {std::tuple<std::string_view, const std::array<long long, 4> &, Extents, int>{"dO", args.dOStride, queryShape,
                                                                                     forward.headDimV},
        {"dQ", args.dQStride, queryShape, forward.headDim},
        {"dK", args.dKStride, keyShape, forward.headDim},
        {"dV", args.dVStride, keyShape, forward.headDimV}}) {
    shape[3] = headDim;
    if (Status s = checkByteReach(name, stride, shape); !s.ok())
      return s;
  }
  for (auto [name, pointer] : {std::pair<std::string_view, const void *>{"dO", args.dO},
                               {"dQ", args.dQ},
                               {"dK", args.dK},
                               {"dV", args.dV}})
    if (Status s = checkAligned(name, pointer, kTensorAlignmentBytes); !s.ok())
      return s;
  if (!args.inputGrads.empty() && args.inputGrads.size() != forward.inputs.size())
    return Status::error("inputGrads has " + std::to_string(args.inputGrads.size()) +
                         " entries; expected none or one per input of the variant (" +
                         std::to_string(forward.inputs.size()) + ")");
  for (size_t i = 0; i < args.inputGrads.size(); ++i)
    if (Status s = checkAligned("inputGrads[" + std::to_string(i) + "]", args.inputGrads[i], sizeof(float)); !s.ok())
      return s;
  return Status();
}
