// VariantDescriptionTest.cpp — variants described as JSON build the programs of the C++ variants with the same
// hooks, and every malformed description is an error naming the field.
#include "capi/VariantDescription.h"
#include "examples/variants/Variants.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/KernelAbi.h"

#include <gtest/gtest.h>

using namespace flashtile;

namespace {

/// causal (examples/variants/Causal.cpp) as the Python tracer writes it, nodes in Python's evaluation order.
const char *kCausal = R"({"format": "flashtile.variant.v1", "name": "causal", "params": [], "inputs": [],
  "hooks": {
    "mask": {"nodes": [["arg", 0], ["arg", 1], ["arg", 2], ["arg", 3], ["arg", 2], ["size", "seqlen_k"],
                       ["add", 4, 5], ["size", "seqlen_q"], ["sub", 6, 7], ["le", 3, 8]], "results": [9]},
    "kv_range": {"nodes": [["arg", 0], ["arg", 1], ["arg", 2], ["arg", 3], ["size", "seqlen_k"], ["add", 1, 4],
                           ["size", "seqlen_q"], ["sub", 5, 6], ["const", "i32", 1], ["add", 7, 8],
                           ["const", "i32", 0]], "results": [10, 9]},
    "full_range": {"nodes": [["arg", 0], ["arg", 1], ["arg", 2], ["arg", 3], ["size", "seqlen_k"], ["add", 0, 4],
                             ["size", "seqlen_q"], ["sub", 5, 6], ["const", "i32", 1], ["add", 7, 8],
                             ["const", "i32", 0]], "results": [10, 9]}}})";

std::string errorOf(const std::string &text) {
  StatusOr<Variant> v = parseVariantDescription(text);
  return v.ok() ? "" : v.status().message();
}

std::string withHooks(const std::string &params, const std::string &hooks) {
  return R"({"format": "flashtile.variant.v1", "name": "v", "params": )" + params +
         R"(, "inputs": [{"name": "slopes", "type": "f32"}], "hooks": )" + hooks + "}";
}

} // namespace

TEST(VariantDescription, SameIdAsTheCppVariant) {
  StatusOr<Variant> described = parseVariantDescription(kCausal);
  ASSERT_TRUE(described.ok()) << described.status().message();
  auto id = variantId(*described);
  auto cpp = variantId(variants::causal());
  ASSERT_TRUE(mlir::succeeded(id) && mlir::succeeded(cpp));
  EXPECT_EQ(*id, *cpp);
}

TEST(VariantDescription, UnusedNodesDoNotChangeTheId) {
  std::string text = kCausal;
  // One more node nobody reads: the mask's result index stays 9.
  text.replace(text.find(R"(["le", 3, 8]])"), 13, R"(["le", 3, 8], ["tanh", 4]])");
  StatusOr<Variant> described = parseVariantDescription(text);
  ASSERT_FALSE(described.ok()); // tanh of an i32 is a type error even when unused
  EXPECT_NE(described.status().message().find("'tanh' takes f32, got i32"), std::string::npos)
      << described.status().message();
  text = kCausal;
  text.replace(text.find(R"(["le", 3, 8]])"), 13, R"(["le", 3, 8], ["neg", 4]])");
  described = parseVariantDescription(text);
  ASSERT_TRUE(described.ok()) << described.status().message();
  EXPECT_EQ(*variantId(*described), *variantId(variants::causal()));
}

TEST(VariantDescription, ParameterBoundsBecomeTheValidateHook) {
  std::string text = withHooks(R"([{"name": "left", "value": 4, "min": -1, "max": 100, "integer": true}])", "{}");
  StatusOr<Variant> v = parseVariantDescription(text);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->checkParams({7}), "");
  EXPECT_NE(v->checkParams({2.5f}).find("parameter 'left' is 2.5; it must be a whole number >= -1 and <= 100"),
            std::string::npos)
      << v->checkParams({2.5f});
  EXPECT_NE(v->checkParams({-2}).find("parameter 'left'"), std::string::npos);
  EXPECT_NE(errorOf(withHooks(R"([{"name": "cap", "value": 0, "min": 0, "min_exclusive": true}])", "{}"))
                .find("fail their bounds"),
            std::string::npos);
}

TEST(VariantDescription, MalformedDescriptionsNameTheField) {
  EXPECT_NE(errorOf("not json").find("not JSON"), std::string::npos);
  EXPECT_NE(errorOf(R"({"format": "v0", "name": "x"})").find("\"format\""), std::string::npos);
  EXPECT_NE(errorOf(R"({"format": "flashtile.variant.v1", "name": "bad name"})").find("\"name\""), std::string::npos);
  auto hook = [](const std::string &body) { return withHooks("[]", R"({"score": )" + body + "}"); };
  EXPECT_NE(errorOf(hook(R"({"nodes": [["arg", 7]], "results": [0]})")).find("hooks.score.nodes[0]"),
            std::string::npos);
  EXPECT_NE(errorOf(hook(R"({"nodes": [["arg", 0], ["add", 0, 3]], "results": [1]})")).find("earlier node"),
            std::string::npos);
  EXPECT_NE(errorOf(hook(R"({"nodes": [["arg", 0], ["arg", 1], ["add", 0, 1]], "results": [2]})"))
                .find("'add' mixes f32 and i32"),
            std::string::npos);
  EXPECT_NE(errorOf(hook(R"({"nodes": [["param", "cap"]], "results": [0]})")).find("undeclared parameter 'cap'"),
            std::string::npos);
  EXPECT_NE(
      errorOf(hook(R"({"nodes": [["arg", 1], ["load", "bias", 0]], "results": [1]})")).find("undeclared input 'bias'"),
      std::string::npos);
  EXPECT_NE(errorOf(hook(R"({"nodes": [["arg", 1]], "results": [0]})")).find("returns f32, got i32"),
            std::string::npos);
  EXPECT_NE(errorOf(hook(R"({"nodes": [["frobnicate", 0]], "results": [0]})")).find("unknown op 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(errorOf(hook(R"({"nodes": [["const", "i32", 2.5]], "results": [0]})")).find("an i32 constant"),
            std::string::npos);
  EXPECT_NE(errorOf(withHooks("[]", R"({"scores": {}})")).find("unknown hook 'scores'"), std::string::npos);
}

TEST(VariantDescription, ScoreModifierWithInputsBuildsAProgram) {
  // score - slopes[h] * |q - kv| (ALiBi without the alignment).
  std::string text = withHooks("[]", R"({"score": {"nodes": [["arg", 0], ["arg", 2], ["arg", 3], ["arg", 4],
      ["load", "slopes", 1], ["sub", 2, 3], ["abs", 5], ["to_float", 6], ["mul", 4, 7], ["sub", 0, 8]],
      "results": [9]}})");
  StatusOr<Variant> v = parseVariantDescription(text);
  ASSERT_TRUE(v.ok()) << v.status().message();
  mlir::MLIRContext context;
  auto module = buildAttentionProgram(context, *v, ProgramOptions{});
  ASSERT_TRUE(mlir::succeeded(module));
}

TEST(VariantDescription, DeepNestingIsAnErrorBeforeAnyRecursion) {
  // 200,000 levels overflowed the JSON parser's stack (about 35,000 do on an 8 MB stack).
  for (const char *open : {"[", "{\"a\":"}) {
    std::string text;
    for (int i = 0; i < 200000; ++i)
      text += open;
    EXPECT_NE(errorOf(text).find("nested more than " + std::to_string(kMaxDescriptionDepth) + " levels deep"),
              std::string::npos)
        << errorOf(text).substr(0, 200);
  }
  // Brackets inside strings are text, not nesting.
  std::string brackets(3 * kMaxDescriptionDepth, '[');
  EXPECT_NE(errorOf(R"({"format": "flashtile.variant.v1", "name": ")" + brackets + R"("})").find("\"name\" must be"),
            std::string::npos);
  std::string escaped = R"({"format": "flashtile.variant.v1", "name": "\")" + brackets + R"("})";
  EXPECT_NE(errorOf(escaped).find("\"name\" must be"), std::string::npos) << errorOf(escaped);
}

TEST(VariantDescription, SizesAreBoundedAtRegistration) {
  std::string big = withHooks("[]", "{}");
  big.insert(big.size() - 1, ", \"pad\": \"" + std::string(kMaxDescriptionBytes, 'x') + "\"");
  EXPECT_NE(errorOf(big).find("bytes; at most"), std::string::npos);

  // Kernels take at most 8 numbers and 4 arrays: more is an error here, not at CUDA emission, and at once (100,000
  // params took 28 s to register; that many no longer fit in a description's bytes either).
  auto params = [](int n) {
    std::string list = "[";
    for (int i = 0; i < n; ++i)
      list += (i ? ", " : "") + std::string(R"({"name": "p)") + std::to_string(i) + R"(", "value": 1})";
    return list + "]";
  };
  EXPECT_EQ(errorOf(withHooks(params(FLASHTILE_MAX_VARIANT_PARAMS), "{}")), "");
  std::string nine = errorOf(withHooks(params(FLASHTILE_MAX_VARIANT_PARAMS + 1), "{}"));
  EXPECT_NE(nine.find("params: 9 parameters; a kernel takes at most 8"), std::string::npos) << nine;
  EXPECT_NE(errorOf(withHooks(params(20000), "{}")).find("params: 20000 parameters"), std::string::npos);
  std::string inputs = R"({"format": "flashtile.variant.v1", "name": "v", "inputs": [)";
  for (int i = 0; i <= FLASHTILE_MAX_VARIANT_INPUTS; ++i)
    inputs += (i ? ", " : "") + std::string(R"({"name": "in)") + std::to_string(i) + R"(", "type": "f32"})";
  EXPECT_NE(errorOf(inputs + "]}").find("inputs: 5 inputs; a kernel takes at most 4"), std::string::npos);
  std::string rules = R"({"format": "flashtile.variant.v1", "name": "v", "rules": [)";
  for (size_t i = 0; i <= kMaxDescriptionRules; ++i)
    rules += (i ? ", " : "") + std::string(R"({"rule": "1", "accepted": "any"})");
  EXPECT_NE(errorOf(rules + "]}").find("rules: 65 rules; at most 64"), std::string::npos);

  // Nodes: per hook and over all hooks.
  auto chain = [](size_t n) {
    std::string nodes = R"({"nodes": [["arg", 0])";
    for (size_t i = 1; i < n; ++i)
      nodes += R"(, ["neg", )" + std::to_string(i - 1) + "]";
    return nodes + R"(], "results": [)" + std::to_string(n - 1) + "]}";
  };
  EXPECT_EQ(errorOf(withHooks("[]", R"({"score": )" + chain(kMaxHookNodes) + "}")), "");
  EXPECT_NE(errorOf(withHooks("[]", R"({"score": )" + chain(kMaxHookNodes + 1) + "}"))
                .find("hooks.score: " + std::to_string(kMaxHookNodes + 1) + " nodes; a hook has at most " +
                      std::to_string(kMaxHookNodes)),
            std::string::npos);
  std::string sink = R"({"nodes": [["arg", 0], ["to_float", 0])";
  for (size_t i = 2; i < kMaxHookNodes; ++i)
    sink += R"(, ["neg", )" + std::to_string(i - 1) + "]";
  sink += R"(], "results": [)" + std::to_string(kMaxHookNodes - 1) + "]}";
  std::string range = R"({"nodes": [["arg", 0])";
  for (size_t i = 1; i < kMaxHookNodes; ++i)
    range += R"(, ["neg", )" + std::to_string(i - 1) + "]";
  range += R"(], "results": [0, )" + std::to_string(kMaxHookNodes - 1) + "]}";
  std::string mask = R"({"nodes": [["arg", 0], ["arg", 1], ["lt", 0, 1]], "results": [2]})";
  std::string full = R"({"score": )" + chain(kMaxHookNodes) + R"(, "sink": )" + sink + R"(, "kv_range": )" + range +
                     R"(, "full_range": )" + range;
  static_assert(4 * kMaxHookNodes <= kMaxDescriptionNodes && 4 * kMaxHookNodes + 3 > kMaxDescriptionNodes);
  EXPECT_EQ(errorOf(withHooks("[]", full + "}")), "");
  EXPECT_NE(errorOf(withHooks("[]", full + R"(, "mask": )" + mask + "}")).find("nodes together"), std::string::npos);
}
