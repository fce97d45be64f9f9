//===- Args.h - command-line flags for the flashtile CLI ------------------===//
#ifndef FLASHTILE_TOOLS_ARGS_H
#define FLASHTILE_TOOLS_ARGS_H

#include "flashtile/runtime/Status.h"

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace flashtile::cli {

/// `--name value`, `--name=value` and bare `--switch` flags; every flag a command reads is declared, so a
/// misspelt one is an error that lists what the command accepts.
class Args {
public:
  /// `switches` take no value.
  static StatusOr<Args> parse(const std::vector<std::string> &argv, const std::set<std::string> &accepted,
                              const std::set<std::string> &switches) {
    Args args;
    for (size_t i = 0; i < argv.size(); ++i) {
      std::string a = argv[i];
      if (a == "-o")
        a = "--output";
      if (a.rfind("--", 0) != 0)
        return Status::error("unexpected argument '" + a + "'");
      std::string name = a.substr(2), value;
      size_t eq = name.find('=');
      bool hasValue = eq != std::string::npos;
      if (hasValue) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (!accepted.count(name) && !switches.count(name)) {
        std::string list;
        for (const auto &n : accepted)
          list += " --" + n;
        for (const auto &n : switches)
          list += " --" + n;
        return Status::error("unknown flag --" + name + "; this command accepts:" + list);
      }
      if (switches.count(name)) {
        args.values[name] = "1";
        continue;
      }
      if (!hasValue) {
        if (i + 1 >= argv.size())
          return Status::error("--" + name + " needs a value");
        value = argv[++i];
      }
      args.values[name] = value;
    }
    return args;
  }

  bool has(const std::string &name) const { return values.count(name) != 0; }
  std::string get(const std::string &name, const std::string &fallback = "") const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
  StatusOr<int> getInt(const std::string &name, int fallback) const {
    if (!has(name))
      return fallback;
    std::string text = get(name);
    try {
      size_t used = 0;
      int v = std::stoi(text, &used);
      if (used == text.size())
        return v;
    } catch (...) {
    }
    return Status::error("--" + name + " expects an integer, got '" + text + "'");
  }
  /// A comma-separated list.
  std::vector<std::string> getList(const std::string &name, const std::string &fallback) const {
    std::vector<std::string> out;
    std::stringstream ss(get(name, fallback));
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty())
        out.push_back(item);
    return out;
  }

private:
  std::map<std::string, std::string> values;
};

} // namespace flashtile::cli

#endif // FLASHTILE_TOOLS_ARGS_H
