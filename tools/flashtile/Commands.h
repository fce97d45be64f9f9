//===- Commands.h - the flashtile CLI's subcommands -----------------------===//
#ifndef FLASHTILE_TOOLS_COMMANDS_H
#define FLASHTILE_TOOLS_COMMANDS_H

#include "Cli.h"

#include <string>
#include <vector>

namespace flashtile {
class Runtime;
}

namespace flashtile::cli {

/// compile, emit, aot, summary: the compiler's commands (CompileCommands.cpp, AotCommand.cpp; in a runtime-only
/// build NoCompiler.cpp registers them as errors that say why).
void registerCompilerCommands(CLI::App &app, Registry &registry);
/// run, info, nvrtc, cache: the commands every build has.
void registerRuntimeCommands(CLI::App &app, Registry &registry);
void registerCacheCommand(CLI::App &app, Registry &registry);

/// Whether this build includes the compiler (MLIR); runtime-only builds run kernels from an AOT directory.
bool hasCompiler();
/// Installs the JIT as the runtime's compiler; false in a runtime-only build.
bool installCompiler(Runtime &runtime);
/// The schedules this build knows (the schedule registry's names), which every command's --schedule accepts;
/// empty in a runtime-only build (its kernels come from an ahead-of-time directory).
std::vector<std::string> knownScheduleNames();
/// "flashtile 0.1.0+<git> (...)": what --version prints.
std::string versionText();

} // namespace flashtile::cli

#endif // FLASHTILE_TOOLS_COMMANDS_H
