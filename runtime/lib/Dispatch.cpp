// Dispatch.cpp — ordering the schedules' dispatch rules for a call.
#include "flashtile/runtime/Dispatch.h"

#include <algorithm>
#include <map>
#include <set>

using namespace flashtile;

namespace {
constexpr std::string_view kAllName = "all", kDecodeName = "decode-sized";
} // namespace

std::string_view flashtile::defaultCallsName(DefaultCalls calls) {
  switch (calls) {
  case DefaultCalls::None:
    return "";
  case DefaultCalls::All:
    return kAllName;
  case DefaultCalls::Decode:
    return kDecodeName;
  }
  return "";
}

std::optional<DefaultCalls> flashtile::parseDefaultCalls(std::string_view name) {
  if (name.empty())
    return DefaultCalls::None;
  if (name == kAllName)
    return DefaultCalls::All;
  if (name == kDecodeName)
    return DefaultCalls::Decode;
  return std::nullopt;
}

std::vector<std::string> flashtile::defaultSchedules(const std::vector<DispatchRule> &rules, std::string_view arch,
                                                     bool decodeSized) {
  // The rules for `arch`, one per schedule; the candidates with their tier (0: made for decode-sized calls).
  std::map<std::string, const DispatchRule *, std::less<>> byName;
  for (const DispatchRule &rule : rules)
    if (rule.arch == arch)
      byName.emplace(rule.schedule, &rule);
  std::map<std::string, int> tierOf;
  for (const auto &[name, rule] : byName) {
    if (rule->calls == DefaultCalls::All)
      tierOf.emplace(name, 1);
    else if (rule->calls == DefaultCalls::Decode && decodeSized)
      tierOf.emplace(name, 0);
  }
  // Whether `a` is preferred over `b`, directly or through other schedules' rules.
  auto preferred = [&](const std::string &a, const std::string &b) {
    std::set<std::string> seen{a};
    std::vector<std::string> todo{a};
    while (!todo.empty()) {
      auto it = byName.find(todo.back());
      todo.pop_back();
      if (it == byName.end())
        continue;
      for (const std::string &over : it->second->preferredOver) {
        if (over == b)
          return true;
        if (seen.insert(over).second)
          todo.push_back(over);
      }
    }
    return false;
  };
  std::vector<std::string> order;
  while (!tierOf.empty()) {
    int tier = std::min_element(tierOf.begin(), tierOf.end(), [](const auto &x, const auto &y) {
                 return x.second < y.second;
               })->second;
    // The first (by name) of the tier that no other candidate of the tier is preferred over; with a cycle of
    // preferences, the first by name.
    std::string next;
    for (const auto &[name, t] : tierOf) {
      if (t != tier)
        continue;
      if (next.empty())
        next = name;
      bool beaten = std::any_of(tierOf.begin(), tierOf.end(), [&](const auto &other) {
        return other.second == tier && other.first != name && preferred(other.first, name) &&
               !preferred(name, other.first);
      });
      if (!beaten) {
        next = name;
        break;
      }
    }
    order.push_back(next);
    tierOf.erase(next);
  }
  return order;
}
