//===- NoCompiler.cpp - the CLI's compiler commands in a runtime-only build ===//
#include "Commands.h"

#include <fmt/format.h>

namespace flashtile::cli {

namespace {
int unavailable(const std::string &command) {
  return fail(fmt::format("'{}' needs the compiler, and this flashtile was built runtime-only "
                          "(FLASHTILE_RUNTIME_ONLY=ON, no MLIR). Build the full tool, or run kernels from an "
                          "ahead-of-time directory: flashtile run --aot-dir DIR ...",
                          command));
}
} // namespace

bool hasCompiler() { return false; }
bool installCompiler(Runtime &) { return false; }
std::vector<std::string> knownScheduleNames() { return {}; }

void registerCompilerCommands(CLI::App &app, Registry &registry) {
  for (const char *name : {"compile", "emit", "aot", "summary"}) {
    CLI::App *command = addCommand(app, name, "Not in this build: needs the compiler (FLASHTILE_RUNTIME_ONLY=ON)");
    // Whatever flags follow, the answer is the same.
    registry.add(
        command, [name] { return unavailable(name); }, /*anyArguments=*/true);
  }
}

} // namespace flashtile::cli
