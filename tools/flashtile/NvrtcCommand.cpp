//===- NvrtcCommand.cpp - `flashtile nvrtc`: time NVRTC on generated CUDA --===//
//
// Needs no compiler and no GPU: it measures the NVRTC half of a JIT compile on any machine, e.g. on a GPU machine
// without MLIR, on the `<kernel>.cu` files `flashtile aot` writes next to each cubin.
//===----------------------------------------------------------------------===//
#include "Args.h"
#include "Commands.h"

#include "flashtile/runtime/Nvrtc.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace flashtile::cli {

int nvrtcCommand(const std::vector<std::string> &argv) {
  std::vector<std::string> files, flags;
  for (const std::string &a : argv)
    (a.rfind("--", 0) == 0 || !flags.empty() && flags.back() == "--arch" ? flags : files).push_back(a);
  auto args = Args::parse(flags, {"arch"}, {});
  if (!args.ok()) {
    std::fprintf(stderr, "flashtile: error: %s\n", args.status().message().c_str());
    return 1;
  }
  if (files.empty()) {
    std::fprintf(stderr, "flashtile: error: nvrtc: give one or more .cu files\n");
    return 1;
  }
  std::string arch = args->get("arch", "sm_90a");
  int failures = 0;
  for (const std::string &file : files) {
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "flashtile: error: nvrtc: cannot read %s\n", file.c_str());
      ++failures;
      continue;
    }
    std::stringstream source;
    source << in.rdbuf();
    auto start = std::chrono::steady_clock::now();
    auto cubin = compileCuda(source.str(), file, arch, NvrtcOutput::Cubin);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!cubin.ok()) {
      std::fprintf(stderr, "flashtile: error: %s\n", cubin.status().message().c_str());
      ++failures;
      continue;
    }
    std::printf("nvrtc %-8s %8.1f ms  %7zu B cubin  %s\n", arch.c_str(), ms, cubin->size(), file.c_str());
  }
  return failures ? 1 : 0;
}

} // namespace flashtile::cli
