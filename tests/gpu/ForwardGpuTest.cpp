// ForwardGpuTest.cpp — flashtile's attention forward on a real GPU, checked against a reference kernel.
//
// The reference is a small CUDA kernel (tools/reference, GpuReference.h), compiled with NVRTC on the test machine:
// one thread block per (batch, head, query row) scores every key in fp32, takes the softmax in fp32 and multiplies
// by V. It runs in two modes, as FlashAttention's tests do:
//   fp32 — the bf16/f16 inputs upcast, everything in fp32 (ref_fp32);
//   lowp — a framework running in the low precision: S rounded to the dtype after scaling, the normalized P
//          rounded before P·V, O rounded (ref_lowp).
// A case passes (reference::compare) when max|out − ref_fp32| ≤ 2·max|ref_lowp − ref_fp32| + 1e-5, |lse − lse_ref| ≤
// 1e-3 (both −inf on fully masked rows, whose O must be exactly 0), nothing is NaN, and O's padding (non-packed
// layouts) is left untouched. Inputs are fresh N(0, 1) values every run; the seed is printed (FLASHTILE_TEST_SEED
// replays it).
//
// Environment:
//   FLASHTILE_AOT_DIR      ahead-of-time kernel directory (`flashtile aot --arch sm_90a --out DIR`), or several
//                          separated by ':'; required
//                          where a GPU is present — without it the forward tests fail, they never skip there.
//   FLASHTILE_SCHEDULE     the schedule the forward cases run (default: the dispatch rules' choice among the
//                          libraries' kernels, fa3's on sm_90a where it has one)
//   FLASHTILE_STRICT_SCHEDULE  "1": a call whose preferred (or named) schedule has no kernel fails instead of
//                          falling back (e.g. an fa2 + fa3 library at head dims fa3 has kernels for)
//   FLASHTILE_EXPECT_SCHEDULE  a schedule name: every forward call must run that schedule's kernel, chosen without a
//                          fallback (Runtime::explain), e.g. fa3 on sm_90a with no schedule named: a case the
//                          library's fa3 kernels do not serve fails instead of passing on fa2's
//   FLASHTILE_REQUIRE_GPU  "1": a missing GPU/driver fails instead of skipping (the GPU machine's script sets it).
//   FLASHTILE_TEST_SEED    fixed base seed (decimal) to replay a failure.
//   FLASHTILE_TEST_CASE_TIMEOUT  seconds one case may take before the process exits (default 120; 0: none).
// Without an NVIDIA GPU/driver every GPU test skips with the reason; the argument-checking test runs everywhere.
#include "GpuReference.h"
#include "GpuTestSupport.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace flashtile;
using namespace flashtile::gpu_test;

namespace {

using reference::DeviceBuffer;
using reference::GpuReference;
using reference::lowToFloat;
using reference::Precision;
using reference::synchronize;

/// Everything the GPU tests share, set up once: the driver and context, the reference kernels, the runtime with
/// the ahead-of-time kernels.
struct Gpu : GpuState {
  std::string aotError; // set: FLASHTILE_AOT_DIR missing or unloadable (forward tests fail)
  std::string aotDir;
  std::unique_ptr<Runtime> runtime;
};

Gpu makeGpu() {
  Gpu gpu;
  if (!findGpu(gpu, /*withReference=*/true))
    return gpu;

  // Memory-only JIT cache and no JIT compiler: every kernel must come from the ahead-of-time directory.
  gpu.runtime = std::make_unique<Runtime>(KernelCache::Options{"", false});
  gpu.aotDir = envOr("FLASHTILE_AOT_DIR", "");
  if (gpu.aotDir.empty()) {
    gpu.aotError = "FLASHTILE_AOT_DIR is not set: on a machine with a GPU these tests need ahead-of-time kernels "
                   "(made on the build machine with `flashtile aot --arch " +
                   gpu.arch + " --out DIR`); they do not skip here";
  } else {
    // A colon-separated list: e.g. fa2's library and fa3's.
    for (size_t begin = 0; begin <= gpu.aotDir.size() && gpu.aotError.empty();) {
      size_t end = std::min(gpu.aotDir.find(':', begin), gpu.aotDir.size());
      std::string dir = gpu.aotDir.substr(begin, end - begin);
      if (Status s = gpu.runtime->loadAotDirectory(dir); !s.ok())
        gpu.aotError = "FLASHTILE_AOT_DIR: " + dir + " could not be loaded: " + s.message();
      begin = end + 1;
    }
  }
  // The schedule whose kernels the forward cases run (default: the dispatch rules' choice among the libraries'
  // kernels, fa3's on sm_90a where it has one); a call it has no kernel for falls back with one log line, or fails
  // with FLASHTILE_STRICT_SCHEDULE=1 (read by the runtime).
  if (const char *schedule = std::getenv("FLASHTILE_SCHEDULE"); schedule && *schedule)
    gpu.runtime->setSchedule(schedule);
  std::string nvrtc = nvrtcVersion().ok() ? *nvrtcVersion() : "?";
  std::printf("[flashtile-gpu] arch %s, NVRTC %s, AOT dir %s, base seed %llu (FLASHTILE_TEST_SEED replays it)\n",
              gpu.arch.c_str(), nvrtc.c_str(), gpu.aotDir.empty() ? "(unset)" : gpu.aotDir.c_str(),
              static_cast<unsigned long long>(baseSeed()));
  std::fflush(stdout);
  return gpu;
}

Gpu &gpu() {
  static Gpu instance = makeGpu();
  return instance;
}

#define REQUIRE_AOT()                                                                                                  \
  do {                                                                                                                 \
    REQUIRE_GPU();                                                                                                     \
    ASSERT_TRUE(gpu().aotError.empty()) << gpu().aotError;                                                             \
  } while (0)

/// How a B x S x H x D tensor is laid out in memory.
enum class Layout {
  Packed,     // flash_attn_func's contiguous BSHD
  HeadPadded, // BSHD with 8 spare elements after each head (head stride D + 8)
  RowPadded,  // BSHD with 16 spare elements after each row and 64 after each batch
  Bhsd,       // heads outermost inside a batch: B x H x S x D
};

const char *layoutName(Layout layout) {
  switch (layout) {
  case Layout::Packed:
    return "packed";
  case Layout::HeadPadded:
    return "headpad";
  case Layout::RowPadded:
    return "rowpad";
  case Layout::Bhsd:
    return "bhsd";
  }
  return "?";
}

struct Tensor {
  std::array<long long, 4> stride{}; // batch, seq, head, dim (elements)
  size_t elements = 0;               // size of the allocation, padding included
  int batch = 0, seqlen = 0, heads = 0, dim = 0;

  long long offset(int b, int s, int h, int d) const { return b * stride[0] + s * stride[1] + h * stride[2] + d; }
};

Tensor makeTensor(Layout layout, int batch, int seqlen, int heads, int dim) {
  Tensor t;
  t.batch = batch;
  t.seqlen = seqlen;
  t.heads = heads;
  t.dim = dim;
  const long long S = seqlen, H = heads, D = dim;
  switch (layout) {
  case Layout::Packed:
    t.stride = {S * H * D, H * D, D, 1};
    break;
  case Layout::HeadPadded:
    t.stride = {S * H * (D + 8), H * (D + 8), D + 8, 1};
    break;
  case Layout::RowPadded:
    t.stride = {S * (H * D + 16) + 64, H * D + 16, D, 1};
    break;
  case Layout::Bhsd:
    t.stride = {H * S * D, D, S * D, 1};
    break;
  }
  t.elements = size_t(batch) * size_t(t.stride[0]); // every layout above has the batch stride outermost
  return t;
}

struct Case {
  DType dtype;
  int headDim, headDimV;
  bool causal;
  int batch, headsQ, headsKv, seqlenQ, seqlenK;
  Layout qoLayout, kvLayout;
  int index; // position in the case list: varies shapes and seeds the inputs
};

std::string caseName(const Case &c) {
  std::ostringstream name;
  name << dtypeName(c.dtype) << "_hd" << c.headDim;
  if (c.headDimV != c.headDim)
    name << "_dv" << c.headDimV;
  name << (c.causal ? "_causal" : "_full") << "_B" << c.batch << "_H" << c.headsQ << "x" << c.headsKv << "_Sq"
       << c.seqlenQ << "_Sk" << c.seqlenK << "_" << layoutName(c.qoLayout) << "_" << layoutName(c.kvLayout);
  return name.str();
}

/// Heads (MHA, GQA and MQA mixed), batch and layouts (half packed, half with padded or head-major strides, all
/// 16-byte aligned), derived from the case's index.
void vary(Case &c) {
  const std::pair<int, int> heads[] = {{1, 1}, {4, 4}, {8, 2}, {2, 1}, {16, 16}, {6, 3}, {16, 4}, {3, 3}, {8, 1}};
  const std::pair<Layout, Layout> layouts[] = {
      {Layout::Packed, Layout::Packed}, {Layout::HeadPadded, Layout::Packed}, {Layout::Packed, Layout::Packed},
      {Layout::Packed, Layout::Bhsd},   {Layout::Packed, Layout::Packed},     {Layout::RowPadded, Layout::HeadPadded}};
  const int index = c.index;
  auto [hq, hkv] = heads[(index * 5 + index / 7) % std::size(heads)];
  c.headsQ = hq;
  c.headsKv = hkv;
  c.batch = 1 + (index * 3 + index / 10) % 4;
  // Keep the largest problems at B·H <= 64 (the reference is simple, not fast).
  while (c.batch > 1 && c.batch * c.headsQ > 64)
    --c.batch;
  auto [qo, kv] = layouts[(index + index / 4) % std::size(layouts)];
  c.qoLayout = qo;
  c.kvLayout = kv;
}

std::vector<Case> allCases() {
  const std::pair<int, int> shapes[] = {{1, 1},     {17, 17},   {128, 128},  {1000, 1000}, {4096, 4096},
                                        {17, 1000}, {1000, 17}, {128, 4096}, {4096, 128},  {1, 4096}};
  std::vector<Case> cases;
  int index = 0;
  for (DType dtype : {DType::F16, DType::BF16})
    for (int headDim : {64, 128})
      for (bool causal : {false, true})
        for (auto [seqlenQ, seqlenK] : shapes) {
          Case c{dtype, headDim, headDim, causal, 1, 1, 1, seqlenQ, seqlenK, Layout::Packed, Layout::Packed, index};
          vary(c);
          cases.push_back(c);
          ++index;
        }
  // The other supported head dims and the 192/128 pair (kSupportedHeadDims, kSupportedHeadDimPairs): fewer shapes,
  // the dtype alternating.
  const std::pair<int, int> moreShapes[] = {{1, 1}, {17, 1000}, {1000, 17}, {128, 128}, {1000, 1000}};
  for (auto [headDim, headDimV] : {std::pair{32, 32}, {96, 96}, {192, 192}, {256, 256}, {192, 128}})
    for (bool causal : {false, true})
      for (auto [seqlenQ, seqlenK] : moreShapes) {
        const DType dtype = index % 2 ? DType::BF16 : DType::F16;
        Case c{dtype, headDim, headDimV, causal, 1, 1, 1, seqlenQ, seqlenK, Layout::Packed, Layout::Packed, index};
        vary(c);
        cases.push_back(c);
        ++index;
      }
  return cases;
}

void PrintTo(const Case &c, std::ostream *out) { *out << caseName(c); }

struct Inputs {
  Tensor q, k, v, o;
  DeviceBuffer qBuf, kBuf, vBuf, oBuf, lseBuf;
};

/// Allocates Q, K, V, O and LSE; Q/K/V padding and all of O and LSE are 0xFF bytes (NaN in bf16, f16 and f32),
/// then the logical Q/K/V elements get N(0, 1) values from `seed`.
Status makeInputs(const Case &c, uint64_t seed, Inputs &in) {
  in.q = makeTensor(c.qoLayout, c.batch, c.seqlenQ, c.headsQ, c.headDim);
  in.o = makeTensor(c.qoLayout, c.batch, c.seqlenQ, c.headsQ, c.headDimV);
  in.k = makeTensor(c.kvLayout, c.batch, c.seqlenK, c.headsKv, c.headDim);
  in.v = makeTensor(c.kvLayout, c.batch, c.seqlenK, c.headsKv, c.headDimV);
  const Tensor *tensors[] = {&in.q, &in.k, &in.v, &in.o};
  DeviceBuffer *buffers[] = {&in.qBuf, &in.kBuf, &in.vBuf, &in.oBuf};
  for (int t = 0; t < 4; ++t) {
    if (Status s = buffers[t]->allocate(tensors[t]->elements * sizeof(uint16_t)); !s.ok())
      return s;
    if (Status s = buffers[t]->fill(0xFF); !s.ok())
      return s;
  }
  if (Status s = in.lseBuf.allocate(size_t(c.batch) * c.headsQ * c.seqlenQ * sizeof(float)); !s.ok())
    return s;
  if (Status s = in.lseBuf.fill(0xFF); !s.ok())
    return s;

  for (int t = 0; t < 3; ++t) {
    const Tensor &tensor = *tensors[t];
    if (Status s = gpu().reference->fill(buffers[t]->as<void>(), c.dtype, tensor.batch, tensor.seqlen, tensor.heads,
                                         tensor.dim, tensor.stride, seed * 3 + t);
        !s.ok())
      return s;
  }
  return synchronize("fill_normal");
}

AttentionArgs forwardArgs(const Case &c, const Inputs &in, float scale) {
  AttentionArgs args;
  args.q = in.qBuf.as<const void>();
  args.k = in.kBuf.as<const void>();
  args.v = in.vBuf.as<const void>();
  args.o = in.oBuf.as<void>();
  args.lse = in.lseBuf.as<float>();
  args.dtype = c.dtype;
  args.batch = c.batch;
  args.seqlenQ = c.seqlenQ;
  args.seqlenK = c.seqlenK;
  args.headsQ = c.headsQ;
  args.headsKv = c.headsKv;
  args.headDim = c.headDim;
  args.headDimV = c.headDimV;
  args.qStride = in.q.stride;
  args.kStride = in.k.stride;
  args.vStride = in.v.stride;
  args.oStride = in.o.stride;
  args.softmaxScale = scale;
  args.variant = c.causal ? "causal" : "none";
  return args;
}

/// Runs the reference on `in` into packed fp32 O (B x Sq x Hq x D) and LSE (B x Hq x Sq).
Status runReference(const Case &c, const Inputs &in, float scale, bool lowp, std::vector<float> &o,
                    std::vector<float> &lse) {
  StatusOr<reference::ReferenceOutputs> out =
      gpu().reference->runToHost(forwardArgs(c, in, scale), c.causal, lowp ? Precision::Lowp : Precision::Fp32);
  if (!out.ok())
    return out.status();
  o = std::move(out->o);
  lse = std::move(out->lse);
  return Status();
}

uint64_t caseSeed(const Case &c) { return baseSeed() + 0x9E3779B97F4A7C15ULL * uint64_t(c.index + 1); }

/// How long one case may run before the watchdog ends the process (FLASHTILE_TEST_CASE_TIMEOUT overrides it).
constexpr double kCaseTimeoutSeconds = 120;

/// With FLASHTILE_EXPECT_SCHEDULE set: `args` runs that schedule's kernel, and not as a fallback.
void expectChosenSchedule(const AttentionArgs &args) {
  const std::string expected = envOr("FLASHTILE_EXPECT_SCHEDULE", "");
  if (expected.empty())
    return;
  StatusOr<ScheduleChoice> choice = gpu().runtime->explain(args);
  ASSERT_TRUE(choice.ok()) << "explain: " << choice.status().message();
  EXPECT_EQ(choice->spec.schedule, expected) << "FLASHTILE_EXPECT_SCHEDULE; the call runs " << choice->entry << ": "
                                             << choice->reason;
  EXPECT_FALSE(choice->fellBack) << choice->reason;
}

/// Runs flashtile and both references on fresh inputs and checks FlashAttention's rule.
void checkForward(const Case &c) {
  const uint64_t seed = caseSeed(c);
  const std::string where = caseName(c) + " (seed " + std::to_string(seed) +
                            ", base seed FLASHTILE_TEST_SEED=" + std::to_string(baseSeed()) + ")";
  SCOPED_TRACE(where);
  Watchdog watchdog("flashtile-gpu", where, kCaseTimeoutSeconds);
  Inputs in;
  ASSERT_OK(makeInputs(c, seed, in));
  const float scale = 1.0f / std::sqrt(float(c.headDim));

  ASSERT_OK(gpu().runtime->forward(forwardArgs(c, in, scale)));
  ASSERT_OK(synchronize("flashtile forward"));
  expectChosenSchedule(forwardArgs(c, in, scale));
  std::vector<uint16_t> oRaw;
  std::vector<float> lse;
  ASSERT_OK(in.oBuf.download(oRaw));
  ASSERT_OK(in.lseBuf.download(lse));

  reference::ReferenceOutputs fp32, lowp;
  ASSERT_OK(runReference(c, in, scale, /*lowp=*/false, fp32.o, fp32.lse));
  ASSERT_OK(runReference(c, in, scale, /*lowp=*/true, lowp.o, lowp.lse));
  StatusOr<reference::Comparison> compared = reference::compare(forwardArgs(c, in, scale), oRaw, lse, fp32, lowp);
  ASSERT_OK(compared.status());
  const reference::Comparison &cmp = *compared;
  ASSERT_EQ(cmp.referenceNans, 0)
      << "the reference produced NaN: a bug in this test's reference kernel, not in flashtile";

  const bool pass = cmp.pass();
  const std::string headDims =
      std::to_string(c.headDim) + (c.headDimV != c.headDim ? "/" + std::to_string(c.headDimV) : "");
  std::printf("[flashtile-gpu] %-4s hd=%-3s causal=%d B=%d H=%d/%d Sq=%-4d Sk=%-4d qo=%-7s kv=%-7s "
              "err_ours=%.3e err_lowp=%.3e ratio=%s lse_err=%.2e %s%s\n",
              std::string(dtypeName(c.dtype)).c_str(), headDims.c_str(), int(c.causal), c.batch, c.headsQ, c.headsKv,
              c.seqlenQ, c.seqlenK, layoutName(c.qoLayout), layoutName(c.kvLayout), cmp.errOurs, cmp.errLowp,
              cmp.ratioText().c_str(), cmp.errLse, pass ? "PASS" : "FAIL",
              pass ? "" : (" seed=" + std::to_string(seed)).c_str());
  std::fflush(stdout);

  EXPECT_EQ(cmp.nanCount, 0) << "O has " << cmp.nanCount << " NaN elements (unwritten output reads as NaN); first at "
                             << cmp.firstNan;
  EXPECT_EQ(cmp.maskedNonzero, 0) << "fully masked rows must give O = 0; " << cmp.maskedNonzero
                                  << " elements are not, first at " << cmp.firstMasked;
  EXPECT_EQ(cmp.paddingWrites, 0) << cmp.paddingWrites << " elements of O's padding (outside its rows) were written";
  EXPECT_LE(cmp.errOurs, cmp.tolerance) << "max|out - ref_fp32| = " << cmp.errOurs
                                        << " exceeds 2*max|ref_lowp - ref_fp32| + 1e-5 = " << cmp.tolerance
                                        << "; worst at " << cmp.worst;
  EXPECT_EQ(cmp.lseBad, 0) << cmp.lseBad
                           << " LSE values are off by more than 1e-3 (or not -inf on fully masked rows); first "
                           << cmp.firstLseBad;
}

// ---------------------------------------------------------------------------------------------------------------
// Varlen (flash_attn_varlen_func): packed sequences with int32 cu_seqlens, each checked against the reference run on
// that sequence alone (a dense call on sub-pointers of the packed tensors).

struct VarlenCase {
  DType dtype;
  int headDim, headDimV;
  bool causal;
  int headsQ, headsKv;
  std::vector<int> lengthsQ, lengthsK; // per sequence
  int index;                           // seeds the inputs
};

std::string varlenCaseName(const VarlenCase &c) {
  std::ostringstream name;
  name << dtypeName(c.dtype) << "_hd" << c.headDim;
  if (c.headDimV != c.headDim)
    name << "_dv" << c.headDimV;
  name << (c.causal ? "_causal" : "_full") << "_H" << c.headsQ << "x" << c.headsKv << "_B" << c.lengthsQ.size();
  return name.str();
}

void PrintTo(const VarlenCase &c, std::ostream *out) { *out << varlenCaseName(c); }

std::vector<VarlenCase> varlenCases() {
  // Sequences of different lengths, Sq_b != Sk_b both ways, an empty query sequence (nothing to write), an empty key
  // sequence (O = 0, LSE = -inf), sequences shorter and longer than a Q tile.
  const std::vector<int> q = {1, 300, 0, 129, 1000, 64, 17}, k = {1, 257, 33, 0, 1200, 64, 4000};
  std::vector<VarlenCase> cases;
  int index = 3000;
  for (DType dtype : {DType::F16, DType::BF16})
    for (bool causal : {false, true}) {
      cases.push_back({dtype, 128, 128, causal, 8, 2, q, k, index++});
      cases.push_back({dtype, 64, 64, causal, 4, 4, {200, 0, 1}, {100, 5, 300}, index++});
    }
  for (bool causal : {false, true}) {
    cases.push_back({DType::BF16, 192, 128, causal, 4, 1, q, k, index++});
    cases.push_back({DType::BF16, 32, 32, causal, 2, 1, {513, 7}, {9, 700}, index++});
    cases.push_back({DType::BF16, 256, 256, causal, 2, 2, {70, 0, 129}, {0, 3, 200}, index++});
  }
  return cases;
}

/// Allocates each buffer with its size in bytes, every byte kPoisonByte (unwritten elements read as NaN).
Status allocatePoisoned(std::initializer_list<std::pair<DeviceBuffer *, size_t>> buffers) {
  for (auto [buffer, bytes] : buffers) {
    if (Status s = buffer->allocate(bytes); !s.ok())
      return s;
    if (Status s = buffer->fill(reference::kPoisonByte); !s.ok())
      return s;
  }
  return Status();
}

/// `offsets` (varlen's cu_seqlens) in a new device buffer.
Status uploadOffsets(DeviceBuffer &buffer, const std::vector<int> &offsets) {
  if (Status s = buffer.allocate(offsets.size() * sizeof(int)); !s.ok())
    return s;
  const CudaDriver &d = *gpu().driver;
  return d.check(d.cuMemcpyHtoD_v2(buffer.address(), offsets.data(), offsets.size() * sizeof(int)), "cuMemcpyHtoD");
}

/// Runs flashtile once on all sequences, then the references sequence by sequence, and checks FlashAttention's
/// rule on each sequence's rows of O and LSE (LSE is Hq x total_q).
void checkVarlen(const VarlenCase &c) {
  const uint64_t seed = baseSeed() + 0x9E3779B97F4A7C15ULL * uint64_t(c.index + 1);
  const std::string where = varlenCaseName(c) + " (seed " + std::to_string(seed) +
                            ", base seed FLASHTILE_TEST_SEED=" + std::to_string(baseSeed()) + ")";
  SCOPED_TRACE(where);
  Watchdog watchdog("flashtile-gpu", where, kCaseTimeoutSeconds);
  const int batch = int(c.lengthsQ.size());
  std::vector<int> cuQ(batch + 1, 0), cuK(batch + 1, 0);
  for (int b = 0; b < batch; ++b) {
    cuQ[b + 1] = cuQ[b] + c.lengthsQ[b];
    cuK[b + 1] = cuK[b] + c.lengthsK[b];
  }
  const int totalQ = cuQ.back(), totalK = cuK.back();
  const int maxQ = *std::max_element(c.lengthsQ.begin(), c.lengthsQ.end());
  const int maxK = *std::max_element(c.lengthsK.begin(), c.lengthsK.end());
  const int Hq = c.headsQ, Hkv = c.headsKv, D = c.headDim, Dv = c.headDimV;

  // Packed tensors: one batch entry of totalQ (totalK) rows. O and LSE poisoned: unwritten elements read as NaN.
  const Tensor q = makeTensor(Layout::Packed, 1, totalQ, Hq, D), k = makeTensor(Layout::Packed, 1, totalK, Hkv, D),
               v = makeTensor(Layout::Packed, 1, totalK, Hkv, Dv), o = makeTensor(Layout::Packed, 1, totalQ, Hq, Dv);
  DeviceBuffer qBuf, kBuf, vBuf, oBuf, lseBuf, cuQBuf, cuKBuf;
  ASSERT_OK(allocatePoisoned({{&qBuf, q.elements * sizeof(uint16_t)},
                              {&kBuf, k.elements * sizeof(uint16_t)},
                              {&vBuf, v.elements * sizeof(uint16_t)},
                              {&oBuf, o.elements * sizeof(uint16_t)},
                              {&lseBuf, size_t(Hq) * totalQ * sizeof(float)}}));
  ASSERT_OK(uploadOffsets(cuQBuf, cuQ));
  ASSERT_OK(uploadOffsets(cuKBuf, cuK));
  int t = 0;
  for (auto [buffer, tensor] : {std::pair{&qBuf, &q}, {&kBuf, &k}, {&vBuf, &v}})
    ASSERT_OK(gpu().reference->fill(buffer->as<void>(), c.dtype, 1, tensor->seqlen, tensor->heads, tensor->dim,
                                    tensor->stride, seed * 3 + t++));
  ASSERT_OK(synchronize("fill_normal"));

  const float scale = 1.0f / std::sqrt(float(D));
  AttentionArgs args = AttentionArgs::varlen(
      c.dtype, qBuf.as<const void>(), kBuf.as<const void>(), vBuf.as<const void>(), oBuf.as<void>(), lseBuf.as<float>(),
      cuQBuf.as<const int>(), cuKBuf.as<const int>(), batch, totalQ, totalK, maxQ, maxK, Hq, Hkv, D, Dv);
  args.cuSeqlensQHost = cuQ.data(); // checked by validate()
  args.cuSeqlensKHost = cuK.data();
  args.softmaxScale = scale;
  args.variant = c.causal ? "causal" : "none";
  ASSERT_OK(gpu().runtime->forward(args));
  ASSERT_OK(synchronize("flashtile forward (varlen)"));
  expectChosenSchedule(args);
  std::vector<uint16_t> oRaw;
  std::vector<float> lse;
  ASSERT_OK(oBuf.download(oRaw));
  ASSERT_OK(lseBuf.download(lse));

  for (int b = 0; b < batch; ++b) {
    const int q0 = cuQ[b], k0 = cuK[b], Sq = c.lengthsQ[b], Sk = c.lengthsK[b];
    if (Sq == 0)
      continue; // nothing to write; rows of other sequences are checked with theirs
    SCOPED_TRACE("sequence " + std::to_string(b) + " (Sq " + std::to_string(Sq) + ", Sk " + std::to_string(Sk) + ")");
    // The sequence alone, as a dense call on sub-pointers (o and lse are not used by the reference).
    AttentionArgs one =
        AttentionArgs::contiguous(c.dtype, qBuf.as<const void>(size_t(q0) * q.stride[1] * sizeof(uint16_t)),
                                  kBuf.as<const void>(size_t(k0) * k.stride[1] * sizeof(uint16_t)),
                                  vBuf.as<const void>(size_t(k0) * v.stride[1] * sizeof(uint16_t)), oBuf.as<void>(),
                                  lseBuf.as<float>(), 1, Sq, Sk, Hq, Hkv, D, Dv);
    one.softmaxScale = scale;
    StatusOr<reference::ReferenceOutputs> fp32 = gpu().reference->runToHost(one, c.causal, Precision::Fp32);
    ASSERT_OK(fp32.status());
    StatusOr<reference::ReferenceOutputs> lowp = gpu().reference->runToHost(one, c.causal, Precision::Lowp);
    ASSERT_OK(lowp.status());
    ASSERT_EQ(std::count_if(fp32->o.begin(), fp32->o.end(), [](float x) { return std::isnan(x); }), 0)
        << "the reference produced NaN: a bug in this test's reference kernel, not in flashtile";
    // This sequence's rows of O (contiguous in the packed layout) and of LSE (columns q0.. of each head's row).
    const std::vector<uint16_t> oSeq(oRaw.begin() + size_t(q0) * o.stride[1],
                                     oRaw.begin() + size_t(q0 + Sq) * o.stride[1]);
    std::vector<float> lseSeq;
    for (int h = 0; h < Hq; ++h)
      lseSeq.insert(lseSeq.end(), lse.begin() + size_t(h) * totalQ + q0, lse.begin() + size_t(h) * totalQ + q0 + Sq);
    StatusOr<reference::Comparison> compared = reference::compare(one, oSeq, lseSeq, *fp32, *lowp);
    ASSERT_OK(compared.status());
    const reference::Comparison &cmp = *compared;
    std::printf("[flashtile-gpu] varlen %-4s hd=%d/%d causal=%d H=%d/%d seq %d/%d Sq=%-4d Sk=%-4d err_ours=%.3e "
                "err_lowp=%.3e ratio=%s lse_err=%.2e %s%s\n",
                std::string(dtypeName(c.dtype)).c_str(), D, Dv, int(c.causal), Hq, Hkv, b, batch, Sq, Sk, cmp.errOurs,
                cmp.errLowp, cmp.ratioText().c_str(), cmp.errLse, cmp.pass() ? "PASS" : "FAIL",
                cmp.pass() ? "" : (" seed=" + std::to_string(seed)).c_str());
    std::fflush(stdout);
    for (const std::string &failure : cmp.failures())
      ADD_FAILURE() << failure;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Tests.

class ForwardGpu : public testing::TestWithParam<Case> {};

TEST_P(ForwardGpu, MatchesReference) {
  REQUIRE_AOT();
  checkForward(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, ForwardGpu, testing::ValuesIn(allCases()),
                         [](const testing::TestParamInfo<Case> &info) { return caseName(info.param); });

/// Every head-dim pair the runtime serves (kSupportedHeadDims, kSupportedHeadDimPairs), for the edge cases.
std::vector<std::pair<int, int>> supportedHeadDimPairs() {
  std::vector<std::pair<int, int>> pairs;
  for (int headDim : kSupportedHeadDims)
    pairs.emplace_back(headDim, headDim);
  pairs.insert(pairs.end(), kSupportedHeadDimPairs.begin(), kSupportedHeadDimPairs.end());
  return pairs;
}

/// The edge cases, per head-dim pair: named hdD_vDV, so that filters by head dim (`*hd64_*`) select them too.
class ForwardGpuEdge : public testing::TestWithParam<std::pair<int, int>> {};

// seqlenK = 0 is a valid call (Runtime.h): O = 0 and LSE = -inf, nothing NaN.
TEST_P(ForwardGpuEdge, EmptyKeysGiveZeroOutputAndMinusInfLse) {
  REQUIRE_AOT();
  const auto [headDim, headDimV] = GetParam();
  int index = 1000;
  for (DType dtype : {DType::F16, DType::BF16})
    for (bool causal : {false, true})
      checkForward(Case{dtype, headDim, headDimV, causal, 2, 4, 2, 33, 0, Layout::Packed, Layout::Packed, index++});
}

// flash-attn's varlen call with every key sequence empty (total_k = 0): PyTorch passes null K and V; O = 0 and
// LSE = -inf, as for dense seqlenK = 0.
TEST_P(ForwardGpuEdge, VarlenWithoutKeysGivesZeroOutputAndMinusInfLseWithNullKAndV) {
  REQUIRE_AOT();
  const auto [headDim, headDimV] = GetParam();
  const std::vector<int> cuQ = {0, 33, 40}, cuK = {0, 0, 0};
  constexpr int kHeadsQ = 4, kHeadsKv = 2, kTotalQ = 40, kMaxQ = 33;
  for (DType dtype : {DType::F16, DType::BF16})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " hd" + std::to_string(headDim) + "/" + std::to_string(headDimV) +
                   (causal ? " causal" : ""));
      DeviceBuffer qBuf, oBuf, lseBuf, cuQBuf, cuKBuf;
      const size_t qElements = size_t(kTotalQ) * kHeadsQ * headDim, oElements = size_t(kTotalQ) * kHeadsQ * headDimV;
      ASSERT_OK(allocatePoisoned({{&qBuf, qElements * sizeof(uint16_t)},
                                  {&oBuf, oElements * sizeof(uint16_t)},
                                  {&lseBuf, size_t(kHeadsQ) * kTotalQ * sizeof(float)}}));
      ASSERT_OK(uploadOffsets(cuQBuf, cuQ));
      ASSERT_OK(uploadOffsets(cuKBuf, cuK));
      AttentionArgs args = AttentionArgs::varlen(
          dtype, qBuf.as<const void>(), nullptr, nullptr, oBuf.as<void>(), lseBuf.as<float>(), cuQBuf.as<const int>(),
          cuKBuf.as<const int>(), 2, kTotalQ, /*totalK=*/0, kMaxQ, /*maxSeqlenK=*/0, kHeadsQ, kHeadsKv, headDim,
          headDimV);
      args.variant = causal ? "causal" : "none";
      ASSERT_OK(gpu().runtime->forward(args));
      ASSERT_OK(synchronize("flashtile forward (varlen, no keys)"));
      expectChosenSchedule(args);
      std::vector<uint16_t> o;
      std::vector<float> lse;
      ASSERT_OK(oBuf.download(o));
      ASSERT_OK(lseBuf.download(lse));
      EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](uint16_t x) { return x == 0 || x == 0x8000; }))
          << "O is not all zeros";
      EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](float x) { return std::isinf(x) && x < 0; }))
          << "LSE is not all -inf";
    }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, ForwardGpuEdge, testing::ValuesIn(supportedHeadDimPairs()),
                         [](const testing::TestParamInfo<std::pair<int, int>> &info) {
                           return "hd" + std::to_string(info.param.first) + "_v" + std::to_string(info.param.second);
                         });

class ForwardGpuVarlen : public testing::TestWithParam<VarlenCase> {};

TEST_P(ForwardGpuVarlen, EverySequenceMatchesTheReference) {
  REQUIRE_AOT();
  checkVarlen(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Varlen, ForwardGpuVarlen, testing::ValuesIn(varlenCases()),
                         [](const testing::TestParamInfo<VarlenCase> &info) { return varlenCaseName(info.param); });

// The reference itself, checked against a plain double-precision loop on the host (small shapes, fp32 mode), so
// that a bug in it cannot hide one in flashtile. Also: lowp stays close to fp32.
TEST(ReferenceKernel, MatchesHostComputation) {
  REQUIRE_GPU();
  for (auto [seqlenQ, seqlenK, causal] : {std::tuple{5, 9, true}, {9, 5, true}, {7, 7, false}, {3, 40, false}}) {
    const Case c{DType::BF16, 64, 64, causal, 2, 4, 2, seqlenQ, seqlenK, Layout::HeadPadded, Layout::Bhsd, 2000};
    SCOPED_TRACE(caseName(c));
    Inputs in;
    ASSERT_OK(makeInputs(c, caseSeed(c), in));
    const float scale = 1.0f / std::sqrt(64.0f);
    std::vector<float> o, lse, oLowp, lseLowp;
    ASSERT_OK(runReference(c, in, scale, false, o, lse));
    ASSERT_OK(runReference(c, in, scale, true, oLowp, lseLowp));
    std::vector<uint16_t> q, k, v;
    ASSERT_OK(in.qBuf.download(q));
    ASSERT_OK(in.kBuf.download(k));
    ASSERT_OK(in.vBuf.download(v));
    const int D = c.headDim, group = c.headsQ / c.headsKv;
    for (int b = 0; b < c.batch; ++b)
      for (int h = 0; h < c.headsQ; ++h)
        for (int i = 0; i < c.seqlenQ; ++i) {
          std::vector<double> s;
          for (int j = 0; j < c.seqlenK && (!causal || j <= i + c.seqlenK - c.seqlenQ); ++j) {
            double dot = 0;
            for (int d = 0; d < D; ++d)
              dot += double(lowToFloat(q[in.q.offset(b, i, h, d)], c.dtype)) *
                     lowToFloat(k[in.k.offset(b, j, h / group, d)], c.dtype);
            s.push_back(dot * scale);
          }
          const size_t row = (size_t(b) * c.seqlenQ + i) * c.headsQ + h;
          const float gotLse = lse[(size_t(b) * c.headsQ + h) * c.seqlenQ + i];
          if (s.empty()) {
            EXPECT_TRUE(std::isinf(gotLse) && gotLse < 0) << "b=" << b << " h=" << h << " i=" << i;
            for (int d = 0; d < D; ++d)
              EXPECT_EQ(o[row * D + d], 0.0f);
            continue;
          }
          const double m = *std::max_element(s.begin(), s.end());
          double l = 0;
          for (double &x : s)
            l += (x = std::exp(x - m));
          EXPECT_NEAR(gotLse, m + std::log(l), 1e-4) << "b=" << b << " h=" << h << " i=" << i;
          for (int d = 0; d < D; ++d) {
            double acc = 0;
            for (size_t j = 0; j < s.size(); ++j)
              acc += s[j] * lowToFloat(v[in.v.offset(b, int(j), h / group, d)], c.dtype);
            EXPECT_NEAR(o[row * D + d], acc / l, 1e-4) << "b=" << b << " h=" << h << " i=" << i << " d=" << d;
            EXPECT_NEAR(oLowp[row * D + d], acc / l, 0.05) << "lowp, b=" << b << " h=" << h << " i=" << i;
          }
        }
  }
}

// The reference source must compile wherever NVRTC is (on the build machine too, where no GPU runs it).
TEST(ReferenceKernel, CompilesWithNvrtc) {
  if (!nvrtcVersion().ok())
    GTEST_SKIP() << "NVRTC not available: " << nvrtcVersion().status().message();
  StatusOr<std::string> cubin = GpuReference::compileCubin("sm_90a");
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
}

// Bad arguments are an error value, never a launch. Runs everywhere: validation comes before the GPU is touched;
// where a GPU is present the buffers are real and O must still hold its poison afterwards.
TEST(ForwardGpuArgs, BadArgumentsReturnAnErrorInsteadOfLaunching) {
  const bool haveGpu = gpu().noGpuReason.empty() && gpu().setupError.empty();
  constexpr int B = 1, S = 64, H = 4, D = 128;
  DeviceBuffer q, k, v, o, lse;
  const void *fake = reinterpret_cast<const void *>(uintptr_t(1) << 20); // aligned, never dereferenced
  const void *qp = fake, *kp = fake, *vp = fake;
  void *op = const_cast<void *>(fake);
  float *lsep = static_cast<float *>(op);
  if (haveGpu) {
    for (DeviceBuffer *buffer : {&q, &k, &v, &o})
      ASSERT_OK(buffer->allocate(size_t(B) * S * H * D * sizeof(uint16_t)));
    ASSERT_OK(lse.allocate(size_t(B) * H * S * sizeof(float)));
    for (DeviceBuffer *buffer : {&q, &k, &v, &o, &lse})
      ASSERT_OK(buffer->fill(0xFF));
    qp = q.as<const void>();
    kp = k.as<const void>();
    vp = v.as<const void>();
    op = o.as<void>();
    lsep = lse.as<float>();
  }
  Runtime runtime(KernelCache::Options{"", false});
  if (const char *dir = std::getenv("FLASHTILE_AOT_DIR"); dir && *dir)
    (void)runtime.loadAotDirectory(dir); // so that a kernel exists and only the argument check can stop the launch
  const AttentionArgs good = AttentionArgs::contiguous(DType::BF16, qp, kp, vp, op, lsep, B, S, S, H, H, D);

  struct Bad {
    const char *what;
    void (*mutate)(AttentionArgs &);
    std::vector<std::string> mentions;
  };
  const Bad bad[] = {
      {"headDim 80", [](AttentionArgs &a) { a.headDim = a.headDimV = 80; }, {"80", "64", "128", "192/128"}},
      {"headsQ not a multiple of headsKv", [](AttentionArgs &a) { a.headsKv = 3; }, {"headsKv"}},
      {"head stride not a multiple of 8", [](AttentionArgs &a) { a.qStride[2] = 100; }, {"qStride[2]"}},
      {"headDimV != headDim", [](AttentionArgs &a) { a.headDimV = 64; }, {"headDimV"}},
      {"null lse", [](AttentionArgs &a) { a.lse = nullptr; }, {"lse"}},
      {"cuSeqlensQ without cuSeqlensK",
       [](AttentionArgs &a) {
         a.cuSeqlensQ = reinterpret_cast<const int *>(uintptr_t(1) << 20);
         a.maxSeqlenQ = 64;
       },
       {"cuSeqlensK is null"}},
  };
  for (const Bad &b : bad) {
    SCOPED_TRACE(b.what);
    AttentionArgs args = good;
    b.mutate(args);
    Status status = runtime.forward(args);
    ASSERT_FALSE(status.ok()) << "forward accepted " << b.what;
    for (const std::string &mention : b.mentions)
      EXPECT_NE(status.message().find(mention), std::string::npos)
          << "the error should mention '" << mention << "': " << status.message();
  }
  if (haveGpu) {
    ASSERT_OK(synchronize("rejected forward calls"));
    std::vector<uint16_t> out;
    ASSERT_OK(o.download(out));
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t x) { return x == 0xFFFF; }))
        << "O was written although every call was rejected";
  }
}

} // namespace
