//===- Commands.h - the flashtile CLI's subcommands -----------------------===//
#ifndef FLASHTILE_TOOLS_COMMANDS_H
#define FLASHTILE_TOOLS_COMMANDS_H

#include <string>
#include <vector>

namespace flashtile {
class Runtime;
}

namespace flashtile::cli {

/// Each returns the process exit code and prints its own errors.
int compileCommand(const std::vector<std::string> &args, bool emitDefaultsToCuda); // compile | emit
int aotCommand(const std::vector<std::string> &args);
int runCommand(const std::vector<std::string> &args);
int summaryCommand(const std::vector<std::string> &args);
int infoCommand();
/// NVRTC-compiles .cu files and prints the time of each (no compiler, no GPU needed).
int nvrtcCommand(const std::vector<std::string> &args);
/// Whether this build includes the compiler (MLIR); runtime-only builds run kernels from an AOT directory.
bool hasCompiler();
/// Installs the JIT as the runtime's compiler; false in a runtime-only build.
bool installCompiler(Runtime &runtime);

} // namespace flashtile::cli

#endif // FLASHTILE_TOOLS_COMMANDS_H
