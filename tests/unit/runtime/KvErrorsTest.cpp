// KvErrorsTest.cpp — the KV cache's device error record without a GPU: the plan's error-record workspace, the record
// the runtime binds to KV-cache calls (one per context, zeroed once, kept across calls), its read-back and report
// (Runtime::checkErrors, a growing workspace's synchronization), and FLASHTILE_CHECK_KVCACHE=1, which copies the
// device values and checks them before the launch. A stand-in driver keeps "device memory" in host buffers, so that
// a test plants what a kernel would have written and reads what the runtime zeroed.
#include "runtime/lib/KvErrors.h"
#include "StandInDriver.h"
#include "TestUtil.h"
#include "runtime/lib/PlanRunner.h"

#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

#include <cstring>
#include <map>

using namespace flashtile;
using testing::HasSubstr;
using testing::Not;

namespace {

using stand_in::device;
using stand_in::hostOf;

void plant(const void *address, const std::vector<int> &values) {
  stand_in::plant(address, values.data(), values.size() * sizeof(int));
}

constexpr int kBatch = 2, kPageSize = 16, kPagesPerSeq = 8, kPages = 100;
const auto *const kBase = reinterpret_cast<const char *>(0x1000000);
const int *const kSeqlens = reinterpret_cast<const int *>(0x2000000);
const int *const kTable = reinterpret_cast<const int *>(0x3000000);

/// A paged-cache call (decode-sized, appending one key) whose device arrays live at kSeqlens and kTable.
AttentionArgs pagedCall() {
  AttentionArgs args = AttentionArgs::pagedCache(
      DType::BF16, kBase, kBase + 0x100000, kBase + 0x200000, const_cast<char *>(kBase) + 0x300000,
      reinterpret_cast<float *>(const_cast<char *>(kBase) + 0x400000), kBatch, /*seqlenQ=*/1, kPages, kPageSize, kTable,
      kPagesPerSeq, /*headsQ=*/32, /*headsKv=*/8, /*headDim=*/128, kSeqlens);
  args.kvCache.append(kBase + 0x500000, kBase + 0x600000, /*seqlen=*/1, /*headsKv=*/8, /*headDim=*/128);
  args.numSplits = 1;
  return args;
}

/// A record as a kernel leaves it.
FlashtileKvError published(int argument, int call, int kernel, int row, int column, int value, int last) {
  return FlashtileKvError{argument, call, kernel, row, column, value, last, 0};
}

void write(CUdeviceptr address, const FlashtileKvError &record) {
  char *host = hostOf(address, sizeof(record));
  ASSERT_NE(host, nullptr);
  std::memcpy(host, &record, sizeof(record));
}

FlashtileKvError read(CUdeviceptr address) {
  FlashtileKvError record{};
  if (const char *host = hostOf(address, sizeof(record)))
    std::memcpy(&record, host, sizeof(record));
  return record;
}

class KvErrors : public testing::Test {
protected:
  void SetUp() override { device = stand_in::Device(); }

  /// Runs `info`'s plan for `args` through the runner with this test's records.
  Status run(const KernelInfo &info, const AttentionArgs &args, bool withRecords = true) {
    auto kernel = std::make_shared<const CachedKernel>(CachedKernel{info, ""});
    StatusOr<detail::LoadedModule> module = detail::loadModule(driver, reinterpret_cast<CUcontext>(0x2), kernel);
    if (!module.ok())
      return module.status();
    detail::PlanServices services{workspaces, [] { return StatusOr<int>(132); }, withRecords ? &records : nullptr};
    return detail::runPlan(driver, *module, args, nullptr, services);
  }

  CudaDriver driver = stand_in::standInDriver();
  detail::SplitKvWorkspaces workspaces;
  detail::KvErrorRecords records;
};

const KernelInfo &cacheKernel() {
  static const KernelInfo info = test::splitKvKernel("flashtile_decode_causal_bf16_d128_kvcache", false, true);
  return info;
}

TEST(KvErrorPlan, CacheModulesDeclareTheRecordAndNoOtherModuleDoes) {
  const KernelInfo &info = cacheKernel();
  const PlanWorkspace *record = nullptr;
  for (const PlanWorkspace &w : info.plan.workspaces)
    if (w.errorRecord)
      record = &w;
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->bytes.text(), std::to_string(sizeof(FlashtileKvError)));
  ASSERT_EQ(record->bind.size(), 1u);
  EXPECT_EQ(record->bind[0].first, "kvErrors");
  EXPECT_FALSE(record->zeroed);
  EXPECT_TRUE(info.plan.verify(227 * 1024).ok()) << info.plan.verify(227 * 1024).message();
  for (const KernelInfo &other : {test::splitKvKernel(), test::fakeKernel().info})
    for (const PlanWorkspace &w : other.plan.workspaces)
      EXPECT_FALSE(w.errorRecord) << w.name;

  // The manifest's text keeps it.
  std::map<std::string, std::string, std::less<>> fields;
  std::string text = info.plan.serialize();
  EXPECT_THAT(text, HasSubstr(".errorRecord=1"));
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start), eq = text.find('=', start);
    fields[text.substr(start, eq - start)] = text.substr(eq + 1, end - eq - 1);
    start = end + 1;
  }
  StatusOr<LaunchPlan> parsed = LaunchPlan::parse(fields);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->serialize(), text);
}

TEST(KvErrorPlan, VerifyKeepsTheRecordsShapeAndTheFieldToIt) {
  auto withRecord = [](auto change) {
    LaunchPlan plan = cacheKernel().plan;
    for (PlanWorkspace &w : plan.workspaces)
      if (w.errorRecord)
        change(w);
    return plan.verify(227 * 1024);
  };
  EXPECT_THAT(withRecord([](PlanWorkspace &w) { w.bytes = PlanExpr::constant(64); }).message(),
              HasSubstr("an error record binds kvErrors at 0, is 32 bytes (FlashtileKvError)"));
  EXPECT_THAT(withRecord([](PlanWorkspace &w) { w.zeroed = true; }).message(), HasSubstr("no per-call zeroing"));
  EXPECT_THAT(withRecord([](PlanWorkspace &w) { w.bind.emplace_back("oAccum", PlanExpr::constant(0)); }).message(),
              HasSubstr("an error record binds kvErrors only"));
  EXPECT_THAT(withRecord([](PlanWorkspace &w) { w.errorRecord = false; }).message(),
              HasSubstr("only a workspace with errorRecord set binds it"));
}

TEST(KvErrorReport, NamesTheCallTheArgumentTheValueAndTheRange) {
  detail::KvCallInfo call =
      detail::KvCallInfo::of(pagedCall(), std::make_shared<const CachedKernel>(CachedKernel{cacheKernel(), ""}),
                             reinterpret_cast<CUstream>(0x1234));
  EXPECT_EQ(
      detail::describeKvError(
          published(FLASHTILE_KV_ERROR_BLOCK_TABLE, 7, FLASHTILE_KV_ERROR_IN_ATTENTION, 1, 7, 1048576, 99), &call),
      "KV-cache call #7 (kernel flashtile_decode_causal_bf16_d128_kvcache, batch 2, seqlen_q 1, a paged cache "
      "of 100 pages, 128 keys a sequence, 1 appended, stream 0x1234): its attention kernel read "
      "block_table[1][7] = 1048576; accepted: a page index from 0 to num_pages - 1 = 99. The kernels clamped "
      "it into range (nothing outside the caches was read or written), so that call's output and the keys it "
      "appended are wrong");
  EXPECT_THAT(detail::describeKvError(
                  published(FLASHTILE_KV_ERROR_CACHE_SEQLENS, 3, FLASHTILE_KV_ERROR_IN_APPEND, 3, -1, -5, 127), &call),
              HasSubstr("its append kernel read cache_seqlens[3] = -5; accepted: 0 to seqlen_k - seqlen_new = 127"));
  EXPECT_THAT(
      detail::describeKvError(
          published(FLASHTILE_KV_ERROR_CACHE_BATCH_IDX, 9, FLASHTILE_KV_ERROR_IN_ATTENTION, 0, -1, 4, 3), nullptr),
      HasSubstr("KV-cache call #9 (no longer remembered: the runtime names its last 256 calls): its "
                "attention kernel read cache_batch_idx[0] = 4; accepted: a cache row from 0 to cache_batch "
                "- 1 = 3"));
}

TEST_F(KvErrors, CacheCallsShareOneRecordPerContextZeroedOnceAndNumbered) {
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  ASSERT_FALSE(device.launches.empty());
  const CUdeviceptr record = reinterpret_cast<CUdeviceptr>(device.launches.back().params.kvErrors);
  ASSERT_NE(record, 0u);
  EXPECT_EQ(device.allocations, 1);
  EXPECT_EQ(read(record).argument, 0) << "zeroed before the first kernel";
  for (const stand_in::Launch &launch : device.launches) {
    EXPECT_EQ(reinterpret_cast<CUdeviceptr>(launch.params.kvErrors), record) << launch.entry;
    EXPECT_EQ(launch.params.kvCall, 1) << launch.entry;
  }
  const size_t memsets = device.memsets.size();
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  EXPECT_EQ(device.allocations, 1) << "kept across calls";
  EXPECT_EQ(device.memsets.size(), memsets) << "not zeroed per call";
  EXPECT_EQ(device.launches.back().params.kvCall, 2);
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(device.launches.back().params.kvErrors), record);

  // Modules without the workspace get none, and no record is made for them.
  device.launches.clear();
  AttentionArgs plain = pagedCall();
  plain.kvCache = KvCacheArgs();
  ASSERT_TRUE(run(test::splitKvKernel(), plain).ok());
  EXPECT_EQ(device.allocations, 1);
  for (const stand_in::Launch &launch : device.launches)
    EXPECT_EQ(launch.params.kvErrors, nullptr) << launch.entry;
}

TEST_F(KvErrors, UnderGraphCaptureWithoutARecordTheCallRunsWithoutOne) {
  device.capturing = true;
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  EXPECT_EQ(device.allocations, 0);
  ASSERT_FALSE(device.launches.empty());
  EXPECT_EQ(device.launches.back().params.kvErrors, nullptr);
  // Once a call outside capture made it, captured calls write it too.
  device.capturing = false;
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  device.capturing = true;
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  EXPECT_NE(device.launches.back().params.kvErrors, nullptr);
}

TEST_F(KvErrors, CheckAllReportsThePlantedValueWithItsCallAndZeroesTheRecord) {
  EXPECT_TRUE(records.checkAll(driver).ok()) << "no record yet: nothing to read, nothing synchronized";
  EXPECT_EQ(device.contextSyncs, 0);
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  const CUdeviceptr record = reinterpret_cast<CUdeviceptr>(device.launches.back().params.kvErrors);
  EXPECT_TRUE(records.checkAll(driver).ok());
  write(record, published(FLASHTILE_KV_ERROR_BLOCK_TABLE, 1, FLASHTILE_KV_ERROR_IN_APPEND, 1, 7, 1048576, 99));
  Status found = records.checkAll(driver);
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(found.message(),
              HasSubstr("KV-cache call #1 (kernel flashtile_decode_causal_bf16_d128_kvcache, batch 2"));
  EXPECT_THAT(found.message(), HasSubstr("its append kernel read block_table[1][7] = 1048576; accepted: a page index "
                                         "from 0 to num_pages - 1 = 99"));
  EXPECT_GE(device.contextSyncs, 1);
  EXPECT_EQ(read(record).argument, 0) << "reset when read";
  EXPECT_TRUE(records.checkAll(driver).ok()) << "reported once";

  // A record a kernel is still writing is left alone by a stream's read; after the whole context is idle it is stale.
  write(record, published(FLASHTILE_KV_ERROR_CLAIMED, 0, 0, 0, 0, 0, 0));
  EXPECT_TRUE(records.readAfterSync(driver, reinterpret_cast<CUcontext>(0x2), nullptr).ok());
  EXPECT_EQ(read(record).argument, FLASHTILE_KV_ERROR_CLAIMED);
  EXPECT_THAT(records.checkAll(driver).message(), HasSubstr("claimed by a kernel that did not finish writing it"));
  EXPECT_EQ(read(record).argument, 0);
}

TEST_F(KvErrors, ReportsNameCallsTheRuntimeStillRemembers) {
  for (int i = 0; i < detail::KvErrorRecords::kRememberedCalls + 2; ++i)
    ASSERT_TRUE(run(cacheKernel(), pagedCall()).ok());
  const CUdeviceptr record = reinterpret_cast<CUdeviceptr>(device.launches.back().params.kvErrors);
  const int last = device.launches.back().params.kvCall;
  write(record, published(FLASHTILE_KV_ERROR_CACHE_SEQLENS, 1, FLASHTILE_KV_ERROR_IN_ATTENTION, 0, -1, -3, 127));
  EXPECT_THAT(records.checkAll(driver).message(), HasSubstr("KV-cache call #1 (no longer remembered"));
  write(record, published(FLASHTILE_KV_ERROR_CACHE_SEQLENS, last, FLASHTILE_KV_ERROR_IN_ATTENTION, 0, -1, -3, 127));
  EXPECT_THAT(records.checkAll(driver).message(),
              HasSubstr("KV-cache call #" + std::to_string(last) + " (kernel flashtile_decode"));
}

TEST_F(KvErrors, AWorkspaceThatGrowsSynchronizesAndReportsAnEarlierCallsValue) {
  AttentionArgs args = pagedCall();
  args.numSplits = 2; // partials in the runtime's workspace
  ASSERT_TRUE(run(cacheKernel(), args).ok());
  const CUdeviceptr record = reinterpret_cast<CUdeviceptr>(device.launches.back().params.kvErrors);
  write(record, published(FLASHTILE_KV_ERROR_CACHE_SEQLENS, 1, FLASHTILE_KV_ERROR_IN_APPEND, 1, -1, -5, 127));
  const size_t launched = device.launches.size();
  args.numSplits = 64; // grows the workspace: the stream is synchronized
  Status s = run(cacheKernel(), args);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("its append kernel read cache_seqlens[1] = -5"));
  EXPECT_THAT(s.message(), HasSubstr("found by a later call, which launched nothing"));
  EXPECT_EQ(device.launches.size(), launched);
  EXPECT_EQ(read(record).argument, 0);
  EXPECT_TRUE(run(cacheKernel(), args).ok());
}

// forward() through a runtime whose JIT returns KV-cache modules.
class KvErrorsForward : public KvErrors {
protected:
  void SetUp() override {
    KvErrors::SetUp();
    CudaDriver::useInsteadForTesting(&driver);
    runtime = std::make_unique<Runtime>(test::cacheOptions("", false));
    runtime->setDispatchRules(test::dispatchRules());
    runtime->setCompiler([](const KernelSpec &spec) -> StatusOr<CachedKernel> {
      KernelInfo info = stand_in::forSpec(
          test::splitKvKernel("flashtile_" + spec.schedule + "_" + spec.variant + "_kvcache", false, spec.kvCache), spec);
      info.compilerVersion = std::string(compilerVersion());
      std::vector<std::string> entries;
      for (const PlanLaunch &launch : info.plan.launches)
        entries.push_back(launch.entry);
      return CachedKernel{info, test::fakeCubin(90, entries)};
    });
    plant(kSeqlens, {100, 50});
    std::vector<int> table(kBatch * kPagesPerSeq);
    for (size_t i = 0; i < table.size(); ++i)
      table[i] = static_cast<int>(i);
    plant(kTable, table);
  }
  void TearDown() override {
    runtime.reset();
    CudaDriver::useInsteadForTesting(nullptr);
  }
  std::unique_ptr<Runtime> runtime;
};

TEST_F(KvErrorsForward, CheckErrorsReportsWhatAKernelRecorded) {
  EXPECT_TRUE(runtime->checkErrors().ok());
  AttentionArgs args = pagedCall();
  ASSERT_TRUE(runtime->forward(args).ok()) << runtime->forward(args).message();
  ASSERT_FALSE(device.launches.empty());
  const FlashtileFwdParams &params = device.launches.back().params;
  ASSERT_NE(params.kvErrors, nullptr);
  write(reinterpret_cast<CUdeviceptr>(params.kvErrors),
        published(FLASHTILE_KV_ERROR_BLOCK_TABLE, params.kvCall, FLASHTILE_KV_ERROR_IN_ATTENTION, 1, 7, 1048576, 99));
  Status s = runtime->checkErrors();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("(kernel flashtile_decode_none_kvcache, batch 2, seqlen_q 1, a paged cache of 100 "
                                     "pages, 128 keys a sequence, 1 appended"));
  EXPECT_THAT(s.message(), HasSubstr("block_table[1][7] = 1048576; accepted: a page index from 0 to num_pages - 1 = "
                                     "99"));
  EXPECT_TRUE(runtime->checkErrors().ok());
}

TEST_F(KvErrorsForward, CheckKvCacheCopiesTheDeviceValuesAndRejectsBadOnesBeforeTheLaunch) {
  test::ScopedEnv check("FLASHTILE_CHECK_KVCACHE", "1");
  AttentionArgs args = pagedCall();
  ASSERT_TRUE(runtime->forward(args).ok()) << runtime->forward(args).message();
  const size_t launched = device.launches.size();

  plant(kSeqlens, {100, -5});
  Status s = runtime->forward(args);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "FLASHTILE_CHECK_KVCACHE: kvCache.cacheSeqlens[1] = -5; accepted: 0 to seqlenK - seqlenNew = "
                         "127 (the cache must hold the cached and the new keys)");
  EXPECT_EQ(device.launches.size(), launched) << "nothing launched";

  plant(kSeqlens, {100, 50});
  std::vector<int> table(kBatch * kPagesPerSeq, 3);
  table[kPagesPerSeq + 2] = 1 << 20; // sequence 1's third page: keys 32..47 of its 51
  plant(kTable, table);
  s = runtime->forward(args);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "FLASHTILE_CHECK_KVCACHE: kvCache.blockTable[1][2] = 1048576; accepted: a page index from 0 "
                         "to numPages - 1 = 99");
  table[kPagesPerSeq + 2] = 3;
  table[kPagesPerSeq + 5] = -1; // past what sequence 1 holds: never read, not checked
  plant(kTable, table);
  EXPECT_TRUE(runtime->forward(args).ok());

  // The same synchronization reads back what an earlier call's kernels recorded, and fails this call with it.
  const FlashtileFwdParams &params = device.launches.back().params;
  write(reinterpret_cast<CUdeviceptr>(params.kvErrors),
        published(FLASHTILE_KV_ERROR_CACHE_SEQLENS, params.kvCall, FLASHTILE_KV_ERROR_IN_APPEND, 0, -1, 4096, 127));
  s = runtime->forward(args);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("its append kernel read cache_seqlens[0] = 4096"));
  EXPECT_THAT(s.message(), HasSubstr("found by a later call"));
  EXPECT_TRUE(runtime->forward(args).ok());

  // Without the variable nothing is copied: the device values are not read on the host.
  test::ScopedEnv off("FLASHTILE_CHECK_KVCACHE", "0");
  plant(kSeqlens, {100, -5});
  EXPECT_TRUE(runtime->forward(args).ok());
}

} // namespace
