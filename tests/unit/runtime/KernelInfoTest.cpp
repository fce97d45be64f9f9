// KernelInfoTest.cpp — the manifest text format, its parse errors, spec keys, and Status/StatusOr.
#include "TestUtil.h"

#include "flashtile/runtime/KernelInfo.h"

#include <gmock/gmock.h>

using namespace flashtile;
using testing::HasSubstr;

namespace {

KernelInfo sampleInfo() {
  KernelInfo info = test::fakeKernel().info;
  info.variant = "softcap#3f2a9c";
  info.paramNames = {"cap", "bias"};
  return info;
}

/// `text` with the line for `field` replaced by `line` (or removed when `line` is empty).
std::string replaceLine(const std::string &text, const std::string &field, const std::string &line) {
  size_t start = text.find(field + "=");
  EXPECT_NE(start, std::string::npos) << field;
  size_t end = text.find('\n', start);
  return text.substr(0, start) + (line.empty() ? "" : line + "\n") + text.substr(end + 1);
}

void expectSameInfo(const KernelInfo &a, const KernelInfo &b) {
  EXPECT_EQ(a.serialize(), b.serialize());
  EXPECT_EQ(a.entry, b.entry);
  EXPECT_EQ(a.paramNames, b.paramNames);
  EXPECT_EQ(a.smemBytes, b.smemBytes);
  EXPECT_EQ(a.compilerVersion, b.compilerVersion);
}

TEST(KernelInfo, RoundTrips) {
  KernelInfo info = sampleInfo();
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("paramNames=cap,bias\n"));
  EXPECT_THAT(text, HasSubstr("variant=softcap#3f2a9c\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  expectSameInfo(*parsed, info);
}

TEST(KernelInfo, TmaKernelsSayTheyTakeTensorMaps) {
  KernelInfo info = sampleInfo();
  info.arch = "sm_90a";
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("tensorMaps")));
  info.tensorMaps = true;
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("tensorMaps=1\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->tensorMaps);
  // Only sm_90a kernels without split-KV take TMA descriptors.
  info.arch = "sm_80";
  Status notSm90 = info.verify();
  ASSERT_FALSE(notSm90.ok());
  EXPECT_THAT(notSm90.message(), HasSubstr("field 'tensorMaps': is set on a kernel for sm_80"));
  StatusOr<KernelInfo> badValue = KernelInfo::parse(replaceLine(text, "tensorMaps", "tensorMaps=yes"));
  ASSERT_FALSE(badValue.ok());
  EXPECT_THAT(badValue.status().message(), HasSubstr("field 'tensorMaps'"));
}

TEST(KernelInfo, PersistentKernelsSaySo) {
  KernelInfo info = sampleInfo();
  info.arch = "sm_90a";
  info.tensorMaps = true;
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("persistent")));
  info.persistent = true;
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("persistent=1\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->persistent);
  StatusOr<KernelInfo> badValue = KernelInfo::parse(replaceLine(text, "persistent", "persistent=2"));
  ASSERT_FALSE(badValue.ok());
  EXPECT_THAT(badValue.status().message(), HasSubstr("field 'persistent': '2' is not 0 or 1"));
  // Split-KV kernels launch a grid of splits, not persistent blocks.
  info.combineEntry = info.entry + "_combine";
  info.combineRows = 4;
  info.combineThreads = 128;
  info.tensorMaps = false;
  Status split = info.verify();
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(split.message(), HasSubstr("field 'persistent': is set on a kernel with a combine kernel"));
}

TEST(KernelInfo, DynamicSchedulerKernelsSayTheyNeedATileCounter) {
  KernelInfo info = sampleInfo();
  info.arch = "sm_90a";
  info.tensorMaps = true;
  info.persistent = true;
  // A manifest written before the field (or by a static kernel) has no line and loads as a static kernel.
  std::string before = info.serialize();
  EXPECT_THAT(before, testing::Not(HasSubstr("tileCounter")));
  StatusOr<KernelInfo> old = KernelInfo::parse(before);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_FALSE(old->tileCounter);
  info.tileCounter = true;
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("tileCounter=1\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->tileCounter);
  StatusOr<KernelInfo> badValue = KernelInfo::parse(replaceLine(text, "tileCounter", "tileCounter=on"));
  ASSERT_FALSE(badValue.ok());
  EXPECT_THAT(badValue.status().message(), HasSubstr("field 'tileCounter': 'on' is not 0 or 1"));
  // Only persistent blocks take tiles from a counter.
  info.persistent = false;
  Status notPersistent = info.verify();
  ASSERT_FALSE(notPersistent.ok());
  EXPECT_THAT(notPersistent.message(), HasSubstr("field 'tileCounter': is set on a kernel that is not persistent"));
}

TEST(KernelInfo, KvStepKernelsSaySo) {
  KernelInfo info = sampleInfo();
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("kvSteps")));
  info.kvSteps = true;
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("kvSteps=1\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->kvSteps);
  StatusOr<KernelInfo> badValue = KernelInfo::parse(replaceLine(text, "kvSteps", "kvSteps=yes"));
  ASSERT_FALSE(badValue.ok());
  EXPECT_THAT(badValue.status().message(), HasSubstr("field 'kvSteps': 'yes' is not 0 or 1"));
  // A K/V-step kernel is launched once per K/V tile over the Q tiles: never split, persistent or TMA.
  info.combineEntry = info.entry + "_combine";
  info.combineRows = 4;
  info.combineThreads = 128;
  Status split = info.verify();
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(split.message(), HasSubstr("field 'kvSteps': is set on a split-KV, persistent or TMA kernel"));
}

TEST(KernelInfo, RoundTripsParamRules) {
  KernelInfo info = sampleInfo();
  info.paramRules = {{"cap > 0 && isfinite(cap)", "a positive, finite number"},
                     {"(bias >= -1) || (cap == floor(cap))", ""}};
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("paramRules=cap > 0 && isfinite(cap) \"a positive, finite number\"; "
                              "(bias >= -1) || (cap == floor(cap)) \"\"\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->paramRules, info.paramRules);

  // A description may not hold the delimiters.
  info.paramRules = {{"cap > 0", "positive; finite"}};
  Status bad = info.verify();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("without '\"' or ';'"));
}

TEST(KernelInfo, RoundTripsWithoutParams) {
  KernelInfo info = sampleInfo();
  info.paramNames.clear();
  StatusOr<KernelInfo> parsed = KernelInfo::parse(info.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->paramNames.empty());
}

TEST(KernelInfo, ParseIgnoresCommentsBlankLinesAndCarriageReturns) {
  std::string text = "# written by flashtile aot\n\n" + sampleInfo().serialize();
  text = replaceLine(text, "arch", "arch = sm_90a\r");
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->arch, "sm_90a");
}

TEST(KernelInfo, ParseRejectsBadFieldsNamingThem) {
  struct Case {
    std::string field;       // the line that is replaced
    std::string replacement; // empty: the line is removed
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"smemBytes", "", {"smemBytes", "missing"}},
      {"compilerVersion", "", {"compilerVersion", "missing"}},
      {"blockM", "blockM=12x", {"blockM", "not an integer"}},
      {"headDim", "headDim=", {"headDim", "not an integer"}},
      {"headDim", "headDim=99999999999", {"headDim", "not an integer"}},
      {"headDimV", "headDimV=0", {"headDimV", "not a multiple of 8 in [8, 512]"}},
      {"headDim", "headDim=100", {"headDim", "not a multiple of 8"}},
      {"blockM", "blockM=1", {"blockM", "1 is not a multiple of 16 in [16, 1024]"}},
      {"blockN", "blockN=4096", {"blockN", "[16, 1024]"}},
      {"smemBytes", "smemBytes=2147483647", {"smemBytes", "2147483647 is not in [0, 232448]", "sm_90a"}},
      {"paramRules", "paramRules=cap > \"positive\"", {"paramRules", "value was expected"}},
      {"paramRules", "paramRules=slope > 0 \"positive\"", {"paramRules", "'slope' is not a parameter"}},
      {"paramRules", "paramRules=cap + 1 \"x\"", {"paramRules", "a number, not a condition"}},
      {"paramRules", "paramRules=cap > 0", {"paramRules", "is not 'condition \"accepted values\"'"}},
      {"arch", "arch=sm_75", {"arch", "sm_75", "sm_80, sm_90a, sm_100a"}},
      {"dtype", "dtype=fp8", {"dtype", "f16, bf16"}},
      {"threads", "threads=100", {"threads", "multiple of 32"}},
      {"threads", "threads=2048", {"threads", "[32, 1024]"}},
      {"smemBytes", "smemBytes=-1", {"smemBytes", "-1 is not in [0, "}},
      {"entry", "entry=1kernel", {"entry", "C identifier"}},
      {"variant", "variant=", {"variant", "id"}},
      {"schedule", "schedule=fa 2", {"schedule"}},
      {"paramNames", "paramNames=cap,,bias", {"paramNames", "identifier"}},
      {"paramNames", "paramNames=cap,cap", {"paramNames", "twice"}},
      {"paramNames", "paramNames=a,b,c,d,e,f,g,h,i", {"paramNames", "at most 8"}},
      {"arch", "arch=sm_90a\narch=sm_80", {"arch", "twice"}},
      {"arch", "colour=blue", {"unknown field 'colour'", "accepted: entry"}},
      {"arch", "sm_90a", {"line", "expected 'field=value'"}},
  };
  const std::string text = sampleInfo().serialize();
  for (const Case &c : cases) {
    std::string mutated = replaceLine(text, c.field, c.replacement);
    SCOPED_TRACE(mutated);
    StatusOr<KernelInfo> parsed = KernelInfo::parse(mutated);
    ASSERT_FALSE(parsed.ok());
    for (const std::string &expected : c.expected)
      EXPECT_THAT(parsed.status().message(), HasSubstr(expected));
  }
}

TEST(KernelInfo, ParseRejectsEmptyText) {
  StatusOr<KernelInfo> parsed = KernelInfo::parse("");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("field 'entry': missing"));
}

TEST(KernelSpec, KeyNamesEveryField) {
  KernelSpec spec = sampleInfo().spec();
  EXPECT_EQ(spec.key(),
            "arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;variant=softcap#3f2a9c;schedule=fa2;shapeClass=default");
}

TEST(KernelSpec, MatchesComparesEveryField) {
  KernelInfo info = sampleInfo();
  EXPECT_TRUE(matches(info, info.spec()));
  auto changed = [&](auto mutate) {
    KernelSpec spec = info.spec();
    mutate(spec);
    return matches(info, spec);
  };
  EXPECT_FALSE(changed([](KernelSpec &s) { s.arch = "sm_80"; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.dtype = "f16"; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.headDim = 64; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.headDimV = 64; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.variant = "causal"; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.schedule = "fa3"; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.shapeClass = "long"; }));
  EXPECT_FALSE(changed([](KernelSpec &s) { s.kvCache = true; }));
}

// Plain decode calls run kernels without the cache code and cache calls kernels with it: the two are distinct
// specs, and each kernel serves only its own.
TEST(KernelSpec, KvCacheKernelsServeOnlyCacheCalls) {
  KernelInfo plain = sampleInfo();
  plain.schedule = "decode";
  plain.combineEntry = plain.entry + "_combine";
  KernelInfo cache = plain;
  cache.entry += "_kvcache";
  cache.combineEntry = cache.entry + "_combine";
  cache.appendEntry = cache.entry + "_append";
  EXPECT_FALSE(plain.spec().kvCache);
  EXPECT_TRUE(cache.spec().kvCache);
  EXPECT_EQ(cache.spec().key(), plain.spec().key() + ";kvCache=1");
  EXPECT_TRUE(matches(plain, plain.spec()));
  EXPECT_TRUE(matches(cache, cache.spec()));
  EXPECT_FALSE(matches(plain, cache.spec()));
  EXPECT_FALSE(matches(cache, plain.spec()));
}

TEST(Status, CarriesMessagesAndValues) {
  EXPECT_TRUE(Status().ok());
  Status error = Status::error("boom");
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.message(), "boom");
  EXPECT_EQ(error.withContext("loading x").message(), "loading x: boom");
  EXPECT_TRUE(Status().withContext("ignored").ok());
  EXPECT_FALSE(Status::error("").ok());

  StatusOr<std::string> value = std::string("cubin");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "cubin");
  EXPECT_EQ(value->size(), 5u);
  StatusOr<std::string> failed = Status::error("nope");
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "nope");
}

} // namespace

TEST(KernelInfo, CombineKernelGeometryIsChecked) {
  KernelInfo info = sampleInfo();
  info.combineEntry = info.entry + "_combine";
  info.combineRows = 1;
  info.combineThreads = 128; // one row a block, four warps sharing its splits
  ASSERT_TRUE(info.verify().ok()) << info.verify().message();
  info.combineThreads = 100;
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'combineThreads': 100 is not a multiple of 32 in [32, 1024]"));
  info.combineThreads = 2048;
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'combineThreads': 2048 is not a multiple of 32"));
  info.combineThreads = 128;
  info.combineRows = 0;
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'combineRows': 0 is not in [1, 1024]"));
}

TEST(KernelInfo, TheDispatchRuleRoundTripsAndIsChecked) {
  KernelInfo info = sampleInfo();
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("preferredOver")));
  info.schedule = "fa3";
  info.preferredOver = "fa2";
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("preferredOver=fa2\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->preferredOver, "fa2");
  StatusOr<KernelInfo> self = KernelInfo::parse(replaceLine(text, "preferredOver", "preferredOver=fa3"));
  ASSERT_FALSE(self.ok());
  EXPECT_THAT(self.status().message(), HasSubstr("field 'preferredOver': 'fa3' is not a schedule name other than"));
  StatusOr<KernelInfo> notAName = KernelInfo::parse(replaceLine(text, "preferredOver", "preferredOver=fa 2"));
  ASSERT_FALSE(notAName.ok());
  EXPECT_THAT(notAName.status().message(), HasSubstr("field 'preferredOver'"));
}
