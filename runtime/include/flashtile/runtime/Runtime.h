// Runtime.h — the public entry point: pick a kernel for an attention call and launch it.
//
// Kernels come from ahead-of-time directories (`<name>.manifest` + `<name>.cubin`) or, on a miss, from a JIT
// hook the compiler library installs; JIT results go through the KernelCache. Arguments are checked before
// anything touches the GPU, so a bad call gets an error value naming the argument, never a crash or abort.
#ifndef FLASHTILE_RUNTIME_RUNTIME_H
#define FLASHTILE_RUNTIME_RUNTIME_H

#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Status.h"

#include <cuda.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

enum class DType { F16, BF16 };

/// "f16" / "bf16" (the spelling in specs and manifests); "invalid" for values outside the enum.
std::string_view dtypeName(DType dtype);

/// Head dimensions the compiler generates kernels for.
inline constexpr std::array<int, 2> kSupportedHeadDims = {64, 128};

/// One attention forward call over device pointers. Q is B x Sq x Hq x D, K is B x Sk x Hkv x D, V is
/// B x Sk x Hkv x Dv, O is B x Sq x Hq x Dv (any strides with a contiguous last dim); LSE is fp32 B x Hq x Sq,
/// contiguous, natural log.
struct AttentionArgs {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr; // required: every kernel writes it
  DType dtype = DType::BF16;
  int batch = 0;
  int seqlenQ = 0; // 0 is a valid no-op
  int seqlenK = 0; // 0 is valid: O = 0 and LSE = -inf
  int headsQ = 0;
  int headsKv = 0; // headsQ must be a multiple (grouped-query attention)
  int headDim = 0;
  int headDimV = 0; // must equal headDim for now
  // Strides in elements, ordered {batch, seq, head, dim}; the dim stride must be 1, the others non-negative
  // multiples of 8 elements (kernels use 16-byte vector loads).
  std::array<long long, 4> qStride{}, kStride{}, vStride{}, oStride{};
  float softmaxScale = 0.f;         // 0 selects 1/sqrt(headDim); must be finite
  std::string variant = "none";     // "none", "causal", or a JIT variant id
  std::vector<float> variantParams; // the variant's numbers, in its declaration order

  /// Arguments for packed B x S x H x D tensors (flash_attn_func's layout), with headDimV = headDim.
  static AttentionArgs contiguous(DType dtype, const void *q, const void *k, const void *v, void *o, float *lse,
                                  int batch, int seqlenQ, int seqlenK, int headsQ, int headsKv, int headDim);
};

/// The JIT hook: builds the kernel for a spec. The compiler library installs one with Runtime::setCompiler; it
/// is called only on a cache miss, and what it returns must match the spec.
using CompileFn = std::function<StatusOr<CachedKernel>(const KernelSpec &)>;

/// Thread-safe: forward() may be called concurrently from several threads (each with its own stream).
class Runtime {
public:
  static constexpr std::string_view kDefaultSchedule = "fa2";
  static constexpr std::string_view kDefaultShapeClass = "default";

  /// The JIT cache takes its settings from the environment (KernelCache::optionsFromEnvironment).
  Runtime();
  explicit Runtime(KernelCache::Options cacheOptions);
  ~Runtime();
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  /// Adds every `<name>.manifest` in `dir` (KernelInfo text) with the `<name>.cubin` beside it. All or nothing:
  /// on error (naming the file) nothing is added. Two kernels for one spec are an error.
  Status loadAotDirectory(const std::string &dir);
  void setCompiler(CompileFn compile);
  /// The schedule asked for in specs; "fa2" unless set.
  void setSchedule(std::string schedule);

  /// Checks `args`, selects or builds the kernel for this GPU and launches it on `stream` (asynchronous).
  Status forward(const AttentionArgs &args, CUstream stream = nullptr);

  /// The spec forward() would ask for on this thread's GPU.
  StatusOr<KernelSpec> specFor(const AttentionArgs &args);
  /// The spec for `arch` (one of kSupportedArchs); needs no GPU.
  StatusOr<KernelSpec> specFor(const AttentionArgs &args, const std::string &arch) const;
  /// The kernel for `spec`: an ahead-of-time one, else the JIT cache's. Needs no GPU.
  StatusOr<std::shared_ptr<const CachedKernel>> findKernel(const KernelSpec &spec);

  /// Every check on `args` that needs no GPU; the message names the argument and the accepted values.
  static Status validate(const AttentionArgs &args);

  KernelCache &cache();

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_RUNTIME_H
