//===- Cli.h - strict flag values and short errors for the flashtile CLI --===//
//
// Parsing is CLI11's (header-only, so the runtime-only build has it too): per-command --help, unknown flags and
// repeated flags are errors. What CLI11 leaves to us is here: values checked strictly (integers in a range, names
// from a list with the nearest one suggested, comma lists without empty or repeated items) and every error printed
// as one line naming the flag and what it accepts.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_TOOLS_CLI_H
#define FLASHTILE_TOOLS_CLI_H

#include "flashtile/runtime/Excerpt.h"
#include "flashtile/runtime/Status.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::cli {

/// Exit codes: a command that ran and failed, and a command line that was not understood.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

/// Prints "flashtile: error: <message>" on stderr; returns kExitFailure.
int fail(const Status &status);
int fail(std::string_view message);
/// The same line for a command line that is not understood; returns kExitUsage.
int failUsage(const Status &status);

/// The name in `names` nearest to `typo` (edit distance, a swap of two neighbours counting once), or "" when
/// none is close enough to be what was meant.
std::string nearestName(std::string_view typo, const std::vector<std::string> &names);
/// "a, b, c".
std::string joinNames(const std::vector<std::string> &names);
/// "unknown X 'v' (did you mean 'w'?); accepted: a, b, c".
std::string unknownName(std::string_view what, std::string_view value, const std::vector<std::string> &names);

/// Comma-separated items; empty items and repeats are errors (prefixed with `flag`, when given).
StatusOr<std::vector<std::string>> splitList(std::string_view flag, std::string_view text);

/// Comma-separated numbers, a sequence in order (repeats are ordinary: a window of 128,128): each a finite decimal
/// number that fits a float (-1, 128, 0.5, 1e-3), with no spaces, hex or trailing text. The error names `flag`.
StatusOr<std::vector<float>> parseNumberList(std::string_view flag, std::string_view text);

/// A decimal integer with no sign tricks or trailing text, in [lo, hi]; the error names the range and `meaning`.
StatusOr<int64_t> parseInteger(std::string_view text, int64_t lo, int64_t hi, std::string_view meaning = {});

// Validators for CLI11 options. CLI11 prefixes their messages with the flag ("--head-dim: ...").
/// One of `names` (the nearest is suggested).
CLI::Validator oneOf(std::string what, std::vector<std::string> names);
/// A comma list whose items are each one of `names`.
CLI::Validator listOf(std::string what, std::vector<std::string> names);
/// An integer in [lo, hi]; `meaning` (optional) says what the values do.
CLI::Validator intRange(int64_t lo, int64_t hi, std::string meaning = {});
/// A non-empty value.
CLI::Validator nonEmpty();
/// sm_<NN>[a|f]: the compiler decides which targets it has; this only catches what cannot be one (and suggests
/// the nearest known name).
CLI::Validator archName();
/// A comma list of archName() values.
CLI::Validator archList();

/// A switch (no value); given twice is an error, as for every other flag.
CLI::Option *addSwitch(CLI::App &command, const std::string &name, bool &value, const std::string &description);

/// Options every command declares the same way: strict single values, no repeats.
CLI::App *addCommand(CLI::App &app, const std::string &name, const std::string &description);

/// What main() runs once the command line is parsed and checked; set by each command's registration.
using Runner = std::function<int()>;
struct Command {
  CLI::App *app = nullptr;
  Runner run;
  bool anyArguments = false; // arguments are not checked (a command that only explains why it cannot run)
};
/// Every command's flags and runner.
class Registry {
public:
  void add(CLI::App *app, Runner run, bool anyArguments = false) {
    commands.push_back({app, std::move(run), anyArguments});
  }
  const std::vector<Command> &all() const { return commands; }

private:
  std::vector<Command> commands;
};

} // namespace flashtile::cli

#endif // FLASHTILE_TOOLS_CLI_H
