// SelfCheck.cpp — running a never-run kernel beside a proven one before its first use, and the comparison.
#include "SelfCheck.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <tuple>

using namespace flashtile;
using namespace flashtile::detail;

namespace {

/// The generator's values are k / kValueDenominator for integers k in [-kValueDenominator, kValueDenominator]: at
/// most 8 significant bits, so bf16 and fp16 hold them exactly.
constexpr int kValueDenominator = 128;
/// Offsets of the buffers in the check's one allocation.
constexpr size_t kBufferAlignment = 256;
/// 0xff bytes: NaN in bf16, fp16 and fp32; what a kernel leaves unwritten reads as a disagreement.
constexpr unsigned char kPoison = 0xff;

/// splitmix64: a small, well-mixed generator whose sequence is the same on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

/// The 16-bit pattern of `value`, which must be exact in `dtype` (zero or a normal number of at most 8 significant
/// bits, as the generator's are).
uint16_t exactBits(DType dtype, float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (dtype == DType::BF16)
    return static_cast<uint16_t>(bits >> 16);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (value == 0.f)
    return sign;
  int exponent = 0;
  const float mantissa = std::frexp(std::fabs(value), &exponent); // |value| = mantissa 2^exponent, in [0.5, 1)
  const int biased = exponent - 1 + 15;
  const auto fraction = static_cast<uint16_t>((mantissa * 2.f - 1.f) * 1024.f);
  return static_cast<uint16_t>(sign | (biased << 10) | fraction);
}

std::string number(double value) {
  if (std::isnan(value))
    return "nan"; // whatever its sign bit
  std::ostringstream out;
  out.precision(4);
  out << value;
  return out.str();
}

size_t aligned(size_t bytes) { return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }

} // namespace

float flashtile::detail::elementValue(DType dtype, uint16_t bits) {
  if (dtype == DType::BF16)
    return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  const float sign = (bits & 0x8000u) ? -1.f : 1.f;
  const int exponent = (bits >> 10) & 0x1f;
  const int fraction = bits & 0x3ff;
  if (exponent == 0x1f)
    return fraction ? std::numeric_limits<float>::quiet_NaN() : sign * std::numeric_limits<float>::infinity();
  if (exponent == 0)
    return sign * std::ldexp(static_cast<float>(fraction), -24); // subnormal: fraction 2^-10 2^-14
  return sign * std::ldexp(1.f + static_cast<float>(fraction) / 1024.f, exponent - 15);
}

AttentionArgs flashtile::detail::selfCheckProblem(const AttentionArgs &call) {
  const int callRows = call.isVarlen() ? call.maxSeqlenQ : call.seqlenQ;
  const int callKeys = call.kvCache.enabled() ? 0 : call.isVarlen() ? call.maxSeqlenK : call.seqlenK;
  AttentionArgs problem = AttentionArgs::contiguous(
      call.dtype, nullptr, nullptr, nullptr, nullptr, nullptr, 1, std::min(callRows, kSelfCheckSeqlen),
      std::min(callKeys, kSelfCheckSeqlen), call.headsQ, call.headsKv, call.headDim, call.headDimV);
  problem.softmaxScale = call.softmaxScale;
  problem.variant = call.variant;
  problem.variantParams = call.variantParams;
  problem.inputs = call.inputs;
  // A block of a larger problem runs modules with position offsets: both kernels run at offset 0 (the problem is
  // its own larger problem), so that they compare as a plain call's would.
  if (call.positions)
    problem.positions = BlockPositions{};
  return problem;
}

SelfCheckInputs flashtile::detail::selfCheckInputs(const AttentionArgs &problem) {
  SplitMix64 random{kSelfCheckSeed};
  SelfCheckInputs inputs;
  auto fill = [&](std::vector<uint16_t> &tensor, long long elements, float *maxAbs) {
    tensor.resize(static_cast<size_t>(elements));
    for (uint16_t &element : tensor) {
      const int k = static_cast<int>(random.next() % (2 * kValueDenominator + 1)) - kValueDenominator;
      const float value = static_cast<float>(k) / kValueDenominator;
      element = exactBits(problem.dtype, value);
      if (maxAbs)
        *maxAbs = std::max(*maxAbs, std::fabs(value));
    }
  };
  fill(inputs.q, 1LL * problem.seqlenQ * problem.headsQ * problem.headDim, nullptr);
  fill(inputs.k, 1LL * problem.seqlenK * problem.headsKv * problem.headDim, nullptr);
  fill(inputs.v, 1LL * problem.seqlenK * problem.headsKv * problem.headDimV, &inputs.maxAbsV);
  return inputs;
}

Status flashtile::detail::compareSelfCheck(DType dtype, int rows, int heads, int headDimV, float maxAbsV,
                                           const std::vector<uint16_t> &oCandidate,
                                           const std::vector<uint16_t> &oReference,
                                           const std::vector<float> &lseCandidate,
                                           const std::vector<float> &lseReference) {
  const double unitRoundoff = dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double oTolerance = kOTolerance * unitRoundoff * std::max(maxAbsV, 1.f);
  const std::string oRule = "8 u max|V| = " + number(oTolerance) + ", u = 2^" + (dtype == DType::BF16 ? "-8" : "-11");
  double worst = -1;
  size_t worstIndex = 0;
  for (size_t i = 0; i < oCandidate.size(); ++i) {
    const float a = elementValue(dtype, oCandidate[i]), b = elementValue(dtype, oReference[i]);
    const double difference = std::isnan(a) || std::isnan(b) ? INFINITY : std::fabs(double(a) - b);
    if (difference > worst) {
      worst = difference;
      worstIndex = i;
    }
  }
  if (worst > oTolerance) {
    const size_t dim = worstIndex % headDimV, head = worstIndex / headDimV % heads;
    const size_t row = worstIndex / headDimV / heads;
    return Status::error("O of row " + std::to_string(row) + ", head " + std::to_string(head) + ", dim " +
                         std::to_string(dim) + " is " + number(elementValue(dtype, oCandidate[worstIndex])) +
                         ", the proven kernel's " + number(elementValue(dtype, oReference[worstIndex])) +
                         " (max|O - O_proven| = " + number(worst) + " > " + oRule + ")");
  }
  for (size_t row = 0; row < static_cast<size_t>(rows); ++row)
    for (size_t head = 0; head < static_cast<size_t>(heads); ++head) {
      const size_t r = head * rows + row; // LSE is heads x rows
      const float a = lseCandidate[r], b = lseReference[r];
      const bool agree = std::isinf(a) || std::isinf(b) ? a == b : std::fabs(double(a) - b) <= kLseTolerance;
      if (!agree)
        return Status::error("LSE of row " + std::to_string(row) + ", head " + std::to_string(head) + " is " +
                             number(a) + ", the proven kernel's " + number(b) + " (tolerance " + number(kLseTolerance) +
                             ")");
    }
  return Status();
}

namespace {

/// One device allocation, freed with the scope.
class DeviceBuffer {
public:
  explicit DeviceBuffer(const CudaDriver &driver) : driver(driver) {}
  ~DeviceBuffer() {
    if (base)
      driver.cuMemFree_v2(base);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  Status allocate(size_t bytes) { return driver.check(driver.cuMemAlloc_v2(&base, bytes), "cuMemAlloc (self-check)"); }
  CUdeviceptr base = 0;

private:
  const CudaDriver &driver;
};

/// The comparison's verdict, as the value of a check that ran.
struct Compared {
  Status verdict;
};

/// Runs the reference and the candidate on `problem` and compares them: the error of a check that could not run,
/// else the comparison's verdict.
StatusOr<Compared> runBoth(const SelfChecks::Gpu &gpu, const LoadedModule &candidate, const LoadedModule &reference,
                           AttentionArgs problem) {
  const CudaDriver &driver = gpu.driver;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Status s = driver.check(driver.cuStreamIsCapturing(gpu.stream, &capture), "cuStreamIsCapturing"); !s.ok())
    return s;
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return Status::error("the check cannot run under CUDA graph capture (it synchronizes); make one call outside "
                         "capture first");
  const SelfCheckInputs inputs = selfCheckInputs(problem);
  const size_t oElements = 1ULL * problem.seqlenQ * problem.headsQ * problem.headDimV;
  const size_t lseElements = 1ULL * problem.headsQ * problem.seqlenQ;
  const size_t sizes[] = {inputs.q.size() * 2, inputs.k.size() * 2, inputs.v.size() * 2, oElements * 2,
                          oElements * 2,       lseElements * 4,     lseElements * 4};
  size_t offsets[std::size(sizes)], total = 0;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    offsets[i] = total;
    total += aligned(std::max<size_t>(sizes[i], 1));
  }
  DeviceBuffer buffer(driver);
  if (Status s = buffer.allocate(total); !s.ok())
    return s;
  auto at = [&](size_t i) { return buffer.base + offsets[i]; };
  const std::vector<uint16_t> *tensors[] = {&inputs.q, &inputs.k, &inputs.v};
  for (size_t i = 0; i < 3; ++i)
    if (Status s =
            driver.check(driver.cuMemcpyHtoD_v2(at(i), tensors[i]->data(), sizes[i]), "cuMemcpyHtoD (self-check)");
        !s.ok())
      return s;
  if (Status s = driver.check(driver.cuMemsetD8_v2(at(3), kPoison, total - offsets[3]), "cuMemsetD8 (self-check)");
      !s.ok())
    return s;
  problem.q = reinterpret_cast<const void *>(at(0));
  problem.k = reinterpret_cast<const void *>(at(1));
  problem.v = reinterpret_cast<const void *>(at(2));
  for (auto [module, o, lse] : {std::tuple{&reference, 4, 6}, {&candidate, 3, 5}}) {
    problem.o = reinterpret_cast<void *>(at(o));
    problem.lse = reinterpret_cast<float *>(at(lse));
    if (Status s = runPlan(driver, *module, problem, gpu.stream, gpu.services); !s.ok())
      return s;
  }
  if (Status s = driver.check(driver.cuStreamSynchronize(gpu.stream), "cuStreamSynchronize (self-check)"); !s.ok())
    return s;
  std::vector<uint16_t> oCandidate(oElements), oReference(oElements);
  std::vector<float> lseCandidate(lseElements), lseReference(lseElements);
  void *outputs[] = {oCandidate.data(), oReference.data(), lseCandidate.data(), lseReference.data()};
  for (size_t i = 0; i < 4; ++i)
    if (Status s =
            driver.check(driver.cuMemcpyDtoH_v2(outputs[i], at(3 + i), sizes[3 + i]), "cuMemcpyDtoH (self-check)");
        !s.ok())
      return s;
  return Compared{compareSelfCheck(problem.dtype, problem.seqlenQ, problem.headsQ, problem.headDimV, inputs.maxAbsV,
                                   oCandidate, oReference, lseCandidate, lseReference)};
}

/// A kernel's verdict is kept by its spec and entry.
std::string verdictKey(const KernelInfo &info) { return info.spec().key() + ";entry=" + info.entry; }

} // namespace

bool SelfChecks::judged(const CachedKernel &kernel) {
  std::lock_guard<std::mutex> lock(mutex);
  return verdicts.count(verdictKey(kernel.info)) > 0;
}

Status SelfChecks::vet(const std::shared_ptr<const CachedKernel> &kernel, const AttentionArgs &call, const Gpu *gpu) {
  const KernelInfo &info = kernel->info;
  if (!info.neverRunOnArch)
    return Status();
  const std::string key = verdictKey(info);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto known = verdicts.find(key); known != verdicts.end())
    return known->second;
  if (!gpu)
    return Status();
  const std::string label =
      "kernel " + info.entry + " (schedule " + info.schedule + ", never run on " + info.arch + ")";
  auto notRun = [&](const Status &why) {
    return Status::error(label + " cannot be used before its first-use self-check against schedule '" +
                         info.checkAgainst + "', which did not run: " + why.message());
  };
  KernelSpec provenSpec = info.spec();
  provenSpec.schedule = info.checkAgainst;
  StatusOr<std::shared_ptr<const CachedKernel>> proven = gpu->findKernel(provenSpec);
  if (!proven.ok())
    return notRun(proven.status());
  StatusOr<LoadedModule> candidateModule = gpu->load(kernel);
  if (!candidateModule.ok())
    return notRun(candidateModule.status());
  StatusOr<LoadedModule> provenModule = gpu->load(*proven);
  if (!provenModule.ok())
    return notRun(provenModule.status());
  AttentionArgs problem = selfCheckProblem(call);
  for (const KernelInfo *of : {&info, &(*proven)->info})
    if (Status s = Runtime::validateFor(problem, *of); !s.ok())
      return notRun(s);
  StatusOr<Compared> compared = runBoth(*gpu, *candidateModule, *provenModule, problem);
  if (!compared.ok())
    return notRun(compared.status());
  Status verdict =
      compared->verdict.ok()
          ? Status()
          : Status::error(label + " disagrees with " + (*proven)->info.entry + " (schedule " + info.checkAgainst +
                          ") in its first-use self-check on a seeded " + std::to_string(problem.seqlenQ) + " x " +
                          std::to_string(problem.seqlenK) + " problem: " + compared->verdict.message());
  verdicts.emplace(key, verdict);
  return verdict;
}
