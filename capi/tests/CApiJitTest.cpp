// CApiJitTest.cpp — the C ABI's JIT entry points (CApiJit.h) through libflashtile_jit.so itself: hostile
// descriptions are errors, never crashes, on any thread's stack. scripts/sanitize.sh runs it under ASan and UBSan.
#include "flashtile/runtime/CApiJit.h"

#include <gtest/gtest.h>

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <functional>
#include <string>

namespace {

/// The error of an entry point that must fail, or "" (and the result freed) when it succeeded.
std::string errorOf(char *result) {
  if (result) {
    flashtile_string_free(result);
    return "";
  }
  return flashtile_last_error();
}

/// Runs `fn` on a thread with a `stackBytes` stack: what an embedding program's worker threads may have.
void onSmallStack(size_t stackBytes, const std::function<void()> &fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stackBytes), 0);
  pthread_t thread;
  auto *task = new std::function<void()>(fn);
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void *arg) -> void * {
                  auto *f = static_cast<std::function<void()> *>(arg);
                  (*f)();
                  delete f;
                  return nullptr;
                },
                task),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

constexpr const char *kSoftcap = R"({"format": "flashtile.variant.v1", "name": "softcap",
  "params": [{"name": "cap", "value": 30, "min": 0, "min_exclusive": true}],
  "hooks": {"score": {"nodes": [["arg", 0], ["param", "cap"], ["div", 0, 1], ["tanh", 2], ["mul", 1, 3]],
                      "results": [4]}}})";

TEST(CApiJit, DeepDescriptionsAreErrorsOnEveryEntryPoint) {
  // 100,000 nested arrays overflowed the JSON parser's stack in each of these (10,000 on a 1 MB stack).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string expected = "arrays and objects nested more than";
  onSmallStack(256 << 10, [&] {
    EXPECT_NE(errorOf(flashtile_register_variant(deep.c_str())).find(expected), std::string::npos);
    EXPECT_NE(errorOf(flashtile_variant_id(("{\"x\":" + deep + "}").c_str())).find(expected), std::string::npos);
    EXPECT_NE(
        errorOf(flashtile_compile_variant(("{\"x\":" + deep + "}").c_str(), "cuda", FLASHTILE_BF16, 64, 0, "sm_80"))
            .find(expected),
        std::string::npos);
  });
}

TEST(CApiJit, DescriptionsCompile) {
  char *id = flashtile_register_variant(kSoftcap);
  ASSERT_NE(id, nullptr) << flashtile_last_error();
  EXPECT_EQ(std::string(id).rfind("softcap#", 0), 0u) << id;
  char *again = flashtile_variant_id(kSoftcap);
  ASSERT_NE(again, nullptr) << flashtile_last_error();
  EXPECT_STREQ(id, again);
  flashtile_string_free(id);
  flashtile_string_free(again);
  char *cuda = flashtile_compile_variant(kSoftcap, "cuda", FLASHTILE_BF16, 64, 0, "sm_80");
  ASSERT_NE(cuda, nullptr) << flashtile_last_error();
  EXPECT_NE(std::string(cuda).find("tileTanh"), std::string::npos);
  EXPECT_NE(std::string(cuda).find("__device__ __forceinline__ float scoreMod("), std::string::npos);
  flashtile_string_free(cuda);
}

TEST(CApiJit, LongChainsPrintAsShallowCalledFunctions) {
  // A score hook of N chained additions was one CUDA expression N parentheses deep, inlined at every score
  // element: NVRTC took 42 s over N = 1000, minutes and gigabytes over more. Past a small depth its values are
  // named, and a hook that large is a function the kernel calls. 256 nodes: the most a hook may have.
  std::string nodes = R"(["arg", 0])";
  for (int i = 1; i < 256; ++i)
    nodes += R"(, ["add", )" + std::to_string(i - 1) + ", 0]";
  std::string description = R"({"format": "flashtile.variant.v1", "name": "chain", "hooks": {"score": {"nodes": [)" +
                            nodes + R"(], "results": [255]}}})";
  char *cuda = flashtile_compile_variant(description.c_str(), "cuda", FLASHTILE_BF16, 64, 0, "sm_80");
  ASSERT_NE(cuda, nullptr) << flashtile_last_error();
  EXPECT_NE(std::string(cuda).find("__device__ __noinline__ float scoreMod("), std::string::npos);
  int depth = 0, deepest = 0;
  for (const char *c = cuda; *c; ++c) {
    depth += *c == '(' ? 1 : *c == ')' ? -1 : 0;
    deepest = std::max(deepest, depth);
  }
  flashtile_string_free(cuda);
  EXPECT_LE(deepest, 40);
}

TEST(CApiJit, CompileVariantTakesTheArchAliasesTheCliTakes) {
  for (const char *alias : {"sm_86", "sm_89", "sm_90", "sm_100"}) {
    SCOPED_TRACE(alias);
    char *tile = flashtile_compile_variant("causal", "tile", FLASHTILE_BF16, 64, 0, alias);
    EXPECT_NE(tile, nullptr) << flashtile_last_error();
    flashtile_string_free(tile);
  }
  std::string unknown = errorOf(flashtile_compile_variant("causal", "tile", FLASHTILE_BF16, 64, 0, "sm90a"));
  EXPECT_NE(unknown.find("arch: unknown arch 'sm90a' (did you mean 'sm_90a'?); accepted: "), std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("sm_89"), std::string::npos) << unknown;
}

TEST(CApiJit, AMegabyteOfInputIsNotEchoedWhole) {
  const std::string huge(1 << 20, 'x');
  for (const std::string &error :
       {errorOf(flashtile_variant_id(huge.c_str())),
        errorOf(flashtile_compile_variant(huge.c_str(), "tile", FLASHTILE_BF16, 64, 0, "sm_80")),
        errorOf(flashtile_compile_variant("causal", huge.c_str(), FLASHTILE_BF16, 64, 0, "sm_80")),
        errorOf(flashtile_compile_variant("causal", "tile", FLASHTILE_BF16, 64, 0, huge.c_str()))}) {
    EXPECT_LT(error.size(), 1000u) << error.substr(0, 300);
    EXPECT_NE(error.find("... (1048576 bytes)"), std::string::npos) << error.substr(0, 300);
  }
}

TEST(CApiJit, BadArgumentsAreErrors) {
  EXPECT_EQ(flashtile_enable_jit(nullptr), -1);
  EXPECT_NE(std::string(flashtile_last_error()).find("rt must not be NULL"), std::string::npos);
  EXPECT_NE(errorOf(flashtile_register_variant(nullptr)).find("must not be NULL"), std::string::npos);
  EXPECT_NE(errorOf(flashtile_variant_id(nullptr)).find("empty string"), std::string::npos);
  EXPECT_NE(errorOf(flashtile_compile_variant("causal", "sass", FLASHTILE_BF16, 64, 0, "sm_80")).find("stage"),
            std::string::npos);
  EXPECT_NE(errorOf(flashtile_compile_variant("causal", "tile", 7, 64, 0, "sm_80")).find("dtype: 7"),
            std::string::npos);
  EXPECT_NE(errorOf(flashtile_compile_variant("causal", "tile", FLASHTILE_BF16, 65, 0, "sm_80")).find("head_dim"),
            std::string::npos);
  EXPECT_NE(errorOf(flashtile_compile_variant("causal", "tile", FLASHTILE_BF16, 64, 0, "sm_999")).find("arch"),
            std::string::npos);
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_enable_jit(rt), 0) << flashtile_last_error();
  flashtile_destroy(rt);
}

} // namespace

namespace {

/// A small reference problem: GQA (2 query heads a K/V head), Sq < Sk, head dims 3 and 2.
struct ReferenceCase {
  static constexpr int kBatch = 2, kSq = 3, kSk = 5, kHq = 2, kHkv = 1, kD = 3, kDv = 2;
  std::vector<double> q, k, v, dO, o, lse, dq, dk, dv;
  std::vector<double> slopes{0.5, -0.25};
  flashtile_reference_call call{};

  explicit ReferenceCase(const char *variant) {
    auto fill = [](std::vector<double> &x, size_t n, double phase) {
      x.resize(n);
      for (size_t i = 0; i < n; ++i)
        x[i] = std::sin(0.7 * double(i) + phase);
    };
    fill(q, size_t(kBatch) * kSq * kHq * kD, 0.1);
    fill(k, size_t(kBatch) * kSk * kHkv * kD, 0.2);
    fill(v, size_t(kBatch) * kSk * kHkv * kDv, 0.3);
    fill(dO, size_t(kBatch) * kSq * kHq * kDv, 0.4);
    o.resize(dO.size()), lse.resize(size_t(kBatch) * kHq * kSq), dq.resize(q.size()), dk.resize(k.size()),
        dv.resize(v.size());
    call.size = sizeof(call);
    call.variant = variant;
    call.batch = kBatch, call.seqlen_q = kSq, call.seqlen_k = kSk, call.heads_q = kHq, call.heads_kv = kHkv;
    call.head_dim = kD, call.head_dim_v = kDv;
  }
  /// Points the call at the vectors (after any resize) and runs it: 0 or -1.
  int run(bool backward) {
    call.q = q.data(), call.k = k.data(), call.v = v.data(), call.o = o.data(), call.lse = lse.data();
    call.d_o = backward ? dO.data() : nullptr;
    call.d_q = dq.data(), call.d_k = dk.data(), call.d_v = dv.data();
    return flashtile_reference_attention(&call);
  }
  double loss() {
    EXPECT_EQ(run(false), 0) << flashtile_last_error();
    double sum = 0;
    for (size_t i = 0; i < o.size(); ++i)
      sum += dO[i] * o[i];
    return sum;
  }
  /// The largest difference between `analytic` and central differences of the loss over the elements of `x`.
  double worstError(const std::vector<double> &analytic, std::vector<double> &x) {
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double saved = x[i];
      x[i] = saved + 1e-5;
      double up = loss();
      x[i] = saved - 1e-5;
      double down = loss();
      x[i] = saved;
      worst = std::max(worst, std::abs(analytic[i] - (up - down) / 2e-5));
    }
    return worst;
  }
};

} // namespace

TEST(CApiReference, GradientsMatchFiniteDifferences) {
  ReferenceCase softcap("softcap_causal");
  softcap.call.num_params = 1;
  softcap.call.params[0] = 2.0; // small, so that tanh bends
  double dCap = 0;
  softcap.call.param_grads = &dCap;
  ASSERT_EQ(softcap.run(true), 0) << flashtile_last_error();
  std::vector<double> dq = softcap.dq, dk = softcap.dk, dv = softcap.dv;
  EXPECT_LT(softcap.worstError(dq, softcap.q), 1e-7);
  EXPECT_LT(softcap.worstError(dk, softcap.k), 1e-7);
  EXPECT_LT(softcap.worstError(dv, softcap.v), 1e-7);
  EXPECT_GT(std::abs(dq[0]) + std::abs(dk[0]), 1e-3) << "vacuous: zero gradients";

  ReferenceCase alibi("alibi");
  alibi.call.num_inputs = 1;
  alibi.call.inputs[0] = alibi.slopes.data();
  alibi.call.input_lengths[0] = 2;
  std::vector<double> dSlopes(2, 0);
  alibi.call.input_grads[0] = dSlopes.data();
  ASSERT_EQ(alibi.run(true), 0) << flashtile_last_error();
  std::vector<double> analytic = dSlopes;
  EXPECT_LT(alibi.worstError(analytic, alibi.slopes), 1e-7);
  EXPECT_GT(std::abs(analytic[0]) + std::abs(analytic[1]), 1e-3) << "vacuous: zero slope gradients";
}

TEST(CApiReference, BadCallsAreErrorsNamingTheArgument) {
  auto errorOfCall = [](ReferenceCase &c) {
    return c.run(true) == 0 ? std::string() : std::string(flashtile_last_error());
  };
  EXPECT_NE(flashtile_reference_attention(nullptr), 0);
  {
    ReferenceCase c("none");
    c.call.size = 8;
    EXPECT_NE(errorOfCall(c).find("call->size"), std::string::npos);
  }
  {
    ReferenceCase c("softcap");
    EXPECT_NE(errorOfCall(c).find("num_params: variant 'softcap' takes 1"), std::string::npos);
  }
  {
    ReferenceCase c("softcap");
    c.call.num_params = 1;
    c.call.params[0] = -1; // cap must be positive
    EXPECT_NE(errorOfCall(c).find("params:"), std::string::npos);
  }
  {
    ReferenceCase c("document_mask");
    std::vector<int> starts(size_t(ReferenceCase::kBatch) * ReferenceCase::kSk, 0);
    double grad[10];
    c.call.num_inputs = 1;
    c.call.inputs[0] = starts.data();
    c.call.input_lengths[0] = static_cast<long long>(starts.size());
    c.call.input_grads[0] = grad;
    EXPECT_NE(errorOfCall(c).find("an i32 input has no gradient"), std::string::npos);
  }
  {
    // The work product passes 2^63: printed whole, not converted to an integer (undefined; LLONG_MIN on x86).
    ReferenceCase c("none");
    c.call.batch = c.call.heads_q = c.call.heads_kv = c.call.seqlen_q = c.call.seqlen_k = 1 << 30;
    std::string error = errorOfCall(c);
    const std::string expected = "(head_dim + head_dim_v) = 6646139978924579364519035301401722880 exceeds";
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    EXPECT_EQ(error.find("= -"), std::string::npos) << error;
  }
  {
    ReferenceCase c("none");
    c.call.heads_kv = 0;
    EXPECT_NE(errorOfCall(c).find("heads_kv: must be at least 1"), std::string::npos);
  }
  {
    ReferenceCase c("none");
    c.call.seqlen_q = c.call.seqlen_k = 1 << 14; // checked before any array is read
    EXPECT_NE(errorOfCall(c).find("FLASHTILE_REFERENCE_MAX_WORK"), std::string::npos);
  }
  {
    ReferenceCase c("no_such_variant");
    EXPECT_NE(errorOfCall(c).find("variant: unknown built-in"), std::string::npos);
  }
}
