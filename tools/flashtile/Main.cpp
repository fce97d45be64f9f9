//===- Main.cpp - the flashtile command-line tool -------------------------===//
//
// Every command is a CLI11 subcommand with its own --help; main() turns CLI11's errors into one line naming the
// flag and suggests the nearest command or flag for a typo.
//===----------------------------------------------------------------------===//
#include "Cli.h"
#include "Commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace flashtile::cli;

namespace {

constexpr const char *kDescription =
    "flashtile: a kernel compiler for attention (variant + schedule -> CUDA -> cubin) and its runtime.\n"
    "Commands that need no GPU: compile, emit, aot, summary, nvrtc, info, cache. On a GPU: run.\n"
    "`flashtile COMMAND --help` lists a command's flags.";

/// Every long flag of `command` ("--head-dim", ...), for suggestions.
std::vector<std::string> flagNames(const CLI::App &command) {
  std::vector<std::string> names;
  for (const CLI::Option *option : command.get_options())
    for (const std::string &name : option->get_lnames())
      names.push_back("--" + name);
  return names;
}

/// The full command name, "cache list".
std::string commandPath(const CLI::App *command) {
  std::string path = command->get_name();
  for (const CLI::App *parent = command->get_parent(); parent && parent->get_parent(); parent = parent->get_parent())
    path = parent->get_name() + " " + path;
  return path;
}

/// CLI11's message, in the words the rest of the CLI uses.
std::string describe(const CLI::ParseError &error) {
  std::string text = error.what();
  // "--head-dim: At Most 1 required but received 2": a flag given twice.
  if (size_t at = text.find(": At Most 1 required but received "); at != std::string::npos)
    return fmt::format("{} is given {} times; give it once", text.substr(0, at),
                       text.substr(at + std::string(": At Most 1 required but received ").size()));
  if (size_t at = text.find(": 1 required "); at != std::string::npos && text.ends_with(" missing"))
    return fmt::format("{} needs a value", text.substr(0, at));
  return text;
}

int usageError(const std::string &command, const std::string &message) {
  fmt::print(stderr, "flashtile: error: {}{}\n", message,
             command.empty() ? " (flashtile --help lists the commands)"
                             : fmt::format(" (flashtile {} --help lists its flags)", command));
  return kExitUsage;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app(kDescription, "flashtile");
  app.set_version_flag("--version", versionText(), "Print flashtile's version and exit");
  app.require_subcommand(0, 1);
  Registry registry;
  registerCompilerCommands(app, registry);
  registerRuntimeCommands(app, registry);
  registerCacheCommand(app, registry);

  std::vector<std::string> commandNames;
  for (const CLI::App *command : app.get_subcommands({}))
    commandNames.push_back(command->get_name());
  if (argc >= 2) {
    std::string first = argv[1];
    // `flashtile help [COMMAND]` as a synonym of --help.
    if (first == "help") {
      if (argc == 2) {
        fmt::print("{}", app.help());
        return 0;
      }
      for (CLI::App *command : app.get_subcommands({}))
        if (command->get_name() == argv[2]) {
          fmt::print("{}", command->help("flashtile"));
          return 0;
        }
      return usageError("", unknownName("command", argv[2], commandNames));
    }
    if (!first.starts_with("-") && std::find(commandNames.begin(), commandNames.end(), first) == commandNames.end())
      return usageError("", unknownName("command", first, commandNames));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    std::string command;
    for (const Command &c : registry.all())
      if (c.app->parsed())
        command = commandPath(c.app);
    return usageError(command, describe(e));
  }

  for (const Command &c : registry.all()) {
    if (!c.app->parsed())
      continue;
    std::vector<std::string> extras = c.app->remaining();
    if (!extras.empty() && !c.anyArguments) {
      const std::string &extra = extras.front();
      if (extra.starts_with("-")) {
        std::string flag = extra.substr(0, extra.find('='));
        return usageError(commandPath(c.app), unknownName("flag", flag, flagNames(*c.app)));
      }
      return usageError(commandPath(c.app), fmt::format("unexpected argument '{}'", flashtile::excerpt(extra)));
    }
    return c.run();
  }
  // A command with subcommands (cache) given alone, or no command at all.
  for (CLI::App *command : app.get_subcommands({}))
    if (command->parsed()) {
      std::vector<std::string> extras = command->remaining(), names;
      for (const CLI::App *sub : command->get_subcommands({}))
        names.push_back(sub->get_name());
      if (!extras.empty())
        return usageError(command->get_name(), unknownName(command->get_name() + " command", extras.front(), names));
      fmt::print(stderr, "{}", command->help("flashtile"));
      return kExitUsage;
    }
  fmt::print(stderr, "{}", app.help());
  return kExitUsage;
}
