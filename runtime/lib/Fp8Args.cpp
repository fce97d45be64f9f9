// Fp8Args.cpp — checking the FP8 (e4m3) fields of an attention call; nothing here touches the GPU.
#include "Fp8Internal.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>

using namespace flashtile;

namespace {

/// A 16-byte vector holds 16 e4m3 elements: E4M3's Q, K and V strides are multiples of this.
constexpr long long kE4m3StrideMultiple = 16;

} // namespace

Status detail::checkFp8Args(const AttentionArgs &args) {
  const std::tuple<std::string_view, const float *> descales[] = {
      {"qDescale", args.qDescale}, {"kDescale", args.kDescale}, {"vDescale", args.vDescale}};
  if (args.dtype != DType::E4M3) {
    for (auto [name, pointer] : descales)
      if (pointer)
        return Status::error(std::string(name) + " is set but dtype is " + std::string(dtypeName(args.dtype)) +
                             "; descales apply to dtype e4m3 only (pass null, or dtype DType::E4M3)");
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
    return Status::error("dtype e4m3 with a KV cache (kvCache.layout is set): the KV-cache kernels have no 8-bit path "
                         "yet; KV-cache calls accept dtypes bf16, f16");
  return Status();
}

Status detail::checkFp8Launch(const AttentionArgs &args, const KernelInfo &kernel) {
  const bool callE4m3 = args.dtype == DType::E4M3, kernelE4m3 = kernel.dtype == dtypeName(DType::E4M3);
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
