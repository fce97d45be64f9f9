// SelfCheck.h — the first-use self-check of kernels never run on their GPU family (KernelInfo::neverRunOnArch).
//
// A schedule whose kernels nobody has run on an arch (fa4 on sm_100a: no such GPU was available to its authors) says
// so in their manifests, with the proven schedule to check them against. Before such a kernel's first use the runtime
// runs it once beside the proven schedule's kernel for the same spec on a small seeded problem cut from the call, and
// compares their O and LSE. A kernel that disagrees is never used by the runtime that checked it: its calls fall back
// (one log line naming the kernel, Runtime.cpp). The verdict is kept per kernel for the runtime's life.
//
// The rule is FlashAttention's (max|out - ref| <= 2 max|ref_lowp - ref_fp32|) with the proven kernel standing in for
// the reference: the runtime knows neither the variant's math nor an fp32 reference, so the bound is the one both
// kernels meet by construction. Each rounds P to the element type once (at most u max|V| in O, u the type's unit
// roundoff: 2^-8 for bf16, 2^-11 for fp16) and O once (at most u |O|), and each may approximate exp2 (the sm100
// polynomial's relative error is 8.6e-5, below u/4 in both types), so each is within about 2.5 u max|V| of the exact
// result and the two within 5 u max|V|; the tolerance is kOTolerance = 8 u max|V|. LSE is fp32 from fp32 scores:
// the two may differ by the exp2 approximations' error in log(l), kLseTolerance = 1e-3 (over ten times that bound).
// Infinite LSE (rows that see no key) must match exactly; NaN anywhere is a disagreement.
#ifndef FLASHTILE_RUNTIME_LIB_SELFCHECK_H
#define FLASHTILE_RUNTIME_LIB_SELFCHECK_H

#include "PlanRunner.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace flashtile::detail {

/// The self-check problem's query rows and keys, at most: a partial third tile of 128 keys and more than one
/// 256-row block of two 128-row Q tiles (fa4's CTA), so that boundary tiles and masks are exercised.
inline constexpr int kSelfCheckSeqlen = 320;
/// The generator's seed: every process checks a kernel on the same inputs.
inline constexpr uint64_t kSelfCheckSeed = 0x5e1fc4ec4a77e2d1ull;
/// O's tolerance in units of u max|V| (the header says why 8).
inline constexpr double kOTolerance = 8.0;
/// LSE's absolute tolerance (natural log).
inline constexpr double kLseTolerance = 1e-3;

/// The dense call the check runs for `call` (pointers left null): one sequence of min(call's query rows and keys per
/// sequence, kSelfCheckSeqlen) rows and keys, the call's heads, head dims, dtype, scale, variant, numbers and inputs.
/// The runtime does not know the shapes of a variant's input arrays, so the problem stays inside the call's own
/// indices (batch 0, positions the call has, its heads): every element the kernels read was the caller's to read.
AttentionArgs selfCheckProblem(const AttentionArgs &call);

/// Q, K and V of `problem`, seeded (kSelfCheckSeed): values k/128 for integers k in [-128, 128], exact in bf16 and
/// fp16, as 16-bit patterns of `problem.dtype`, each tensor packed S x H x D.
struct SelfCheckInputs {
  std::vector<uint16_t> q, k, v;
  float maxAbsV = 0;
};
SelfCheckInputs selfCheckInputs(const AttentionArgs &problem);

/// The float value of a 16-bit pattern of `dtype`.
float elementValue(DType dtype, uint16_t bits);

/// Compares the candidate's O (16-bit patterns of `dtype`, rows x heads x headDimV) and LSE (heads x rows) with the
/// reference's under the header's tolerances. Ok when they agree; otherwise an error naming the worst element, its
/// difference and the tolerance.
Status compareSelfCheck(DType dtype, int rows, int heads, int headDimV, float maxAbsV,
                        const std::vector<uint16_t> &oCandidate, const std::vector<uint16_t> &oReference,
                        const std::vector<float> &lseCandidate, const std::vector<float> &lseReference);

/// The verdicts of one runtime's self-checks, by kernel.
class SelfChecks {
public:
  using FindKernel = std::function<StatusOr<std::shared_ptr<const CachedKernel>>(const KernelSpec &)>;
  using LoadKernel = std::function<StatusOr<LoadedModule>(const std::shared_ptr<const CachedKernel> &)>;
  /// How the check reaches the GPU (forward()); explain() has none and only reads verdicts.
  struct Gpu {
    const CudaDriver &driver;
    CUstream stream;
    PlanServices &services;
    FindKernel findKernel;
    LoadKernel load;
  };

  /// Whether `kernel` may run `call`: ok for kernels without the mark and for marked ones that passed their check;
  /// the verdict's error for marked ones that failed it. A marked kernel without a verdict is checked now when `gpu`
  /// is given (its verdict kept), else ok (explain(): forward() checks it before it runs). An error that keeps the
  /// check from running (no proven kernel, CUDA graph capture, a driver error) is returned and not kept.
  Status vet(const std::shared_ptr<const CachedKernel> &kernel, const AttentionArgs &call, const Gpu *gpu);
  /// Whether `kernel` has a verdict (it was checked, and passed or failed).
  bool judged(const CachedKernel &kernel);

private:
  std::mutex mutex; // held through a check: a kernel is checked once, however many threads meet it first
  std::map<std::string, Status> verdicts; // by the kernel's spec key and entry
};

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_SELFCHECK_H
