// TestUtil.h — helpers shared by the runtime unit tests.
#ifndef FLASHTILE_TESTS_UNIT_RUNTIME_TESTUTIL_H
#define FLASHTILE_TESTS_UNIT_RUNTIME_TESTUTIL_H

#include "FakeCubin.h"
#include "codegen/common/LaunchPlanner.h"
#include "flashtile/runtime/Dispatch.h"
#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/Log.h"
#include "flashtile/runtime/Version.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace flashtile::test {

/// Collects the runtime's warnings for one scope.
class CapturedWarnings {
public:
  CapturedWarnings() {
    previous = setLogHandler([this](std::string_view message) {
      std::lock_guard<std::mutex> lock(mutex);
      messages.emplace_back(message);
    });
  }
  ~CapturedWarnings() { setLogHandler(std::move(previous)); }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages;
  }

private:
  LogHandler previous;
  std::mutex mutex;
  std::vector<std::string> messages;
};

/// A fresh directory under the system temp dir, removed with everything in it at the end of the test.
class TempDir {
public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "flashtile-test-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    root = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const std::filesystem::path &path() const { return root; }

private:
  std::filesystem::path root;
};

/// Sets (or, with a null value, unsets) an environment variable for one scope, restoring the old value after.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (previous)
      setenv(name, previous->c_str(), 1);
    else
      unsetenv(name);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name;
  std::optional<std::string> previous;
};

/// Cache options with `dir` and the disk layer on or off, and everything else at its default.
inline KernelCache::Options cacheOptions(std::string dir, bool diskEnabled) {
  KernelCache::Options options;
  options.dir = std::move(dir);
  options.diskEnabled = diskEnabled;
  return options;
}

/// The planner's facts of a plain module of `info`'s entry and tiles, as the compiler states them.
inline codegen::ModuleFacts mainFacts(const KernelInfo &info, int threads, int smemBytes) {
  codegen::ModuleFacts facts;
  facts.entry = info.entry;
  facts.blockM = info.blockM;
  facts.blockN = info.blockN;
  facts.threads = threads;
  facts.smemBytes = smemBytes;
  return facts;
}

/// The dispatch rules the built-in schedules register (their dispatchRule), written out as the runtime tests' data
/// (no compiler here; tests/unit/compiler checks the registered rules order the same way): fa2 for every call on
/// every arch, fa3 preferred over it on sm_90a, decode first for decode-sized calls.
inline std::vector<DispatchRule> dispatchRules() {
  std::vector<DispatchRule> rules;
  for (std::string_view arch : kSupportedArchs) {
    rules.push_back({"fa2", std::string(arch), DefaultCalls::All, {}});
    rules.push_back({"decode", std::string(arch), DefaultCalls::Decode, {}});
  }
  rules.push_back({"fa3", "sm_90a", DefaultCalls::All, {"fa2"}});
  return rules;
}

/// A kernel whose fields are all valid, built by this compiler version, with a cubin for its arch (sm_90a) that
/// defines its entry; `tag` makes entry and cubin distinct per test kernel.
inline CachedKernel fakeKernel(const std::string &tag = "a") {
  KernelInfo info;
  info.entry = "flashtile_fwd_" + tag;
  info.arch = "sm_90a";
  info.dtype = "bf16";
  info.headDim = 128;
  info.headDimV = 128;
  info.variant = "causal";
  info.schedule = "fa2";
  info.shapeClass = "default";
  info.blockM = 128;
  info.blockN = 64;
  info.compilerVersion = std::string(compilerVersion());
  info.plan = codegen::planLaunches(mainFacts(info, 128, 65536));
  return {info, fakeCubin(90, {info.entry})};
}

/// A split-KV kernel of the decode schedule (hd128 causal bf16, sm_90a: 64-row blocks of 4 warps, 128-key tiles, a
/// combine entry) whose fields verify; `entry` names it. `pack`: GQA packing; `kvCache`: an append kernel first.
inline KernelInfo splitKvKernel(const std::string &entry = "flashtile_decode_causal_bf16_d128", bool pack = false,
                                bool kvCache = false) {
  KernelInfo info;
  info.entry = entry;
  info.arch = "sm_90a";
  info.dtype = "bf16";
  info.headDim = info.headDimV = 128;
  info.variant = "causal";
  info.schedule = "decode";
  info.shapeClass = "default";
  info.blockM = 64;
  info.blockN = 128;
  info.compilerVersion = "test";
  codegen::ModuleFacts facts = mainFacts(info, 128, 82944);
  facts.combineEntry = info.entry + "_combine";
  facts.combineRows = 1;
  facts.combineThreads = 128;
  facts.dependentLaunch = true;
  facts.packQueryHeads = pack;
  if (kvCache) {
    info.kvCache = true;
    facts.appendEntry = info.entry + "_append";
    facts.appendThreads = 128;
    facts.appendChunkElements = 8;
  }
  info.plan = codegen::planLaunches(facts);
  return info;
}

} // namespace flashtile::test

#endif // FLASHTILE_TESTS_UNIT_RUNTIME_TESTUTIL_H
