// GpuTestSupport.h — what every GPU test binary shares: the environment it reads, the run's seed, the GPU found once
// (driver, device, arch, the reference kernels), the skip-or-fail rule without one, and a watchdog for hung kernels.
//
// A binary derives its own state from GpuState (adding its runtimes), fills it once through findGpu() in a function
// named gpu(), and starts each case with REQUIRE_GPU(): without a GPU the case skips with the reason, or fails when
// FLASHTILE_REQUIRE_GPU=1 (the GPU machine's scripts set it, so that a broken driver cannot pass as a skip); with a GPU
// whose harness could not be set up, it fails.
#ifndef FLASHTILE_TESTS_GPU_GPUTESTSUPPORT_H
#define FLASHTILE_TESTS_GPU_GPUTESTSUPPORT_H

#include "GpuReference.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Status.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace flashtile::gpu_test {

/// An environment variable that is set, not empty and not "0".
inline bool envFlag(const char *name) {
  const char *value = std::getenv(name);
  return value && *value && std::string(value) != "0";
}

/// An environment variable's value, or `fallback` where it is unset or empty.
inline std::string envOr(const char *name, const std::string &fallback) {
  const char *value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

/// The run's base seed: FLASHTILE_TEST_SEED (decimal) to replay a failure, else fresh.
inline uint64_t baseSeed() {
  static const uint64_t seed = [] {
    if (const char *text = std::getenv("FLASHTILE_TEST_SEED"); text && *text)
      return uint64_t(std::strtoull(text, nullptr, 10));
    // /dev/urandom rather than std::random_device: the static libstdc++ (GCC 12) implements that with arc4random,
    // which would make the binaries need glibc 2.36 on the GPU machine.
    uint64_t value = 0;
    if (std::FILE *urandom = std::fopen("/dev/urandom", "rb")) {
      if (std::fread(&value, sizeof value, 1, urandom) != 1)
        value = 0;
      std::fclose(urandom);
    }
    return value ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

/// The GPU as a binary found it; each binary derives its own (adding its runtimes) and keeps one in gpu().
struct GpuState {
  const CudaDriver *driver = nullptr;
  std::string noGpuReason; // set: no usable GPU here (cases skip, or fail with FLASHTILE_REQUIRE_GPU)
  std::string setupError;  // set: a GPU is here but the harness could not be set up (cases fail)
  std::string arch;        // the device's, e.g. "sm_90a"
  std::optional<reference::GpuReference> reference; // the reference kernels, where findGpu() was asked to load them
};

/// A runtime whose kernel cache stays in memory (a test writes nothing to disk).
inline std::unique_ptr<Runtime> memoryOnlyRuntime() {
  KernelCache::Options memoryOnly;
  memoryOnly.diskEnabled = false;
  return std::make_unique<Runtime>(memoryOnly);
}

/// The kernels of the ahead-of-time directory `dir` loaded into `runtime` (made by memoryOnlyRuntime() where null);
/// false with gpu.setupError naming the directory where they do not load.
inline bool loadAotRuntime(GpuState &gpu, std::unique_ptr<Runtime> &runtime, const std::string &dir) {
  if (!runtime)
    runtime = memoryOnlyRuntime();
  if (Status s = runtime->loadAotDirectory(dir); !s.ok()) {
    gpu.setupError = dir + ": " + s.message();
    return false;
  }
  return true;
}

/// The line that starts a binary's run: its tag and the base seed (FLASHTILE_TEST_SEED replays it).
inline void announceSeed(const char *tag) {
  std::printf("[%s] base seed %llu (FLASHTILE_TEST_SEED replays it)\n", tag,
              static_cast<unsigned long long>(baseSeed()));
}

/// Finds the driver, the current device and its arch, then (`withReference`) compiles and loads the reference
/// kernels. False when `gpu` says why the cases cannot run (noGpuReason or setupError).
inline bool findGpu(GpuState &gpu, bool withReference) {
  auto noGpu = [&gpu](std::string_view reason) {
    // The driver's own message may already start with "no NVIDIA driver: ".
    constexpr std::string_view kDriverPrefix = "no NVIDIA driver: ";
    if (reason.starts_with(kDriverPrefix))
      reason.remove_prefix(kDriverPrefix.size());
    gpu.noGpuReason = "no NVIDIA GPU/driver: " + std::string(reason);
    return false;
  };
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return noGpu(driver.status().message());
  gpu.driver = *driver;
  if (StatusOr<CUdevice> device = gpu.driver->currentDevice(); !device.ok())
    return noGpu(device.status().message());
  StatusOr<std::string> arch = gpu.driver->detectArch();
  if (!arch.ok()) {
    gpu.noGpuReason = "this GPU cannot run flashtile kernels: " + arch.status().message();
    return false;
  }
  gpu.arch = *arch;
  if (!withReference)
    return true;
  StatusOr<reference::GpuReference> reference = reference::GpuReference::create();
  if (!reference.ok()) {
    gpu.setupError = "setting up the reference kernels failed: " + reference.status().message();
    return false;
  }
  gpu.reference.emplace(std::move(*reference));
  return true;
}

/// Ends the process when a case runs longer than FLASHTILE_TEST_CASE_TIMEOUT seconds (else `defaultSeconds`; 0:
/// never): a kernel that hangs would otherwise block in cuCtxSynchronize until the GPU machine's time limit, with
/// nothing said. `tag` starts the line it prints ("flashtile-gpu").
class Watchdog {
public:
  Watchdog(std::string tag, std::string what, double defaultSeconds) : tag(std::move(tag)), what(std::move(what)) {
    const std::string text = envOr("FLASHTILE_TEST_CASE_TIMEOUT", "");
    const double seconds = text.empty() ? defaultSeconds : std::atof(text.c_str());
    if (seconds <= 0)
      return;
    thread = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex);
      if (!wake.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done; })) {
        std::fprintf(stderr, "\n[%s] TIMEOUT: %s still running after %.0f s (a hung kernel?); exiting\n",
                     this->tag.c_str(), this->what.c_str(), seconds);
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    if (!thread.joinable())
      return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    wake.notify_all();
    thread.join();
  }
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

private:
  std::string tag, what;
  std::mutex mutex;
  std::condition_variable wake;
  bool done = false;
  std::thread thread;
};

} // namespace flashtile::gpu_test

/// Skips the case (or fails it, with FLASHTILE_REQUIRE_GPU=1) without a GPU; fails it if the harness could not be set
/// up. Reads the binary's gpu().
#define REQUIRE_GPU()                                                                                                  \
  do {                                                                                                                 \
    const ::flashtile::gpu_test::GpuState &gpuState = gpu();                                                           \
    if (!gpuState.noGpuReason.empty()) {                                                                               \
      if (::flashtile::gpu_test::envFlag("FLASHTILE_REQUIRE_GPU"))                                                     \
        FAIL() << "FLASHTILE_REQUIRE_GPU is set but: " << gpuState.noGpuReason;                                        \
      GTEST_SKIP() << gpuState.noGpuReason;                                                                            \
    }                                                                                                                  \
    ASSERT_TRUE(gpuState.setupError.empty()) << gpuState.setupError;                                                   \
  } while (0)

/// Fails the case with the expression and its message unless the Status it gives is ok.
#define ASSERT_OK(expr)                                                                                                \
  do {                                                                                                                 \
    const ::flashtile::Status assertOkStatus = (expr);                                                                 \
    ASSERT_TRUE(assertOkStatus.ok()) << #expr << ": " << assertOkStatus.message();                                     \
  } while (0)

#endif // FLASHTILE_TESTS_GPU_GPUTESTSUPPORT_H
