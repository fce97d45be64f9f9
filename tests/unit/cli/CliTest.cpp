// CliTest.cpp — the CLI's value checks: nearest-name suggestions, strict integers and lists.
#include "Cli.h"

#include <gmock/gmock.h>

using namespace flashtile;
using namespace flashtile::cli;
using testing::HasSubstr;

namespace {

const std::vector<std::string> kVariants = {"none", "causal", "causal_top_left", "sliding_window", "softcap", "alibi"};

TEST(NearestName, SuggestsSlipsAndNotStrangers) {
  EXPECT_EQ(nearestName("casual", kVariants), "causal");  // two letters swapped
  EXPECT_EQ(nearestName("Causal", kVariants), "causal");  // case
  EXPECT_EQ(nearestName("sofcap", kVariants), "softcap"); // a letter missing
  EXPECT_EQ(nearestName("sliding", kVariants), "");       // a prefix, too far from any name
  EXPECT_EQ(nearestName("xyz", kVariants), "");
  EXPECT_EQ(nearestName("sm90a", {"sm_80", "sm_90a", "sm_100a"}), "sm_90a");
  EXPECT_EQ(nearestName("bf61", {"f16", "bf16"}), "bf16");
  EXPECT_EQ(nearestName("", {"f16", "bf16"}), "");
}

TEST(UnknownName, NamesTheValueTheSuggestionAndTheList) {
  EXPECT_EQ(unknownName("variant", "casual", {"none", "causal"}),
            "unknown variant 'casual' (did you mean 'causal'?); accepted: none, causal");
  EXPECT_EQ(unknownName("dtype", "int8", {"f16", "bf16"}), "unknown dtype 'int8'; accepted: f16, bf16");
}

TEST(ParseInteger, IsStrict) {
  EXPECT_EQ(*parseInteger("64", 0, 100), 64);
  EXPECT_EQ(*parseInteger("-1", -1, 100), -1);
  for (const char *bad : {"", " 64", "64 ", "6 4", "0x40", "64k", "1e3", "+64", "--1"})
    EXPECT_FALSE(parseInteger(bad, -1000, 1000).ok()) << bad;
  StatusOr<int64_t> big = parseInteger("33554432", 0, 64, "at most 2048 threads per SM");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(),
            "out of range '33554432'; accepted: an integer from 0 to 64 (at most 2048 threads per SM)");
  StatusOr<int64_t> huge = parseInteger("99999999999999999999999", 0, 64);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("out of range"));
  EXPECT_THAT(parseInteger("x", 0, 1).status().message(), HasSubstr("not an integer 'x'"));
}

TEST(SplitList, RejectsEmptyAndRepeatedItems) {
  auto items = splitList("--head-dims", "64,128,192:128");
  ASSERT_TRUE(items.ok());
  EXPECT_EQ(*items, (std::vector<std::string>{"64", "128", "192:128"}));
  for (const char *bad : {"", ",", ",,,", "64,", ",64", "64,,128"}) {
    auto list = splitList("--head-dims", bad);
    ASSERT_FALSE(list.ok()) << bad;
    EXPECT_THAT(list.status().message(), HasSubstr("--head-dims: empty item")) << bad;
  }
  auto twice = splitList("--variants", "causal,none,causal");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(), "--variants: 'causal' is listed twice");
}

TEST(ParseNumberList, IsASequenceOfStrictNumbers) {
  StatusOr<std::vector<float>> window = parseNumberList("--params", "128,128");
  ASSERT_TRUE(window.ok()) << window.status().message();
  EXPECT_EQ(*window, (std::vector<float>{128, 128})) << "a symmetric window repeats a number";
  StatusOr<std::vector<float>> mixed = parseNumberList("--params", "-1,0.5,1e-3,30");
  ASSERT_TRUE(mixed.ok()) << mixed.status().message();
  EXPECT_EQ(*mixed, (std::vector<float>{-1, 0.5f, 1e-3f, 30}));
  for (const char *bad : {"0x10", " 128", "128 ", "+1", "1,,2", "", "128,", "inf", "nan", "1e40", "12a", "1.2.3"}) {
    StatusOr<std::vector<float>> list = parseNumberList("--params", bad);
    ASSERT_FALSE(list.ok()) << "'" << bad << "'";
    EXPECT_THAT(list.status().message(), HasSubstr("--params: ")) << bad;
  }
  EXPECT_EQ(parseNumberList("--params", "128,0x10").status().message(),
            "--params: '0x10' is not a number; accepted: finite decimal numbers such as -1, 128 or 0.5, separated by "
            "commas");
  EXPECT_THAT(parseNumberList("--params", "1e40").status().message(), HasSubstr("'1e40' is not a float"));
}

TEST(Excerpt, AMegabyteOfInputIsNotEchoedWhole) {
  const std::string huge(1 << 20, 'x');
  std::vector<std::string> messages = {
      unknownName("variant", huge, kVariants),
      splitList("--variants", huge + "," + huge).status().message(),
      splitList("--variants", huge + ",").status().message(),
      parseInteger(huge, 0, 10).status().message(),
      parseNumberList("--params", "1," + huge).status().message(),
  };
  for (const std::string &message : messages) {
    EXPECT_LT(message.size(), 1000u) << message.substr(0, 300);
    EXPECT_THAT(message, HasSubstr("... (104857")); // 1048576 bytes, or 1048577 with the comma
  }
  EXPECT_EQ(excerpt("short"), "short");
  EXPECT_EQ(excerpt(std::string(kMaxEchoedBytes, 'y')), std::string(kMaxEchoedBytes, 'y'));
  EXPECT_EQ(excerpt("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9... (4 bytes)") << "not cut inside a character";
}

TEST(Validators, ArchNamesAreCheckedForFormOnly) {
  CLI::Validator arch = archName();
  std::string good = "sm_86", odd = "sm90a", empty;
  EXPECT_EQ(arch(good), ""); // the compiler decides which targets exist
  EXPECT_THAT(arch(odd), HasSubstr("did you mean 'sm_90a'?"));
  EXPECT_THAT(arch(empty), HasSubstr("empty"));
  CLI::Validator list = archList();
  std::string emptyItem = "sm_80,", twice = "sm_80,sm_80";
  EXPECT_THAT(list(emptyItem), HasSubstr("empty item"));
  EXPECT_THAT(list(twice), HasSubstr("listed twice"));
}

} // namespace
