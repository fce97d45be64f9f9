// ParamRuleTest.cpp — a variant's rules for its numbers: parsing, evaluation, messages, and the runtime's check of
// every call against the rules an (ahead-of-time) kernel carries.
#include "TestUtil.h"

#include "flashtile/runtime/ParamRule.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <cmath>
#include <limits>

using namespace flashtile;
using testing::HasSubstr;

namespace {

const std::vector<std::string> kWindowParams = {"left", "right"};
const ParamRule kLeftRule{"isinteger(left) && left >= -1 && left <= 16777216",
                          "a whole number from -1 (unbounded) to 16777216"};
const ParamRule kRightRule{"isinteger(right) && right >= -1 && right <= 16777216",
                           "a whole number from -1 (unbounded) to 16777216"};

Status checkWindow(float left, float right) {
  return checkParamRules("sliding_window", {kLeftRule, kRightRule}, kWindowParams, {left, right});
}

TEST(ParamRule, WindowSizesNameTheSideAndTheAcceptedValues) {
  EXPECT_TRUE(checkWindow(-1, -1).ok());
  EXPECT_TRUE(checkWindow(0, 128).ok());
  EXPECT_TRUE(checkWindow(16777216, 3).ok());
  Status negative = checkWindow(-5, 0);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.message(), "variant 'sliding_window': left = -5 is not accepted; accepted: a whole number from "
                                "-1 (unbounded) to 16777216");
  Status fraction = checkWindow(2.5f, 0);
  ASSERT_FALSE(fraction.ok());
  EXPECT_THAT(fraction.message(), HasSubstr("left = 2.5 is not accepted"));
  Status right = checkWindow(4, std::numeric_limits<float>::infinity());
  ASSERT_FALSE(right.ok());
  EXPECT_THAT(right.message(), HasSubstr("right = inf is not accepted"));
  EXPECT_FALSE(checkWindow(std::nanf(""), 0).ok());
  EXPECT_FALSE(checkWindow(33554432, 0).ok());
}

TEST(ParamRule, SoftcapRefusesZeroNegativeAndNaN) {
  const ParamRule cap{"cap > 0 && isfinite(cap)", "a positive, finite number"};
  auto check = [&](float value) { return checkParamRules("softcap", {cap}, {"cap"}, {value}); };
  EXPECT_TRUE(check(30).ok());
  for (float bad : {0.f, -1.f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    Status status = check(bad);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_THAT(status.message(), HasSubstr("variant 'softcap': cap = "));
    EXPECT_THAT(status.message(), HasSubstr("accepted: a positive, finite number"));
  }
}

TEST(ParamRule, GrammarPrecedenceAndFunctions) {
  auto holds = [](const std::string &expr, std::vector<float> values) {
    Status s = checkParamRules("v", {{expr, ""}}, {"a", "b"}, values);
    return s.ok();
  };
  EXPECT_TRUE(holds("a + b * 2 == 7", {1, 3}));
  EXPECT_TRUE(holds("(a + b) * 2 == 8", {1, 3}));
  EXPECT_TRUE(holds("a - -1 == 2", {1, 0}));
  EXPECT_TRUE(holds("a / b == 0.5", {1, 2}));
  EXPECT_TRUE(holds("!(a > b) && (a < b || a == b)", {1, 2}));
  EXPECT_TRUE(holds("min(a, b) == 1 && max(a, b) == 2 && abs(-a) == 1 && floor(2.7) == 2", {1, 2}));
  EXPECT_TRUE(holds("isinteger(a) && !isinteger(b)", {3, 2.5f}));
  EXPECT_TRUE(holds("a <= 1e3 && a >= 1.5e-3", {5, 0}));
  EXPECT_FALSE(holds("a > 0", {std::nanf(""), 0})) << "comparisons with NaN are false";
  EXPECT_TRUE(holds("a != 0", {std::nanf(""), 0}));
  // A rule reading two parameters names both.
  Status both = checkParamRules("v", {{"a < b", "a below b"}}, {"a", "b"}, {3, 2});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.message(), "variant 'v': a = 3, b = 2 are not accepted; accepted: a below b");
  // Without a description the rule itself says what is accepted.
  Status plain = checkParamRules("v", {{"a > 0", ""}}, {"a", "b"}, {0, 0});
  EXPECT_THAT(plain.message(), HasSubstr("accepted: values for which a > 0"));
}

TEST(ParamRule, MalformedRulesAreRejectedWithTheColumn) {
  struct Case {
    std::string expr;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"", "the rule ends where a value was expected"},
      {"a >", "column 4: the rule ends"},
      {"a > 0 &&", "the rule ends"},
      {"a + 1", "a number, not a condition"},
      {"a && b", "'&&' takes conditions, got a number"},
      {"isfinite(a) + 1 > 0", "arithmetic takes numbers, got a condition"},
      {"c > 0", "'c' is not a parameter of the variant (its parameters: a, b)"},
      {"sqrt(a) > 0", "unknown function 'sqrt'"},
      {"min(a) > 0", "min() takes 2 arguments, got 1"},
      {"a > 0)", "unexpected ')'"},
      {"a > 1e999", "is not a finite number"},
      {"a > 0x10", "is not a finite number"},
      {"a $ 0", "unexpected '$'"},
      {"a > 0; b > 0", "contains ';'"},
      {std::string(100, '(') + "a > 0" + std::string(100, ')'), "nested more than 64 levels"},
      {std::string(100, '-') + "a > 0", "nested more than 64 levels"},
      {std::string(5000, ' ') + "a > 0", "at most 4096"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.expr.substr(0, 80));
    Status status = verifyParamRule({c.expr, ""}, {"a", "b"});
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(c.expected));
    // The same text reaching a call is an error too, never a crash or a pass.
    EXPECT_FALSE(checkParamRules("v", {{c.expr, ""}}, {"a", "b"}, {1, 1}).ok());
  }
}

TEST(ParamRule, SerializationRoundTrips) {
  std::vector<ParamRule> rules = {kLeftRule, kRightRule, {"left < right", ""}};
  StatusOr<std::vector<ParamRule>> parsed = parseParamRules(serializeParamRules(rules));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(*parsed, rules);
  StatusOr<std::vector<ParamRule>> none = parseParamRules("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(parseParamRules("left > 0 \"x\"; ").ok());
  EXPECT_FALSE(parseParamRules("left > 0").ok());
}

/// A sliding-window kernel as `flashtile aot` writes it: its manifest carries the variant's rules.
KernelInfo windowKernel() {
  KernelInfo info = test::fakeKernel("window").info;
  info.variant = "sliding_window";
  info.paramNames = kWindowParams;
  info.paramRules = {kLeftRule, kRightRule};
  return info;
}

TEST(ParamRule, ValidateForChecksTheKernelsRules) {
  AttentionArgs args = AttentionArgs::contiguous(
      DType::BF16, reinterpret_cast<const void *>(0x10000), reinterpret_cast<const void *>(0x20000),
      reinterpret_cast<const void *>(0x30000), reinterpret_cast<void *>(0x40000), reinterpret_cast<float *>(0x50000), 1,
      128, 128, 8, 8, 128);
  args.variant = "sliding_window";
  args.variantParams = {64, -1};
  EXPECT_TRUE(Runtime::validateFor(args, windowKernel()).ok());
  for (float left : {-5.f, 2.5f}) {
    args.variantParams = {left, 0};
    Status status = Runtime::validateFor(args, windowKernel());
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("variantParams: variant 'sliding_window': left = "));
    EXPECT_THAT(status.message(), HasSubstr("accepted: a whole number from -1 (unbounded) to 16777216"));
  }
}

} // namespace
