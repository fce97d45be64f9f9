// KernelInfoTest.cpp — the manifest text format, its parse errors, spec keys, and Status/StatusOr.
#include "TestUtil.h"

#include "flashtile/runtime/KernelInfo.h"

#include <gmock/gmock.h>

#include <functional>

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
  EXPECT_EQ(a.plan.serialize(), b.plan.serialize());
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

/// `info` with the plan the compiler writes for a module of these facts (its entry and tiles, 128 threads).
KernelInfo withPlan(KernelInfo info, const std::function<void(codegen::ModuleFacts &)> &facts) {
  codegen::ModuleFacts f = test::mainFacts(info, 128, 65536);
  facts(f);
  info.plan = codegen::planLaunches(f);
  return info;
}

// Every kind of module the schedules print has a plan that round-trips through the manifest's text.
TEST(KernelInfo, PlansOfEveryModuleRoundTrip) {
  const std::vector<std::pair<std::string, std::function<void(codegen::ModuleFacts &)>>> modules = {
      {"plain", [](codegen::ModuleFacts &) {}},
      {"tma", [](codegen::ModuleFacts &f) { f.tensorMaps = true; }},
      {"tma with 64-byte swizzle (head dims 32 and 96)",
       [](codegen::ModuleFacts &f) {
         f.tensorMaps = true;
         f.tensorMapSwizzle = 64;
       }},
      {"persistent",
       [](codegen::ModuleFacts &f) {
         f.tensorMaps = true;
         f.persistent = true;
       }},
      {"dynamic",
       [](codegen::ModuleFacts &f) {
         f.tensorMaps = f.persistent = f.dynamicWork = true;
       }},
      {"kv steps", [](codegen::ModuleFacts &f) { f.kvSteps = true; }},
      {"split kv with append", [](codegen::ModuleFacts &f) {
         f.packQueryHeads = true;
         f.combineEntry = f.entry + "_combine";
         f.combineRows = 1;
         f.combineThreads = 128;
         f.appendEntry = f.entry + "_append";
         f.appendThreads = 128;
         f.appendChunkElements = 8;
         f.dependentLaunch = true;
       }}};
  for (const auto &[name, facts] : modules) {
    KernelInfo info = withPlan(sampleInfo(), facts);
    ASSERT_TRUE(info.verify().ok()) << name << ": " << info.verify().message();
    std::string text = info.serialize();
    EXPECT_THAT(text, HasSubstr("launch.0.entry=")) << name;
    StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().message();
    expectSameInfo(*parsed, info);
  }
}

TEST(KernelInfo, PlanFieldsAreChecked) {
  KernelInfo info = withPlan(sampleInfo(), [](codegen::ModuleFacts &f) { f.tensorMaps = true; });
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("launch.0.tensorMaps=q:128:128,k:64:128,v:64:128\n"));
  auto parseError = [&](const std::string &field, const std::string &line) {
    StatusOr<KernelInfo> parsed = KernelInfo::parse(replaceLine(text, field, line));
    EXPECT_FALSE(parsed.ok()) << line;
    return parsed.ok() ? std::string() : parsed.status().message();
  };
  EXPECT_THAT(parseError("launch.0.grid", "launch.0.grid=cdiv(rows, 128);heads_q"),
              HasSubstr("field 'launch.0.grid': 'cdiv(rows, 128);heads_q' is not three rules"));
  EXPECT_THAT(parseError("launch.0.grid", "launch.0.grid=cdiv(rows, 128);heads;batch"),
              HasSubstr("unknown size 'heads'"));
  EXPECT_THAT(parseError("launch.0.threads", "launch.0.threads=100"),
              HasSubstr("field 'launch.0.threads': 100 is not a multiple of 32 in [32, 1024]"));
  EXPECT_THAT(parseError("launch.0.smemBytes", "launch.0.smemBytes=999999"),
              HasSubstr("field 'launch.0.smemBytes': 999999 is not in [0, 232448]"));
  // One span of 32, 64 or 128 bytes for the three maps.
  EXPECT_THAT(parseError("launch.0.tensorMaps", "launch.0.tensorMaps=q:128:64,k:64:128,v:64:128"),
              HasSubstr("field 'launch.0.tensorMaps'"));
  EXPECT_THAT(parseError("launch.0.tensorMaps", "launch.0.tensorMaps=q:128:48,k:64:48,v:64:48"),
              HasSubstr("all swizzled over one span of 32, 64 or 128 bytes"));
  // A backward kernel's maps: q, k, v, do, dO's box Q's.
  StatusOr<KernelInfo> backward =
      KernelInfo::parse(replaceLine(text, "launch.0.tensorMaps", "launch.0.tensorMaps=q:64:128,k:128:128,v:128:128,do:64:128"));
  ASSERT_TRUE(backward.ok()) << backward.status().message();
  EXPECT_EQ(backward->plan.launches[0].tensorMaps[3].tensor, "do");
  EXPECT_THAT(backward->plan.describe(), HasSubstr("TMA descriptors of q, k, v, do"));
  EXPECT_THAT(parseError("launch.0.tensorMaps", "launch.0.tensorMaps=q:64:128,k:128:128,v:128:128,do:128:128"),
              HasSubstr("dO's box Q's"));
  EXPECT_THAT(parseError("launch.0.tensorMaps", "launch.0.tensorMaps=q:64:128,do:64:128,k:128:128,v:128:128"),
              HasSubstr("q, k, v in that order"));
  for (const char *span : {"32", "64"}) {
    const std::string maps = std::string("launch.0.tensorMaps=q:128:") + span + ",k:64:" + span + ",v:64:" + span;
    StatusOr<KernelInfo> narrow = KernelInfo::parse(replaceLine(text, "launch.0.tensorMaps", maps));
    ASSERT_TRUE(narrow.ok()) << maps << ": " << narrow.status().message();
    EXPECT_EQ(narrow->plan.launches[0].tensorMaps[2].swizzleBytes, std::stoi(span));
  }
  EXPECT_THAT(parseError("launch.0.entry", "launch.0.entry=not an identifier"),
              HasSubstr("field 'launch.0.entry': 'not an identifier' is not a C identifier"));
  EXPECT_THAT(parseError("launch.0.entry", ""), HasSubstr("launch.0.grid"));
  EXPECT_THAT(parseError("launch.0.threads", "launch.0.threads=128\nlaunch.0.cluster=2x1"), HasSubstr("is not XxYxZ"));
  // A field no plan has is named.
  EXPECT_THAT(parseError("launch.0.threads", "launch.0.threads=128\nlaunch.0.color=blue"),
              HasSubstr("unknown field 'launch.0.color'"));
  // set.* names int fields of the parameter block only.
  EXPECT_THAT(parseError("launch.0.threads", "launch.0.threads=128\nset.q=1"),
              HasSubstr("field 'set.q': 'q' is not an int field"));
}

// A manifest of the format before launch plans (its per-schedule fields) is refused with the version named.
TEST(KernelInfo, OldManifestsAreRefusedByVersion) {
  std::string text = sampleInfo().serialize();
  std::string old = replaceLine(text, "format", "");
  StatusOr<KernelInfo> parsed = KernelInfo::parse(old + "threads=128\ncombineEntry=x_combine\n");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("manifest format 1"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("this runtime reads format 2"));
  StatusOr<KernelInfo> future = KernelInfo::parse(replaceLine(text, "format", "format=3"));
  ASSERT_FALSE(future.ok());
  EXPECT_THAT(future.status().message(), HasSubstr("manifest format 3"));
}

TEST(KernelInfo, TheProgramKindIsCarried) {
  KernelInfo info = sampleInfo();
  EXPECT_THAT(info.serialize(), HasSubstr("kind=forward\n"));
  EXPECT_EQ(info.spec().kind, "forward");
  EXPECT_THAT(info.spec().key(), testing::Not(HasSubstr("kind=")));
  KernelSpec other = info.spec();
  other.kind = "backward";
  EXPECT_THAT(other.key(), HasSubstr(";kind=backward"));
  EXPECT_FALSE(matches(info, other));
  KernelInfo backward = info;
  backward.kind = "backward";
  EXPECT_TRUE(backward.verify().ok()) << backward.verify().message();
  info.kind = "sideways";
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'kind': 'sideways' is not one of forward, backward"));
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
      {"launch.0.smemBytes", "", {"launch.0.smemBytes", "missing"}},
      {"compilerVersion", "", {"compilerVersion", "missing"}},
      {"blockM", "blockM=12x", {"blockM", "not an integer"}},
      {"headDim", "headDim=", {"headDim", "not an integer"}},
      {"headDim", "headDim=99999999999", {"headDim", "not an integer"}},
      {"headDimV", "headDimV=0", {"headDimV", "not a multiple of 8 in [8, 512]"}},
      {"headDim", "headDim=100", {"headDim", "not a multiple of 8"}},
      {"blockM", "blockM=1", {"blockM", "1 is not a multiple of 16 in [16, 1024]"}},
      {"blockN", "blockN=4096", {"blockN", "[16, 1024]"}},
      {"launch.0.smemBytes", "launch.0.smemBytes=2147483647", {"launch.0.smemBytes", "2147483647 is not in [0, 232448]"}},
      {"paramRules", "paramRules=cap > \"positive\"", {"paramRules", "value was expected"}},
      {"paramRules", "paramRules=slope > 0 \"positive\"", {"paramRules", "'slope' is not a parameter"}},
      {"paramRules", "paramRules=cap + 1 \"x\"", {"paramRules", "a number, not a condition"}},
      {"paramRules", "paramRules=cap > 0", {"paramRules", "is not 'condition \"accepted values\"'"}},
      {"arch", "arch=sm_75", {"arch", "sm_75", "sm_80, sm_90a, sm_100a"}},
      {"dtype", "dtype=fp8", {"dtype", "f16, bf16"}},
      {"launch.0.threads", "launch.0.threads=100", {"launch.0.threads", "multiple of 32"}},
      {"launch.0.threads", "launch.0.threads=2048", {"launch.0.threads", "[32, 1024]"}},
      {"launch.0.smemBytes", "launch.0.smemBytes=-1", {"launch.0.smemBytes", "-1 is not in [0, "}},
      {"entry", "entry=1kernel", {"entry", "C identifier"}},
      {"variant", "variant=", {"variant", "id"}},
      {"schedule", "schedule=fa 2", {"schedule"}},
      {"paramNames", "paramNames=cap,,bias", {"paramNames", "identifier"}},
      {"paramNames", "paramNames=cap,cap", {"paramNames", "twice"}},
      {"paramNames", "paramNames=a,b,c,d,e,f,g,h,i", {"paramNames", "at most 8"}},
      {"arch", "arch=sm_90a\narch=sm_80", {"arch", "twice"}},
      {"launch.0.threads", "launch.0.threads=128\ncolour=blue", {"unknown field 'colour'", "accepted: entry"}},
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
  KernelInfo cache = plain;
  cache.entry += "_kvcache";
  cache.kvCache = true;
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

TEST(KernelInfo, TheDispatchRuleRoundTripsAndIsChecked) {
  KernelInfo info = sampleInfo();
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("preferredOver")));
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("defaultFor")));
  info.schedule = "fa3";
  info.defaultFor = DefaultCalls::All;
  info.preferredOver = {"fa2", "fa1"};
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("defaultFor=all\n"));
  EXPECT_THAT(text, HasSubstr("preferredOver=fa2,fa1\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->defaultFor, DefaultCalls::All);
  EXPECT_EQ(parsed->preferredOver, (std::vector<std::string>{"fa2", "fa1"}));
  EXPECT_EQ(parsed->dispatchRule().schedule, "fa3");
  EXPECT_EQ(parsed->dispatchRule().arch, info.arch);
  StatusOr<KernelInfo> decode = KernelInfo::parse(replaceLine(text, "defaultFor", "defaultFor=decode-sized"));
  ASSERT_TRUE(decode.ok()) << decode.status().message();
  EXPECT_EQ(decode->defaultFor, DefaultCalls::Decode);
  StatusOr<KernelInfo> badCalls = KernelInfo::parse(replaceLine(text, "defaultFor", "defaultFor=sometimes"));
  ASSERT_FALSE(badCalls.ok());
  EXPECT_THAT(badCalls.status().message(), HasSubstr("field 'defaultFor': 'sometimes' is not all or decode-sized"));
  StatusOr<KernelInfo> self = KernelInfo::parse(replaceLine(text, "preferredOver", "preferredOver=fa2,fa3"));
  ASSERT_FALSE(self.ok());
  EXPECT_THAT(self.status().message(), HasSubstr("field 'preferredOver': 'fa3' is this kernel's own schedule"));
  StatusOr<KernelInfo> notAName = KernelInfo::parse(replaceLine(text, "preferredOver", "preferredOver=fa 2"));
  ASSERT_FALSE(notAName.ok());
  EXPECT_THAT(notAName.status().message(), HasSubstr("field 'preferredOver'"));
  StatusOr<KernelInfo> twice = KernelInfo::parse(replaceLine(text, "preferredOver", "preferredOver=fa2,fa2"));
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("'fa2' appears twice"));
}

TEST(KernelInfo, TheNeverRunMarkRoundTripsAndIsChecked) {
  KernelInfo info = sampleInfo();
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("neverRunOnArch")));
  EXPECT_THAT(info.serialize(), testing::Not(HasSubstr("checkAgainst")));
  info.schedule = "fa4";
  info.neverRunOnArch = true;
  info.checkAgainst = "fa2";
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("neverRunOnArch=1\ncheckAgainst=fa2\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->neverRunOnArch);
  EXPECT_EQ(parsed->checkAgainst, "fa2");

  for (auto [line, expected] : std::vector<std::pair<std::string, std::string>>{
           {"neverRunOnArch=0", "field 'neverRunOnArch': '0' is not 1 (a proven kernel omits the field)"},
           {"neverRunOnArch=yes", "field 'neverRunOnArch': 'yes' is not 1"},
           {"", "field 'neverRunOnArch': neverRunOnArch=1 and checkAgainst=<a proven schedule> come together"}}) {
    StatusOr<KernelInfo> bad = KernelInfo::parse(replaceLine(text, "neverRunOnArch", line));
    ASSERT_FALSE(bad.ok()) << line;
    EXPECT_THAT(bad.status().message(), HasSubstr(expected)) << line;
  }
  for (auto [line, expected] : std::vector<std::pair<std::string, std::string>>{
           {"", "field 'checkAgainst': neverRunOnArch=1 and checkAgainst=<a proven schedule> come together"},
           {"checkAgainst=fa4", "field 'checkAgainst': 'fa4' is not a schedule id other than the kernel's own ('fa4')"},
           {"checkAgainst=fa 2", "field 'checkAgainst': 'fa 2' is not a schedule id"}}) {
    StatusOr<KernelInfo> bad = KernelInfo::parse(replaceLine(text, "checkAgainst", line));
    ASSERT_FALSE(bad.ok()) << line;
    EXPECT_THAT(bad.status().message(), HasSubstr(expected)) << line;
  }
  info.kvCache = true;
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'neverRunOnArch': a KV-cache kernel cannot be self-checked"));
}
