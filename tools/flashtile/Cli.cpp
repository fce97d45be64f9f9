//===- Cli.cpp - strict flag values and short errors ----------------------===//
#include "Cli.h"

#include "flashtile/runtime/KernelInfo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

namespace flashtile::cli {

int fail(const Status &status) { return fail(status.message()); }

int fail(std::string_view message) {
  // Compiler diagnostics end with their own newline.
  while (!message.empty() && std::isspace(static_cast<unsigned char>(message.back())))
    message.remove_suffix(1);
  fmt::print(stderr, "flashtile: error: {}\n", message);
  std::fflush(stderr);
  return kExitFailure;
}

int failUsage(const Status &status) {
  fail(status);
  return kExitUsage;
}

namespace {

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours cost 1.
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

} // namespace

std::string nearestName(std::string_view typo, const std::vector<std::string> &names) {
  std::string best;
  size_t bestDistance = SIZE_MAX;
  const std::string typed = lower(typo);
  for (const std::string &name : names) {
    size_t distance = editDistance(typed, lower(name));
    if (distance < bestDistance) {
      bestDistance = distance;
      best = name;
    }
  }
  // Close enough to be a slip: a third of the longer name, at least 2 edits, and fewer edits than letters typed.
  size_t longest = std::max(typo.size(), best.size());
  size_t allowed = std::max<size_t>(2, longest / 3);
  return bestDistance <= allowed && bestDistance < std::max<size_t>(typo.size(), 1) ? best : "";
}

std::string joinNames(const std::vector<std::string> &names) { return fmt::format("{}", fmt::join(names, ", ")); }

std::string unknownName(std::string_view what, std::string_view value, const std::vector<std::string> &names) {
  std::string suggestion = nearestName(value, names);
  return fmt::format("unknown {} '{}'{}; accepted: {}", what, excerpt(value),
                     suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion), joinNames(names));
}

StatusOr<std::vector<std::string>> splitList(std::string_view flag, std::string_view text) {
  std::vector<std::string> items;
  std::set<std::string> seen;
  const std::string prefix = flag.empty() ? "" : std::string(flag) + ": ";
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string item(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (item.empty())
      return Status::error(fmt::format("{}empty item in '{}' (a comma list such as a,b,c)", prefix, excerpt(text)));
    if (!seen.insert(item).second)
      return Status::error(fmt::format("{}'{}' is listed twice", prefix, excerpt(item)));
    items.push_back(std::move(item));
    if (comma == std::string_view::npos)
      return items;
    start = comma + 1;
  }
}

StatusOr<std::vector<float>> parseNumberList(std::string_view flag, std::string_view text) {
  std::vector<float> numbers;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (item.empty())
      return Status::error(
          fmt::format("{}: empty item in '{}' (numbers separated by commas, such as 128,128)", flag, excerpt(text)));
    float value = 0;
    // from_chars reads decimal notation only: no leading spaces, '+', hex or trailing text.
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc() || end != item.data() + item.size() || !std::isfinite(value))
      return Status::error(fmt::format("{}: '{}' is not {}; accepted: finite decimal numbers such as -1, 128 or 0.5, "
                                       "separated by commas",
                                       flag, excerpt(item),
                                       ec == std::errc::result_out_of_range ? "a float" : "a number"));
    numbers.push_back(value);
    if (comma == std::string_view::npos)
      return numbers;
    start = comma + 1;
  }
}

StatusOr<int64_t> parseInteger(std::string_view text, int64_t lo, int64_t hi, std::string_view meaning) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  bool wellFormed = !text.empty() && ec == std::errc() && end == text.data() + text.size();
  if (!wellFormed || value < lo || value > hi)
    return Status::error(
        fmt::format("{} '{}'; accepted: an integer from {} to {}{}",
                    wellFormed || ec == std::errc::result_out_of_range ? "out of range" : "not an integer",
                    excerpt(text), lo, hi, meaning.empty() ? "" : fmt::format(" ({})", meaning)));
  return value;
}

CLI::Validator oneOf(std::string what, std::vector<std::string> names) {
  // Long lists go in the error message and the flag's description, not the usage column.
  constexpr size_t kMaxListed = 40;
  std::string description = fmt::format("{{{}}}", fmt::join(names, ","));
  if (description.size() > kMaxListed)
    description = "NAME";
  return CLI::Validator(
      [what, names](std::string &value) -> std::string {
        if (std::find(names.begin(), names.end(), value) != names.end())
          return "";
        return unknownName(what, value, names);
      },
      description);
}

CLI::Validator listOf(std::string what, std::vector<std::string> names) {
  return CLI::Validator(
      [what, names](std::string &value) -> std::string {
        StatusOr<std::vector<std::string>> items = splitList("", value);
        if (!items.ok())
          return items.status().message();
        for (const std::string &item : *items)
          if (std::find(names.begin(), names.end(), item) == names.end())
            return unknownName(what, item, names);
        return "";
      },
      "LIST");
}

CLI::Validator intRange(int64_t lo, int64_t hi, std::string meaning) {
  return CLI::Validator(
      [lo, hi, meaning](std::string &value) -> std::string {
        StatusOr<int64_t> parsed = parseInteger(value, lo, hi, meaning);
        return parsed.ok() ? "" : parsed.status().message();
      },
      fmt::format("{}..{}", lo, hi));
}

CLI::Validator nonEmpty() {
  return CLI::Validator([](std::string &value) -> std::string { return value.empty() ? "the value is empty" : ""; },
                        "");
}

namespace {

std::vector<std::string> knownArchs() { return {kSupportedArchs.begin(), kSupportedArchs.end()}; }

std::string checkArch(const std::string &value) {
  if (value.empty())
    return "the value is empty; accepted: " + joinNames(knownArchs());
  std::string_view digits = value;
  bool form = digits.starts_with("sm_");
  if (form) {
    digits.remove_prefix(3);
    if (digits.ends_with('a') || digits.ends_with('f'))
      digits.remove_suffix(1);
    form = !digits.empty() && digits.size() <= 4 &&
           std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  if (form)
    return "";
  return unknownName("arch", value, knownArchs()) + " (a target sm_<NN>[a|f])";
}

} // namespace

CLI::Validator archName() {
  return CLI::Validator([](std::string &value) { return checkArch(value); }, "ARCH");
}

CLI::Validator archList() {
  return CLI::Validator(
      [](std::string &value) -> std::string {
        StatusOr<std::vector<std::string>> items = splitList("", value);
        if (!items.ok())
          return items.status().message();
        for (const std::string &item : *items)
          if (std::string error = checkArch(item); !error.empty())
            return error;
        return "";
      },
      "LIST");
}

CLI::Option *addSwitch(CLI::App &command, const std::string &name, bool &value, const std::string &description) {
  return command.add_flag(name, value, description)->multi_option_policy(CLI::MultiOptionPolicy::Throw);
}

CLI::App *addCommand(CLI::App &app, const std::string &name, const std::string &description) {
  CLI::App *command = app.add_subcommand(name, description);
  // Unknown arguments are collected and reported by main() with the nearest flag suggested.
  command->allow_extras();
  return command;
}

} // namespace flashtile::cli
