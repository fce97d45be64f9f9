// CApiJitTest.cpp — the C ABI's JIT entry points (CApiJit.h) through libflashtile_jit.so itself: hostile
// descriptions are errors, never crashes, on any thread's stack. scripts/sanitize.sh runs it under ASan and UBSan.
#include "flashtile/runtime/CApiJit.h"

#include <gtest/gtest.h>

#include <pthread.h>

#include <algorithm>
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
