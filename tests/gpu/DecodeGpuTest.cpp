// DecodeGpuTest.cpp — the decode schedule's split-KV kernels on a real GPU.
//
// Decode-sized calls (1-16 query rows over long keys, grouped-query ratios 1-16) run the decode schedule's kernels
// through Runtime::forward with every split count from 1 to past the K/V tiles (empty splits) and the runtime's
// own choice, against the fp32 reference kernel with FlashAttention's rule (tools/reference: causal and full
// attention), dense and packed (varlen, with empty sequences). Variants the reference does not know (sinks, ALiBi,
// softcap, windows) are checked against the FA2 kernel of the same variant on the same inputs (itself checked by
// bench/check_variants.py): both compute the same softmax in fp32, so they differ by P's and O's roundings only.
//
// Environment (bench/device/run-decode-tests.sh sets them):
//   FLASHTILE_AOT_DIR         fa2 kernels (`flashtile aot`), for the variant comparison and as the fallback
//   FLASHTILE_DECODE_AOT_DIR  decode kernels (`flashtile aot --schedule decode`)
//   FLASHTILE_REQUIRE_GPU     "1": a missing GPU fails instead of skipping
//   FLASHTILE_TEST_SEED       fixed base seed (decimal) to replay a failure
// Without a GPU every test skips with the reason.
#include "GpuReference.h"
#include "GpuTestSupport.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/SplitKv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace flashtile;
using namespace flashtile::gpu_test;

namespace {

using reference::DeviceBuffer;
using reference::Precision;
using reference::synchronize;

struct Gpu : GpuState {
  std::unique_ptr<Runtime> decode; // decode kernels (and fa2 as the fallback it never needs here)
  std::unique_ptr<Runtime> fa2;    // fa2 kernels only (no decode schedule)
};

Gpu makeGpu() {
  Gpu gpu;
  if (!findGpu(gpu, /*withReference=*/true))
    return gpu;
  const std::string fa2Dir = envOr("FLASHTILE_AOT_DIR", ""), decodeDir = envOr("FLASHTILE_DECODE_AOT_DIR", "");
  if (fa2Dir.empty() || decodeDir.empty()) {
    gpu.setupError = "FLASHTILE_AOT_DIR (fa2 kernels) and FLASHTILE_DECODE_AOT_DIR (decode kernels) must be set";
    return gpu;
  }
  if (!loadAotRuntime(gpu, gpu.decode, decodeDir))
    return gpu;
  // fa2's runtime with no decode schedule, so that its decode-sized calls run fa2 (set before its kernels load).
  gpu.fa2 = memoryOnlyRuntime();
  gpu.fa2->setDecodeSchedule("");
  if (!loadAotRuntime(gpu, gpu.fa2, fa2Dir))
    return gpu;
  announceSeed("flashtile-decode");
  return gpu;
}

Gpu &gpu() {
  static Gpu instance = makeGpu();
  return instance;
}

struct Case {
  DType dtype;
  int headDim;
  std::string variant; // "none" or "causal": the reference's; others compare with fa2
  int batch, headsQ, headsKv, seqlenQ, seqlenK;
  int index;
};

std::string caseName(const Case &c) {
  std::ostringstream name;
  name << dtypeName(c.dtype) << "_hd" << c.headDim << "_" << c.variant << "_B" << c.batch << "_H" << c.headsQ << "x"
       << c.headsKv << "_Sq" << c.seqlenQ << "_Sk" << c.seqlenK;
  return name.str();
}

void PrintTo(const Case &c, std::ostream *out) { *out << caseName(c); }

/// Packed BSHD tensors of one case, poisoned, with N(0, 1) inputs.
struct Tensors {
  DeviceBuffer q, k, v, o, lse;
  std::array<long long, 4> qStride{}, kStride{}, vStride{}, oStride{};
};

Status makeTensors(const Case &c, uint64_t seed, Tensors &t) {
  const long long D = c.headDim;
  t.qStride = t.oStride = {c.seqlenQ * c.headsQ * D, c.headsQ * D, D, 1};
  t.kStride = t.vStride = {c.seqlenK * c.headsKv * D, c.headsKv * D, D, 1};
  const size_t qElements = size_t(c.batch) * c.seqlenQ * c.headsQ * D,
               kElements = size_t(c.batch) * c.seqlenK * c.headsKv * D;
  for (auto [buffer, bytes] : {std::pair{&t.q, qElements * 2},
                               {&t.k, kElements * 2},
                               {&t.v, kElements * 2},
                               {&t.o, qElements * 2},
                               {&t.lse, size_t(c.batch) * c.headsQ * c.seqlenQ * 4}}) {
    if (Status s = buffer->allocate(bytes); !s.ok())
      return s;
    if (Status s = buffer->fill(reference::kPoisonByte); !s.ok())
      return s;
  }
  int n = 0;
  for (auto [buffer, seqlen, heads, stride] : {std::tuple{&t.q, c.seqlenQ, c.headsQ, t.qStride},
                                               {&t.k, c.seqlenK, c.headsKv, t.kStride},
                                               {&t.v, c.seqlenK, c.headsKv, t.vStride}})
    if (Status s = gpu().reference->fill(buffer->as<void>(), c.dtype, c.batch, seqlen, heads, c.headDim, stride,
                                         seed * 3 + n++);
        !s.ok())
      return s;
  return synchronize("fill_normal");
}

AttentionArgs argsOf(const Case &c, const Tensors &t) {
  AttentionArgs args = AttentionArgs::contiguous(c.dtype, t.q.as<const void>(), t.k.as<const void>(),
                                                 t.v.as<const void>(), t.o.as<void>(), t.lse.as<float>(), c.batch,
                                                 c.seqlenQ, c.seqlenK, c.headsQ, c.headsKv, c.headDim);
  args.variant = c.variant;
  return args;
}

/// Variant arguments for the variants the comparison with fa2 runs (fp32 arrays it allocates in `arrays`).
Status variantArgs(const Case &c, AttentionArgs &args, std::vector<DeviceBuffer> &arrays) {
  auto floats = [&](std::vector<float> values) -> Status {
    arrays.emplace_back();
    if (Status s = arrays.back().allocate(values.size() * sizeof(float)); !s.ok())
      return s;
    const CudaDriver &d = *gpu().driver;
    args.inputs.push_back(arrays.back().as<const void>());
    return d.check(d.cuMemcpyHtoD_v2(arrays.back().address(), values.data(), values.size() * sizeof(float)),
                   "cuMemcpyHtoD");
  };
  std::vector<float> perHead(c.headsQ);
  if (c.variant == "sinks" || c.variant == "sinks_causal") {
    for (int h = 0; h < c.headsQ; ++h)
      perHead[h] = float(h % 5) - 2.0f; // logits around the scores' own scale
    return floats(perHead);
  }
  if (c.variant == "alibi" || c.variant == "alibi_causal") {
    for (int h = 0; h < c.headsQ; ++h)
      perHead[h] = std::exp2(-8.0f * float(h % 8 + 1) / 8.0f);
    return floats(perHead);
  }
  if (c.variant == "softcap" || c.variant == "softcap_causal")
    args.variantParams = {30.0f};
  if (c.variant == "sliding_window" || c.variant == "sliding_window_causal")
    args.variantParams =
        c.variant == "sliding_window" ? std::vector<float>{300.f, 40.f} : std::vector<float>{700.f, -1.f};
  return Status();
}

/// The split counts a case runs: 1, 2, 3, the tiles exactly, more than the tiles (empty splits), kMaxSplits, and 0
/// (the runtime's heuristic).
std::vector<int> splitCounts(const Case &c) {
  const int tiles = std::max(1, (c.seqlenK + 63) / 64); // a lower bound of the kernels' block-n of 64-128
  std::vector<int> counts = {0, 1, 2, 3, std::min(tiles, kMaxSplits), std::min(tiles + 3, kMaxSplits), kMaxSplits};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

void checkAgainstReference(const Case &c) {
  const uint64_t seed = baseSeed() + 0x9E3779B97F4A7C15ULL * uint64_t(c.index + 1);
  SCOPED_TRACE(caseName(c) + " (seed " + std::to_string(seed) + ")");
  Tensors t;
  ASSERT_OK(makeTensors(c, seed, t));
  AttentionArgs args = argsOf(c, t);
  const bool causal = c.variant == "causal";
  StatusOr<reference::ReferenceOutputs> fp32 = gpu().reference->runToHost(args, causal, Precision::Fp32);
  ASSERT_OK(fp32.status());
  StatusOr<reference::ReferenceOutputs> lowp = gpu().reference->runToHost(args, causal, Precision::Lowp);
  ASSERT_OK(lowp.status());
  for (int splits : splitCounts(c)) {
    ASSERT_OK(t.o.fill(reference::kPoisonByte));
    ASSERT_OK(t.lse.fill(reference::kPoisonByte));
    args.numSplits = splits;
    ASSERT_OK(gpu().decode->forward(args));
    ASSERT_OK(synchronize("decode forward"));
    std::vector<uint16_t> oRaw;
    std::vector<float> lse;
    ASSERT_OK(t.o.download(oRaw));
    ASSERT_OK(t.lse.download(lse));
    StatusOr<reference::Comparison> cmp = reference::compare(args, oRaw, lse, *fp32, *lowp);
    ASSERT_OK(cmp.status());
    std::printf("[flashtile-decode] %s splits=%d %s\n", caseName(c).c_str(), splits, cmp->summary().c_str());
    for (const std::string &failure : cmp->failures())
      ADD_FAILURE() << splits << " splits: " << failure;
  }
}

/// Decode (every split count) against fa2 on the same inputs: O within 4 units of the dtype's rounding at the
/// largest |O| (P is rounded against each split's own row max), LSE within 1e-3, no NaN.
void checkAgainstFa2(const Case &c) {
  const uint64_t seed = baseSeed() + 0x9E3779B97F4A7C15ULL * uint64_t(c.index + 1);
  SCOPED_TRACE(caseName(c) + " (seed " + std::to_string(seed) + ")");
  Tensors t;
  ASSERT_OK(makeTensors(c, seed, t));
  AttentionArgs args = argsOf(c, t);
  std::vector<DeviceBuffer> arrays;
  ASSERT_OK(variantArgs(c, args, arrays));
  ASSERT_OK(gpu().fa2->forward(args));
  ASSERT_OK(synchronize("fa2 forward"));
  std::vector<uint16_t> oFa2Raw;
  std::vector<float> lseFa2;
  ASSERT_OK(t.o.download(oFa2Raw));
  ASSERT_OK(t.lse.download(lseFa2));
  std::vector<float> oFa2(oFa2Raw.size());
  float largest = 0;
  for (size_t i = 0; i < oFa2Raw.size(); ++i) {
    oFa2[i] = reference::lowToFloat(oFa2Raw[i], c.dtype);
    largest = std::max(largest, std::fabs(oFa2[i]));
  }
  const double ulp = std::ldexp(1.0, std::ilogb(std::max(largest, 1e-30f)) - (c.dtype == DType::BF16 ? 7 : 10));
  for (int splits : splitCounts(c)) {
    ASSERT_OK(t.o.fill(reference::kPoisonByte));
    ASSERT_OK(t.lse.fill(reference::kPoisonByte));
    args.numSplits = splits;
    ASSERT_OK(gpu().decode->forward(args));
    ASSERT_OK(synchronize("decode forward"));
    std::vector<uint16_t> oRaw;
    std::vector<float> lse;
    ASSERT_OK(t.o.download(oRaw));
    ASSERT_OK(t.lse.download(lse));
    double errO = 0, errLse = 0;
    long long nans = 0;
    for (size_t i = 0; i < oRaw.size(); ++i) {
      float x = reference::lowToFloat(oRaw[i], c.dtype);
      if (std::isnan(x) || std::isnan(oFa2[i]))
        ++nans;
      else
        errO = std::max(errO, double(std::fabs(x - oFa2[i])));
    }
    for (size_t i = 0; i < lse.size(); ++i)
      if (std::isnan(lse[i]) || (lse[i] != lseFa2[i] && !(std::fabs(lse[i] - lseFa2[i]) <= 1e-3)))
        errLse = std::max(errLse, std::isnan(lse[i]) ? INFINITY : double(std::fabs(lse[i] - lseFa2[i])));
    std::printf("[flashtile-decode] %s splits=%d vs fa2: max|dO|=%.3e (bound %.3e) max|dLSE|=%.2e nan=%lld\n",
                caseName(c).c_str(), splits, errO, 4 * ulp, errLse, nans);
    EXPECT_EQ(nans, 0) << splits << " splits";
    EXPECT_LE(errO, 4 * ulp) << splits << " splits";
    EXPECT_LE(errLse, 1e-3) << splits << " splits";
  }
}

std::vector<Case> referenceCases() {
  // GQA ratios 1-16, 1-16 query rows, keys from 1 (one partial tile) over odd lengths to 32k; head dims 64 and 128
  // at both dtypes, 96 and 256 at bf16 on four of the shapes.
  const std::tuple<int, int, int, int, int> shapes[] = {// batch, Hq, Hkv, Sq, Sk
                                                        {1, 32, 8, 1, 1},     {2, 32, 8, 1, 127},  {4, 8, 8, 1, 1000},
                                                        {1, 32, 2, 1, 32768}, {3, 16, 1, 4, 4097}, {2, 16, 16, 8, 333},
                                                        {1, 32, 8, 16, 8192}, {5, 12, 4, 2, 65},   {1, 2, 1, 16, 10}};
  std::vector<Case> cases;
  int index = 0;
  for (DType dtype : {DType::BF16, DType::F16})
    for (int headDim : {64, 128})
      for (const char *variant : {"none", "causal"})
        for (auto [b, hq, hkv, sq, sk] : shapes)
          cases.push_back({dtype, headDim, variant, b, hq, hkv, sq, sk, index++});
  // The other head dims' combine kernels load a row's partials in other widths (float2 chunks, a partial last one).
  for (int headDim : {96, 256})
    for (const char *variant : {"none", "causal"})
      for (auto [b, hq, hkv, sq, sk] : {shapes[1], shapes[3], shapes[4], shapes[6]})
        cases.push_back({DType::BF16, headDim, variant, b, hq, hkv, sq, sk, index++});
  return cases;
}

std::vector<Case> fa2Cases() {
  std::vector<Case> cases;
  int index = 5000;
  for (const char *variant : {"causal_top_left", "sliding_window", "sliding_window_causal", "softcap", "softcap_causal",
                              "alibi", "alibi_causal", "sinks", "sinks_causal"})
    for (auto [sq, sk] : {std::pair{1, 3000}, {4, 777}, {16, 64}})
      cases.push_back({DType::BF16, 128, variant, 2, 16, 4, sq, sk, index++});
  return cases;
}

class DecodeGpu : public testing::TestWithParam<Case> {};
TEST_P(DecodeGpu, EverySplitCountMatchesTheReference) {
  REQUIRE_GPU();
  checkAgainstReference(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Cases, DecodeGpu, testing::ValuesIn(referenceCases()),
                         [](const testing::TestParamInfo<Case> &info) { return caseName(info.param); });

class DecodeGpuVariants : public testing::TestWithParam<Case> {};
TEST_P(DecodeGpuVariants, EverySplitCountMatchesFa2) {
  REQUIRE_GPU();
  checkAgainstFa2(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Variants, DecodeGpuVariants, testing::ValuesIn(fa2Cases()),
                         [](const testing::TestParamInfo<Case> &info) { return caseName(info.param); });

TEST(DecodeGpuWorkspace, ACallerWorkspaceThatIsTooSmallIsAnErrorAndABigEnoughOneIsUsed) {
  REQUIRE_GPU();
  Case c{DType::BF16, 128, "causal", 1, 32, 8, 1, 8192, 9000};
  Tensors t;
  ASSERT_OK(makeTensors(c, baseSeed(), t));
  AttentionArgs args = argsOf(c, t);
  args.numSplits = 4;
  DeviceBuffer workspace;
  const size_t bytes = splitKvWorkspaceBytes(1LL * c.headsQ * c.seqlenQ, c.headDim, 4);
  ASSERT_OK(workspace.allocate(bytes));
  args.workspace = workspace.as<void>();
  args.workspaceBytes = bytes - 256;
  Status small = gpu().decode->forward(args);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("workspaceBytes"), std::string::npos) << small.message();
  args.workspaceBytes = bytes;
  ASSERT_OK(gpu().decode->forward(args));
  ASSERT_OK(synchronize("decode forward"));
  std::vector<float> lse;
  ASSERT_OK(t.lse.download(lse));
  EXPECT_TRUE(std::none_of(lse.begin(), lse.end(), [](float x) { return std::isnan(x); }));
}

} // namespace
