// Fp8Args.cpp — checking the FP8 (e4m3) fields of an attention call; nothing here touches the GPU.
#include "Fp8Internal.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

using namespace flashtile;

namespace {

/// A 16-byte vector holds 16 e4m3 elements: E4M3's Q, K and V strides are multiples of this.
constexpr long long kE4m3StrideMultiple = 16;

} // namespace

namespace {

/// An e4m3 KV cache (KvCacheArgs::dtype E4M3) under a bf16 or f16 Q: k/v descales only, the caches' strides whole
/// 16-byte vectors of bytes.
Status checkE4m3Cache(const AttentionArgs &args) {
  if (args.dtype == DType::E4M3)
    return Status::error("dtype e4m3 (an e4m3 q) with a KV cache is not built: a KV-cache call takes q in bf16 or f16 "
                         "(dtype BF16, F16), with a cache of that dtype or of e4m3 (kvCache.dtype = "
                         "KvCacheDtype::E4M3, descaled by kDescale and vDescale)");
  if (args.qDescale)
    return Status::error(std::string("qDescale is set but q is ") + std::string(dtypeName(args.dtype)) +
                         "; over an e4m3 KV cache only kDescale and vDescale apply (q_descale scales an e4m3 q, "
                         "which KV-cache calls do not take): pass null");
  for (auto [name, pointer] :
       {std::pair<std::string_view, const float *>{"kDescale", args.kDescale}, {"vDescale", args.vDescale}})
    if (reinterpret_cast<uintptr_t>(pointer) % alignof(float) != 0)
      return Status::error(std::string(name) + " is not 4-byte aligned; a descale is null (= 1) or a device pointer " +
                           "to batch x headsKv contiguous fp32 values");
  for (auto [name, stride] :
       {std::pair<std::string_view, const std::array<long long, 4> &>{"k", args.kStride}, {"v", args.vStride}})
    for (size_t i = 0; i < 3; ++i)
      if (stride[i] % kE4m3StrideMultiple != 0)
        return Status::error(std::string(name) + "Stride[" + std::to_string(i) + "] is " + std::to_string(stride[i]) +
                             "; an e4m3 KV cache's page (batch), row and head strides must be multiples of " +
                             std::to_string(kE4m3StrideMultiple) + " elements (16-byte copies of 8-bit values)");
  return Status();
}

} // namespace

Status detail::checkFp8Args(const AttentionArgs &args) {
  const std::tuple<std::string_view, const float *> descales[] = {
      {"qDescale", args.qDescale}, {"kDescale", args.kDescale}, {"vDescale", args.vDescale}};
  if (args.kvCache.e4m3())
    return checkE4m3Cache(args);
  if (args.dtype != DType::E4M3) {
    for (auto [name, pointer] : descales)
      if (pointer)
        return Status::error(std::string(name) + " is set but dtype is " + std::string(dtypeName(args.dtype)) +
                             "; descales apply to e4m3 tensors only (pass null, or dtype DType::E4M3, or "
                             "kDescale/vDescale with an e4m3 KV cache: kvCache.dtype = KvCacheDtype::E4M3)");
    return Status();
  }
  for (auto [name, pointer] : descales)
    if (reinterpret_cast<uintptr_t>(pointer) % alignof(float) != 0)
      return Status::error(std::string(name) + " is not 4-byte aligned; a descale is null (= 1) or a device pointer " +
                           "to batch x headsKv contiguous fp32 values");
  for (auto [name, stride] : {std::pair<std::string_view, const std::array<long long, 4> &>{"q", args.qStride},
                              {"k", args.kStride},
                              {"v", args.vStride}})
    for (size_t i = args.isVarlen() ? 1 : 0; i < 3; ++i)
      if (stride[i] % kE4m3StrideMultiple != 0)
        return Status::error(std::string(name) + "Stride[" + std::to_string(i) + "] is " + std::to_string(stride[i]) +
                             "; with dtype e4m3 the batch, seq and head strides of q, k and v must be multiples of " +
                             std::to_string(kE4m3StrideMultiple) + " elements (16-byte vector loads)");
  if (args.kvCache.enabled())
    return checkE4m3Cache(args); // refuses an e4m3 q by name
  return Status();
}

Status detail::checkFp8Launch(const AttentionArgs &args, const KernelInfo &kernel) {
  const bool callE4m3 = args.dtype == DType::E4M3, kernelE4m3 = kernel.dtype == dtypeName(DType::E4M3);
  const bool callCacheE4m3 = args.kvCache.e4m3(), kernelCacheE4m3 = kernel.kvDtype == dtypeName(DType::E4M3);
  if (callCacheE4m3 != kernelCacheE4m3)
    return Status::error("kernel '" + kernel.entry + "' reads " +
                         (kernelCacheE4m3 ? std::string("an e4m3 KV cache") : "K/V of its dtype " + kernel.dtype) +
                         " and the call's cache is " + (callCacheE4m3 ? "e4m3" : std::string(dtypeName(args.dtype))) +
                         ": e4m3-cache kernels take FP8 parameters (k and v descales, Fp8Abi.h) and read 8-bit K/V");
  if (callE4m3 == kernelE4m3)
    return Status();
  return Status::error("kernel '" + kernel.entry + "' is a" + (kernelE4m3 ? "n e4m3" : " " + kernel.dtype) +
                       " kernel and the call's dtype is " + std::string(dtypeName(args.dtype)) +
                       ": e4m3 kernels take FP8 parameters (descales, Fp8Abi.h) that only e4m3 calls pass");
}

Status detail::checkFp8Backward(const AttentionArgs &forward) {
  if (forward.dtype != DType::E4M3)
    return Status();
  return Status::error("forward.dtype is e4m3: FP8 calls have no backward (as flash-attn 3's FP8 forward); "
                       "run the forward in bf16 or f16 to differentiate it");
}
