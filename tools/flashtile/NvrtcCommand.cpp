//===- NvrtcCommand.cpp - `flashtile nvrtc`: time NVRTC on generated CUDA --===//
//
// Needs no compiler and no GPU: it measures the NVRTC half of a JIT compile on any machine, e.g. on a GPU machine
// without MLIR, on the `<kernel>.cu` files `flashtile aot` writes next to each cubin.
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "flashtile/runtime/FileIo.h"
#include "flashtile/runtime/Nvrtc.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace flashtile::cli {

namespace {

/// Generated kernels are tens of kilobytes; a source this large is not one.
constexpr uint64_t kMaxSourceBytes = 64ull << 20;

struct NvrtcFlags {
  std::vector<std::string> files;
  std::string arch = "sm_90a";
};

int runNvrtc(const NvrtcFlags &flags) {
  int failures = 0;
  for (const std::string &file : flags.files) {
    // A source is a file: directories, FIFOs and devices are refused rather than compiled as empty or waited on.
    StatusOr<std::string> source = readInputFile(file, kMaxSourceBytes, /*allowSpecial=*/false);
    if (!source.ok()) {
      fail(source.status().withContext("nvrtc"));
      ++failures;
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    StatusOr<std::string> cubin = compileCuda(*source, file, flags.arch, NvrtcOutput::Cubin);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!cubin.ok()) {
      fail(cubin.status());
      ++failures;
      continue;
    }
    fmt::print("nvrtc {:<8} {:8.1f} ms  {:7} B cubin  {}\n", flags.arch, ms, cubin->size(), file);
    std::fflush(stdout);
  }
  return failures ? kExitFailure : 0;
}

} // namespace

void registerNvrtcCommand(CLI::App &app, Registry &registry) {
  auto flags = std::make_shared<NvrtcFlags>();
  CLI::App *command = addCommand(app, "nvrtc",
                                 "NVRTC-compile generated CUDA files (e.g. the .cu files aot writes) and time each; "
                                 "no compiler or GPU needed");
  command->add_option("files", flags->files, "CUDA source files")->required()->check(nonEmpty());
  command->add_option("--arch", flags->arch, "GPU target")->check(archName())->capture_default_str();
  registry.add(command, [flags] { return runNvrtc(*flags); });
}

} // namespace flashtile::cli
