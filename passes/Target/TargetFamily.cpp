//===- TargetFamily.cpp - instruction families by name --------------------===//
#include "passes/Target/TargetFamily.h"
#include "flashtile/runtime/ArchNames.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <mutex>

namespace flashtile::target {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<TargetFamily>, std::less<>> families;
};

Registry &registry() {
  static Registry instance;
  return instance;
}

/// Levenshtein distance, for "did you mean".
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

} // namespace

void registerTarget(std::unique_ptr<TargetFamily> family) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::string name(family->name());
  [[maybe_unused]] bool added = r.families.emplace(name, std::move(family)).second;
  assert(added && "two target families registered under one name");
}

void unregisterTarget(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto it = r.families.find(name); it != r.families.end())
    r.families.erase(it);
}

const TargetFamily *lookupTarget(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.families.find(name);
  return it == r.families.end() ? nullptr : it->second.get();
}

std::vector<std::string> targetNames() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, family] : r.families)
    names.push_back(name);
  return names;
}

std::optional<std::string> canonicalArch(std::string_view arch) {
  for (const ArchAlias &alias : kArchAliases)
    if (alias.name == arch)
      return std::string(alias.canonical);
  return std::nullopt;
}

std::string unknownArchMessage(std::string_view arch) {
  std::string accepted, guess;
  size_t best = std::max<size_t>(2, arch.size() / 3) + 1;
  for (const ArchAlias &alias : kArchAliases) {
    accepted += (accepted.empty() ? "" : ", ") + std::string(alias.name);
    if (size_t d = editDistance(arch, alias.name); d < best) {
      best = d;
      guess = alias.name;
    }
  }
  std::string message = "unknown arch '" + std::string(arch) + "'";
  if (!guess.empty())
    message += " (did you mean '" + guess + "'?)";
  return message + "; accepted: " + accepted;
}

const ArchLimits *archLimits(const TargetFamily &family, std::string_view arch) {
  for (const ArchLimits &limits : family.archs())
    if (limits.arch == arch)
      return &limits;
  return nullptr;
}

std::optional<int64_t> maxSmemBytes(const TargetFamily &family, std::string_view arch) {
  if (const ArchLimits *limits = archLimits(family, arch))
    return limits->maxSmemBytes;
  return std::nullopt;
}

} // namespace flashtile::target
