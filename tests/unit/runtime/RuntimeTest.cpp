// RuntimeTest.cpp — kernel selection (ahead-of-time directories, JIT hook), spec building, arch mapping, and
// the behaviour of forward() on a machine without an NVIDIA driver.
#include "TestUtil.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Version.h"

#include <gmock/gmock.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <fstream>
#include <stdexcept>

using namespace flashtile;
using testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

AttentionArgs validArgs() {
  return AttentionArgs::contiguous(DType::BF16, reinterpret_cast<const void *>(0x10000),
                                   reinterpret_cast<const void *>(0x20000), reinterpret_cast<const void *>(0x30000),
                                   reinterpret_cast<void *>(0x40000), reinterpret_cast<float *>(0x50000), 2, 128, 128,
                                   8, 8, 128);
}

void writeFile(const fs::path &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// Writes `<name>.manifest` and `<name>.cubin` for `kernel` into `dir`.
void writeAotKernel(const fs::path &dir, const std::string &name, const CachedKernel &kernel) {
  writeFile(dir / (name + ".manifest"), kernel.info.serialize());
  writeFile(dir / (name + ".cubin"), kernel.cubin);
}

bool driverLoadable() {
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library)
    dlclose(library);
  return library != nullptr;
}

/// A runtime whose JIT cache lives in memory only, so tests never touch ~/.cache, with no dispatch rule but those of
/// the kernels it loads.
std::unique_ptr<Runtime> bareRuntime() { return std::make_unique<Runtime>(test::cacheOptions("", false)); }

/// bareRuntime with the built-in schedules' dispatch rules, as the JIT installs them.
std::unique_ptr<Runtime> memoryOnlyRuntime() {
  std::unique_ptr<Runtime> runtime = bareRuntime();
  runtime->setDispatchRules(test::dispatchRules());
  return runtime;
}

TEST(Runtime, SpecForUsesArgsScheduleAndShapeClass) {
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  AttentionArgs args = validArgs();
  args.variant = "causal";
  args.dtype = DType::F16;
  args.seqlenQ = args.seqlenK = 4096;
  StatusOr<KernelSpec> spec = runtime->specFor(args, "sm_80");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->key(),
            "arch=sm_80;dtype=f16;headDim=128;headDimV=128;variant=causal;schedule=fa2;shapeClass=default");
  EXPECT_EQ(runtime->specFor(args, "sm_90a")->schedule, "fa3");

  runtime->setSchedule("fa1");
  EXPECT_EQ(runtime->specFor(args, "sm_90a")->schedule, "fa1");
  args.schedule = "fa2"; // the call's own schedule comes first
  EXPECT_EQ(runtime->specFor(args, "sm_90a")->schedule, "fa2");
  args.schedule.clear();
  runtime->setSchedule("fa 3");
  StatusOr<KernelSpec> badSchedule = runtime->specFor(args, "sm_90a");
  ASSERT_FALSE(badSchedule.ok());
  EXPECT_THAT(badSchedule.status().message(), HasSubstr("schedule 'fa 3' (named by setSchedule)"));
}

TEST(Runtime, WithoutRulesACallMustNameItsSchedule) {
  std::unique_ptr<Runtime> runtime = bareRuntime();
  AttentionArgs args = validArgs();
  StatusOr<KernelSpec> spec = runtime->specFor(args, "sm_90a");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("no schedule for this call on sm_90a: none is named"));
  EXPECT_THAT(spec.status().message(), HasSubstr("no ahead-of-time directory loaded and no JIT compiler installed"));
  args.schedule = "fa2";
  EXPECT_EQ(runtime->specFor(args, "sm_90a")->schedule, "fa2");
}

TEST(Runtime, ALibrarysDispatchRulesPickItsKernelsUntilAScheduleIsSet) {
  test::TempDir dir;
  CachedKernel fa2 = test::fakeKernel("fa2"), fa3 = test::fakeKernel("fa3");
  ASSERT_EQ(fa3.info.arch, "sm_90a");
  fa2.info.defaultFor = DefaultCalls::All;
  fa3.info.schedule = "fa3";
  writeAotKernel(dir.path(), "fa2", fa2);
  AttentionArgs args = validArgs();
  args.variant = fa2.info.variant;
  args.seqlenQ = args.seqlenK = 4096;

  // Only fa2 in the library: fa2.
  std::unique_ptr<Runtime> fa2Only = bareRuntime();
  ASSERT_TRUE(fa2Only->loadAotDirectory(dir.path().string()).ok());
  EXPECT_EQ(fa2Only->specFor(args, "sm_90a")->schedule, "fa2");

  // Both, but the fa3 kernel records no rule: fa2 (the runtime names no schedule to prefer).
  writeAotKernel(dir.path(), "fa3", fa3);
  std::unique_ptr<Runtime> noRule = bareRuntime();
  ASSERT_TRUE(noRule->loadAotDirectory(dir.path().string()).ok());
  EXPECT_EQ(noRule->specFor(args, "sm_90a")->schedule, "fa2");

  // Both, fa3's kernel preferred over fa2's (the rule the fa3 schedule records on sm_90a): fa3 on sm_90a; a variant
  // fa3 lacks falls back to fa2 with one log line; no rule for sm_80 in this library; setSchedule forces one.
  fa3.info.defaultFor = DefaultCalls::All;
  fa3.info.preferredOver = {"fa2"};
  writeAotKernel(dir.path(), "fa3", fa3);
  std::unique_ptr<Runtime> both = bareRuntime();
  ASSERT_TRUE(both->loadAotDirectory(dir.path().string()).ok());
  EXPECT_EQ(both->specFor(args, "sm_90a")->schedule, "fa3");
  StatusOr<ScheduleChoice> choice = both->explain(args, "sm_90a");
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->entry, "flashtile_fwd_fa3");
  EXPECT_TRUE(choice->aheadOfTime);
  EXPECT_FALSE(choice->fellBack);
  EXPECT_THAT(both->specFor(args, "sm_80").status().message(), HasSubstr("no schedule for this call on sm_80"));

  std::vector<std::string> logged;
  LogHandler previous = Runtime::setLogHandler([&](std::string_view line) { logged.emplace_back(line); });
  AttentionArgs other = args;
  other.variant = "none";
  CachedKernel fa2None = test::fakeKernel("fa2_none");
  fa2None.info.variant = "none";
  fa2None.info.defaultFor = DefaultCalls::All;
  test::TempDir more;
  writeAotKernel(more.path(), "fa2_none", fa2None);
  ASSERT_TRUE(both->loadAotDirectory(more.path().string()).ok());
  for (int call = 0; call < 2; ++call) {
    choice = both->explain(other, "sm_90a");
    ASSERT_TRUE(choice.ok()) << choice.status().message();
    EXPECT_EQ(choice->spec.schedule, "fa2");
    EXPECT_TRUE(choice->fellBack);
    EXPECT_THAT(choice->reason, HasSubstr("fell back: schedule 'fa3' (preferred on sm_90a) has no kernel"));
  }
  Runtime::setLogHandler(previous);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_THAT(logged[0], HasSubstr("schedule 'fa3' (preferred on sm_90a) has no kernel for "));
  EXPECT_THAT(logged[0], HasSubstr("running 'fa2' instead"));

  both->setSchedule("fa2");
  EXPECT_EQ(both->specFor(args, "sm_90a")->schedule, "fa2");
}

TEST(Runtime, ShortSequencesAreTheirOwnShapeClass) {
  AttentionArgs args = validArgs();
  for (auto [seqlenQ, expected] : {std::pair{1, kShortShapeClass},
                                   {kShortSeqlen, kShortShapeClass},
                                   {kShortSeqlen + 1, kDefaultShapeClass},
                                   {16384, kDefaultShapeClass}}) {
    args.seqlenQ = args.seqlenK = seqlenQ;
    EXPECT_EQ(Runtime::shapeClassFor(args), expected) << "dense, seqlen " << seqlenQ;
  }
  // A few queries over long keys walk long: the default class.
  args.seqlenQ = 512;
  args.seqlenK = 8192;
  EXPECT_EQ(Runtime::shapeClassFor(args), kDefaultShapeClass);
  // Varlen: the mean over the sequences (total_q / batch), whatever the longest one.
  int offsets[5] = {0, 0, 0, 0, 0};
  args = AttentionArgs::varlen(DType::BF16, args.q, args.k, args.v, args.o, args.lse, offsets, offsets, 4,
                               4 * kShortSeqlen, 4 * kShortSeqlen, 3000, 3000, 8, 8, 128);
  EXPECT_EQ(Runtime::shapeClassFor(args), kShortShapeClass);
  args.seqlenQ = 4 * kShortSeqlen + 1;
  EXPECT_EQ(Runtime::shapeClassFor(args), kDefaultShapeClass);
  args.seqlenQ = 4 * kShortSeqlen;
  args.seqlenK = 4 * kShortSeqlen + 1;
  EXPECT_EQ(Runtime::shapeClassFor(args), kDefaultShapeClass);
}

TEST(Runtime, SpecForRejectsUnsupportedArchAndBadArgs) {
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  StatusOr<KernelSpec> spec = runtime->specFor(validArgs(), "sm_75");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("arch 'sm_75'"));
  EXPECT_THAT(spec.status().message(), HasSubstr("sm_80, sm_90a, sm_100a"));

  AttentionArgs args = validArgs();
  args.headDim = 40;
  EXPECT_THAT(runtime->specFor(args, "sm_90a").status().message(), HasSubstr("headDim 40"));
}

TEST(Runtime, SpecForCarriesBothHeadDims) {
  AttentionArgs args = validArgs();
  args.headDim = 192;
  args.headDimV = 128;
  StatusOr<KernelSpec> spec = memoryOnlyRuntime()->specFor(args, "sm_90a");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->headDim, 192);
  EXPECT_EQ(spec->headDimV, 128);
}

TEST(Runtime, NoKernelAndNoCompilerListsWhatIsAvailable) {
  test::TempDir dir;
  writeAotKernel(dir.path(), "causal_bf16_128", test::fakeKernel());
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  ASSERT_TRUE(runtime->loadAotDirectory(dir.path().string()).ok());
  KernelSpec wanted = test::fakeKernel().info.spec();
  wanted.variant = "none";
  StatusOr<std::shared_ptr<const CachedKernel>> kernel = runtime->findKernel(wanted);
  ASSERT_FALSE(kernel.ok());
  const std::string &message = kernel.status().message();
  EXPECT_THAT(message, HasSubstr("no kernel for " + wanted.key()));
  EXPECT_THAT(message, HasSubstr("in the ahead-of-time directory " + dir.path().string()));
  EXPECT_THAT(message, HasSubstr("no JIT compiler installed"));
  EXPECT_THAT(message, HasSubstr("available: " + test::fakeKernel().info.spec().key()));

  // A large library is summarized: the kernels with the request's arch, dtype and head dims, and a count.
  for (int i = 0; i < 12; ++i) {
    CachedKernel other = test::fakeKernel("other" + std::to_string(i));
    other.info.variant = "v" + std::to_string(i);
    if (i >= 6)
      other.info.headDim = other.info.headDimV = 64;
    writeAotKernel(dir.path(), "other" + std::to_string(i), other);
  }
  std::unique_ptr<Runtime> large = memoryOnlyRuntime();
  ASSERT_TRUE(large->loadAotDirectory(dir.path().string()).ok());
  StatusOr<std::shared_ptr<const CachedKernel>> missing = large->findKernel(wanted);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("13 kernels loaded; with this arch, dtype and head dims: "));
  EXPECT_THAT(missing.status().message(), testing::Not(HasSubstr("variant=v11")));

  StatusOr<std::shared_ptr<const CachedKernel>> nothing = memoryOnlyRuntime()->findKernel(wanted);
  ASSERT_FALSE(nothing.ok());
  EXPECT_THAT(nothing.status().message(), HasSubstr("no ahead-of-time directory loaded"));
  EXPECT_THAT(nothing.status().message(), HasSubstr("available: none"));
}

TEST(Runtime, LoadsAheadOfTimeKernels) {
  test::TempDir dir;
  CachedKernel causal = test::fakeKernel("causal");
  CachedKernel none = test::fakeKernel("none");
  none.info.variant = "none";
  writeAotKernel(dir.path(), "causal", causal);
  writeAotKernel(dir.path(), "none", none);
  writeFile(dir.path() / "README", "not a kernel");

  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  Status loaded = runtime->loadAotDirectory(dir.path().string());
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  for (const CachedKernel *expected : {&causal, &none}) {
    StatusOr<std::shared_ptr<const CachedKernel>> found = runtime->findKernel(expected->info.spec());
    ASSERT_TRUE(found.ok()) << found.status().message();
    EXPECT_EQ((*found)->info.entry, expected->info.entry);
    EXPECT_EQ((*found)->cubin, expected->cubin);
  }
}

TEST(Runtime, AheadOfTimeErrorsNameTheFile) {
  struct Case {
    std::string name;
    std::function<void(const fs::path &)> setUp;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"missing cubin",
       [](const fs::path &dir) { writeFile(dir / "k.manifest", test::fakeKernel().info.serialize()); },
       {"k.manifest", "cubin is missing", "k.cubin"}},
      {"garbled manifest",
       [](const fs::path &dir) {
         writeAotKernel(dir, "k", test::fakeKernel());
         writeFile(dir / "k.manifest", "entry=k\narch=sm_90a\n");
       },
       {"k.manifest", "field 'dtype': missing"}},
      {"not a cubin",
       [](const fs::path &dir) {
         writeAotKernel(dir, "k", test::fakeKernel());
         writeFile(dir / "k.cubin", "PTX text");
       },
       {"k.cubin", "not an ELF image"}},
      {"manifest is a directory",
       [](const fs::path &dir) { fs::create_directory(dir / "k.manifest"); },
       {"k.manifest: is a directory, not a regular file"}},
      {"cubin is a directory",
       [](const fs::path &dir) {
         writeAotKernel(dir, "k", test::fakeKernel());
         fs::remove(dir / "k.cubin");
         fs::create_directory(dir / "k.cubin");
       },
       {"k.manifest: its cubin is missing or unreadable", "k.cubin: is a directory, not a regular file"}},
      {"cubin is a FIFO",
       [](const fs::path &dir) {
         writeAotKernel(dir, "k", test::fakeKernel());
         fs::remove(dir / "k.cubin");
         ASSERT_EQ(mkfifo((dir / "k.cubin").c_str(), 0644), 0);
       },
       {"k.cubin: is a FIFO, not a regular file"}},
      {"manifest is a FIFO",
       [](const fs::path &dir) { ASSERT_EQ(mkfifo((dir / "k.manifest").c_str(), 0644), 0); },
       {"k.manifest: is a FIFO, not a regular file"}},
      {"cubin is a link to /dev/zero",
       [](const fs::path &dir) {
         writeAotKernel(dir, "k", test::fakeKernel());
         fs::remove(dir / "k.cubin");
         fs::create_symlink("/dev/zero", dir / "k.cubin");
       },
       {"k.cubin: is a character device, not a regular file"}},
      {"sm_80 cubin under an sm_90a manifest",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel();
         kernel.cubin = test::fakeCubin(80, {kernel.info.entry});
         writeAotKernel(dir, "k", kernel);
       },
       {"k.cubin (for k.manifest): compiled for sm_80 (ELF e_flags), but its manifest says sm_90a"}},
      {"truncated cubin",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel();
         kernel.cubin.resize(kernel.cubin.size() / 2);
         writeAotKernel(dir, "k", kernel);
       },
       {"k.cubin", "truncated"}},
      {"ELF magic and garbage",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel();
         kernel.cubin = "\x7f"
                        "ELF" +
                        std::string(4096, '\x5a');
         writeAotKernel(dir, "k", kernel);
       },
       {"k.cubin", "not a 64-bit little-endian ELF image"}},
      {"another kernel's cubin",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel("a");
         kernel.cubin = test::fakeKernel("b").cubin;
         writeAotKernel(dir, "k", kernel);
       },
       {"k.cubin", "defines no kernel 'flashtile_fwd_a' (the manifest's entry); its functions: flashtile_fwd_b"}},
      {"entry naming no symbol",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel("a");
         kernel.info.entry = kernel.info.plan.launches[0].entry = "flashtile_missing";
         writeAotKernel(dir, "k", kernel);
       },
       {"k.cubin", "defines no kernel 'flashtile_missing'"}},
      {"blockM 1",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel();
         writeAotKernel(dir, "k", kernel);
         std::string text = kernel.info.serialize();
         text.replace(text.find("blockM=128"), 10, "blockM=1");
         writeFile(dir / "k.manifest", text);
       },
       {"k.manifest: field 'blockM': 1 is not a multiple of 16 in [16, 1024]"}},
      {"smemBytes INT_MAX",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel();
         writeAotKernel(dir, "k", kernel);
         std::string text = kernel.info.serialize();
         text.replace(text.find("smemBytes=65536"), 15, "smemBytes=2147483647");
         writeFile(dir / "k.manifest", text);
       },
       {"k.manifest: field 'launch.0.smemBytes': 2147483647 is not in [0, 232448]"}},
      {"another compiler version",
       [](const fs::path &dir) {
         CachedKernel kernel = test::fakeKernel();
         kernel.info.compilerVersion = "0.0.1+0123456789ab";
         writeAotKernel(dir, "k", kernel);
       },
       {"k.manifest: written by flashtile 0.0.1+0123456789ab, but this runtime is "}},
      {"duplicate spec",
       [](const fs::path &dir) {
         writeAotKernel(dir, "a", test::fakeKernel("a"));
         writeAotKernel(dir, "b", test::fakeKernel("b"));
       },
       {"b.manifest and", "a.manifest both provide arch=sm_90a"}},
      {"no manifests",
       [](const fs::path &dir) {
         writeFile(dir / "k.cubin", "\x7f"
                                    "ELF");
       },
       {"has no *.manifest"}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    test::TempDir dir;
    c.setUp(dir.path());
    Status status = memoryOnlyRuntime()->loadAotDirectory(dir.path().string());
    ASSERT_FALSE(status.ok());
    for (const std::string &expected : c.expected)
      EXPECT_THAT(status.message(), HasSubstr(expected));
  }

  Status missing = memoryOnlyRuntime()->loadAotDirectory("/nonexistent/flashtile-aot");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("'/nonexistent/flashtile-aot' cannot be read"));
}

TEST(Runtime, AheadOfTimeLoadingIsAllOrNothing) {
  test::TempDir dir;
  writeAotKernel(dir.path(), "a_good", test::fakeKernel());
  writeFile(dir.path() / "b_bad.manifest", "garbage");
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  ASSERT_FALSE(runtime->loadAotDirectory(dir.path().string()).ok());
  EXPECT_FALSE(runtime->findKernel(test::fakeKernel().info.spec()).ok());
}

TEST(Runtime, JitCompilerIsCalledOnceAndCached) {
  test::TempDir cacheDir;
  Runtime runtime(test::cacheOptions(cacheDir.path().string(), true));
  int calls = 0;
  runtime.setCompiler([&](const KernelSpec &spec) -> StatusOr<CachedKernel> {
    ++calls;
    CachedKernel kernel = test::fakeKernel();
    kernel.info.variant = spec.variant;
    kernel.info.compilerVersion = std::string(compilerVersion());
    return kernel;
  });
  KernelSpec spec = test::fakeKernel().info.spec();
  spec.variant = "softcap#0123abcd";
  StatusOr<std::shared_ptr<const CachedKernel>> first = runtime.findKernel(spec);
  ASSERT_TRUE(first.ok()) << first.status().message();
  StatusOr<std::shared_ptr<const CachedKernel>> second = runtime.findKernel(spec);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(runtime.cache().stats().misses, 1u);

  // A second runtime (a second process, in effect) finds it on disk.
  Runtime other(test::cacheOptions(cacheDir.path().string(), true));
  other.setCompiler([&](const KernelSpec &) -> StatusOr<CachedKernel> {
    ++calls;
    return Status::error("should not compile");
  });
  StatusOr<std::shared_ptr<const CachedKernel>> fromDisk = other.findKernel(spec);
  ASSERT_TRUE(fromDisk.ok()) << fromDisk.status().message();
  EXPECT_EQ((*fromDisk)->info.variant, "softcap#0123abcd");
  EXPECT_EQ(calls, 1);
}

TEST(Runtime, AheadOfTimeKernelsWinOverJit) {
  test::TempDir dir;
  writeAotKernel(dir.path(), "k", test::fakeKernel("aot"));
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  ASSERT_TRUE(runtime->loadAotDirectory(dir.path().string()).ok());
  runtime->setCompiler([](const KernelSpec &) -> StatusOr<CachedKernel> { return Status::error("not expected"); });
  StatusOr<std::shared_ptr<const CachedKernel>> found = runtime->findKernel(test::fakeKernel().info.spec());
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->info.entry, "flashtile_fwd_aot");
}

CachedKernel shortKernel(const std::string &tag) {
  CachedKernel kernel = test::fakeKernel(tag);
  kernel.info.shapeClass = std::string(kShortShapeClass);
  kernel.info.blockM = 64;
  return kernel;
}

TEST(Runtime, AShapeClassWithoutAKernelOfItsOwnRunsTheDefaultClasssKernel) {
  test::TempDir dir;
  writeAotKernel(dir.path(), "default", test::fakeKernel("default"));
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  ASSERT_TRUE(runtime->loadAotDirectory(dir.path().string()).ok());
  KernelSpec spec = test::fakeKernel().info.spec();
  spec.shapeClass = std::string(kShortShapeClass);
  StatusOr<std::shared_ptr<const CachedKernel>> found = runtime->findKernel(spec);
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->info.entry, "flashtile_fwd_default");

  // With a kernel of its own in the directory, that one.
  test::TempDir both;
  writeAotKernel(both.path(), "default", test::fakeKernel("default"));
  writeAotKernel(both.path(), "short", shortKernel("short"));
  runtime = memoryOnlyRuntime();
  ASSERT_TRUE(runtime->loadAotDirectory(both.path().string()).ok());
  found = runtime->findKernel(spec);
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ((*found)->info.entry, "flashtile_fwd_short");
  spec.shapeClass = std::string(kDefaultShapeClass);
  EXPECT_EQ((*runtime->findKernel(spec))->info.entry, "flashtile_fwd_default");
}

TEST(Runtime, TheJitsShapeClassHookDecidesWhetherAClassIsCompiledAndIsAskedOncePerSpec) {
  test::TempDir dir;
  writeAotKernel(dir.path(), "default", test::fakeKernel("default"));
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  ASSERT_TRUE(runtime->loadAotDirectory(dir.path().string()).ok());
  int compiles = 0, asked = 0;
  std::string answer = std::string(kDefaultShapeClass);
  runtime->setCompiler(
      [&](const KernelSpec &spec) -> StatusOr<CachedKernel> {
        ++compiles;
        CachedKernel kernel = shortKernel("jit");
        kernel.info.variant = spec.variant;
        return kernel;
      },
      [&](const KernelSpec &) -> StatusOr<std::string> {
        ++asked;
        return answer;
      });
  KernelSpec spec = test::fakeKernel().info.spec();
  spec.shapeClass = std::string(kShortShapeClass);
  // Scheduled like the default class: the default's kernel, nothing compiled; asked once for two calls.
  for (int call = 0; call < 2; ++call) {
    StatusOr<std::shared_ptr<const CachedKernel>> found = runtime->findKernel(spec);
    ASSERT_TRUE(found.ok()) << found.status().message();
    EXPECT_EQ((*found)->info.entry, "flashtile_fwd_default");
  }
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(compiles, 0);

  // A class of its own: compiled (the directory has only the default's kernel).
  spec.variant = "alibi_causal";
  answer = std::string(kShortShapeClass);
  StatusOr<std::shared_ptr<const CachedKernel>> built = runtime->findKernel(spec);
  ASSERT_TRUE(built.ok()) << built.status().message();
  EXPECT_EQ((*built)->info.entry, "flashtile_fwd_jit");
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(asked, 2);

  // An ahead-of-time kernel of the class's own is used as it is, without asking.
  test::TempDir both;
  writeAotKernel(both.path(), "short", shortKernel("short"));
  ASSERT_TRUE(runtime->loadAotDirectory(both.path().string()).ok());
  spec.variant = "causal";
  StatusOr<std::shared_ptr<const CachedKernel>> own = runtime->findKernel(spec);
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ((*own)->info.entry, "flashtile_fwd_short");
  EXPECT_EQ(asked, 2);

  // A hook that cannot tell (a variant only the kernel library has) leaves the default class's kernel.
  spec.variant = "library_only";
  std::unique_ptr<Runtime> library = memoryOnlyRuntime();
  ASSERT_TRUE(library->loadAotDirectory(dir.path().string()).ok());
  test::TempDir libraryDir;
  writeAotKernel(libraryDir.path(), "library", [] {
    CachedKernel kernel = test::fakeKernel("library");
    kernel.info.variant = "library_only";
    return kernel;
  }());
  ASSERT_TRUE(library->loadAotDirectory(libraryDir.path().string()).ok());
  library->setCompiler([](const KernelSpec &) -> StatusOr<CachedKernel> { return Status::error("not expected"); },
                       [](const KernelSpec &) -> StatusOr<std::string> { return Status::error("not registered"); });
  StatusOr<std::shared_ptr<const CachedKernel>> fromLibrary = library->findKernel(spec);
  ASSERT_TRUE(fromLibrary.ok()) << fromLibrary.status().message();
  EXPECT_EQ((*fromLibrary)->info.entry, "flashtile_fwd_library");
  spec.variant = "unknown_everywhere";
  EXPECT_EQ(library->findKernel(spec).status().message(), "not registered");

  // An answer that is neither class is an error naming it.
  spec.variant = "softcap_causal";
  answer = "long";
  StatusOr<std::shared_ptr<const CachedKernel>> bad = runtime->findKernel(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("answered 'long'"));
}

TEST(Runtime, TheShapeClassAnswerIsFiledOnDiskSoThatAFreshRuntimeDoesNotAskAgain) {
  test::TempDir cacheDir;
  int asked = 0, compiles = 0;
  auto newRuntime = [&] {
    auto runtime = std::make_unique<Runtime>(test::cacheOptions(cacheDir.path().string(), true));
    runtime->setCompiler(
        [&](const KernelSpec &spec) -> StatusOr<CachedKernel> {
          ++compiles;
          CachedKernel kernel = spec.shapeClass == kShortShapeClass ? shortKernel("jit") : test::fakeKernel("jit");
          kernel.info.variant = spec.variant;
          return kernel;
        },
        [&](const KernelSpec &spec) -> StatusOr<std::string> {
          ++asked;
          return std::string(spec.variant == "causal" ? kShortShapeClass : kDefaultShapeClass);
        });
    return runtime;
  };
  KernelSpec spec = test::fakeKernel().info.spec();
  spec.shapeClass = std::string(kShortShapeClass);
  for (const char *variant : {"causal", "none"}) {
    spec.variant = variant;
    StatusOr<std::shared_ptr<const CachedKernel>> found = newRuntime()->findKernel(spec);
    ASSERT_TRUE(found.ok()) << found.status().message();
  }
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(compiles, 2);
  // Fresh runtimes on the same cache (a new process): the answers and the kernels come from the disk.
  for (const char *variant : {"causal", "none"}) {
    spec.variant = variant;
    StatusOr<std::shared_ptr<const CachedKernel>> found = newRuntime()->findKernel(spec);
    ASSERT_TRUE(found.ok()) << found.status().message();
    EXPECT_EQ((*found)->info.shapeClass, spec.variant == "causal" ? kShortShapeClass : kDefaultShapeClass);
  }
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(compiles, 2);
}

TEST(Runtime, JitResultMustMatchTheSpec) {
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  runtime->setCompiler([](const KernelSpec &) -> StatusOr<CachedKernel> { return test::fakeKernel(); });
  KernelSpec spec = test::fakeKernel().info.spec();
  spec.headDim = spec.headDimV = 64;
  StatusOr<std::shared_ptr<const CachedKernel>> kernel = runtime->findKernel(spec);
  ASSERT_FALSE(kernel.ok());
  EXPECT_THAT(kernel.status().message(), HasSubstr("was asked for " + spec.key()));
  EXPECT_THAT(kernel.status().message(), HasSubstr("headDim=128"));

  runtime->setCompiler([](const KernelSpec &) -> StatusOr<CachedKernel> { return Status::error("lowering failed"); });
  EXPECT_EQ(runtime->findKernel(spec).status().message(), "lowering failed");
}

TEST(Runtime, EmptyQueryIsANoOpWithoutTouchingTheGpu) {
  AttentionArgs args = validArgs();
  args.seqlenQ = 0;
  Status status = memoryOnlyRuntime()->forward(args);
  EXPECT_TRUE(status.ok()) << status.message();
}

// Varlen with every sequence empty (max_seqlen_q = 0) has nothing to write: no kernel, no GPU.
TEST(Runtime, VarlenWithNoQueryRowsIsANoOpWithoutTouchingTheGpu) {
  const AttentionArgs dense = validArgs();
  AttentionArgs args = AttentionArgs::varlen(dense.dtype, dense.q, dense.k, dense.v, dense.o, dense.lse,
                                             reinterpret_cast<const int *>(0x60000),
                                             reinterpret_cast<const int *>(0x70000), /*batch=*/3, /*totalQ=*/0,
                                             /*totalK=*/64, /*maxSeqlenQ=*/0, /*maxSeqlenK=*/32, 8, 2, 128);
  Status status = memoryOnlyRuntime()->forward(args);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(Runtime, InvalidArgsFailBeforeTheDriver) {
  AttentionArgs args = validArgs();
  args.headsKv = 3;
  Status status = memoryOnlyRuntime()->forward(args);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("headsQ (8) must be a multiple of headsKv (3)"));
}

TEST(Runtime, ForwardWithoutDriverSaysSo) {
  if (driverLoadable())
    GTEST_SKIP() << "libcuda.so.1 is loadable here; this test checks the error on machines without a driver";
  Status status = memoryOnlyRuntime()->forward(validArgs());
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("no NVIDIA driver: libcuda.so.1 could not be loaded ("));
  EXPECT_THAT(status.message(), HasSubstr("compiling/emitting kernels works without a GPU, running them needs one"));

  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().message(), status.message());
  EXPECT_FALSE(memoryOnlyRuntime()->specFor(validArgs()).ok());
}

TEST(CudaDriver, MapsComputeCapabilityToArch) {
  EXPECT_EQ(*archForComputeCapability(8, 0), "sm_80");
  EXPECT_EQ(*archForComputeCapability(8, 6), "sm_80");
  EXPECT_EQ(*archForComputeCapability(8, 9), "sm_80");
  EXPECT_EQ(*archForComputeCapability(9, 0), "sm_90a");
  EXPECT_EQ(*archForComputeCapability(10, 0), "sm_100a");
  for (auto [major, minor] : {std::pair{7, 5}, {10, 3}, {12, 0}}) {
    StatusOr<std::string> arch = archForComputeCapability(major, minor);
    ASSERT_FALSE(arch.ok());
    EXPECT_THAT(arch.status().message(),
                HasSubstr("compute capability " + std::to_string(major) + "." + std::to_string(minor)));
    EXPECT_THAT(arch.status().message(), HasSubstr("8.x (sm_80), 9.0 (sm_90a), 10.0 (sm_100a)"));
  }
}

TEST(Version, IncludesProjectVersionAndRevision) {
  EXPECT_THAT(std::string(compilerVersion()), testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+\\+.+"));
}

} // namespace

namespace {

TEST(Runtime, ExceptionsFromHooksBecomeErrors) {
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  runtime->setVariantCheck([](const AttentionArgs &) -> Status { throw std::runtime_error("check exploded"); });
  Status forwarded = runtime->forward(validArgs());
  ASSERT_FALSE(forwarded.ok());
  EXPECT_THAT(forwarded.message(), HasSubstr("forward: internal error: check exploded"));

  runtime->setCompiler([](const KernelSpec &) -> StatusOr<CachedKernel> { return Status::error("unused"); },
                       [](const KernelSpec &) -> StatusOr<std::string> { throw 42; });
  KernelSpec spec = test::fakeKernel().info.spec();
  spec.shapeClass = std::string(kShortShapeClass);
  StatusOr<std::shared_ptr<const CachedKernel>> found = runtime->findKernel(spec);
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(found.status().message(), HasSubstr("findKernel: internal error (a non-standard exception)"));
}

TEST(Runtime, VariantNumbersAreCheckedAgainstAheadOfTimeRulesBeforeTheGpu) {
  test::TempDir dir;
  CachedKernel kernel = test::fakeKernel();
  kernel.info.variant = "softcap";
  kernel.info.paramNames = {"cap"};
  kernel.info.paramRules = {{"cap > 0 && isfinite(cap)", "a positive, finite number"}};
  writeAotKernel(dir.path(), "k", kernel);
  std::unique_ptr<Runtime> runtime = memoryOnlyRuntime();
  ASSERT_TRUE(runtime->loadAotDirectory(dir.path().string()).ok());
  AttentionArgs args = validArgs();
  args.variant = "softcap";
  args.variantParams = {0.f};
  Status status = runtime->forward(args);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "variantParams: variant 'softcap': cap = 0 is not accepted; accepted: a positive, finite number");
  // With no query rows nothing runs, but the numbers are still judged.
  args.seqlenQ = 0;
  EXPECT_FALSE(runtime->forward(args).ok());
}

} // namespace
