//===- NoCompiler.cpp - the CLI's compiler commands in a runtime-only build ===//
#include "Commands.h"

#include <cstdio>

namespace flashtile::cli {

namespace {
int unavailable(const char *command) {
  std::fprintf(stderr,
               "flashtile: error: '%s' needs the compiler, and this flashtile was built runtime-only "
               "(FLASHTILE_RUNTIME_ONLY=ON, no MLIR). Build the full tool, or run kernels from an "
               "ahead-of-time directory: flashtile run --aot-dir DIR ...\n",
               command);
  return 1;
}
} // namespace

bool hasCompiler() { return false; }
bool installCompiler(Runtime &) { return false; }
int compileCommand(const std::vector<std::string> &, bool) { return unavailable("compile"); }
int aotCommand(const std::vector<std::string> &) { return unavailable("aot"); }
int summaryCommand(const std::vector<std::string> &) { return unavailable("summary"); }

} // namespace flashtile::cli
