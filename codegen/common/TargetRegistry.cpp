//===- TargetRegistry.cpp - instruction families with their printers ------===//
#include "codegen/common/TargetRegistry.h"

#include <map>
#include <mutex>
#include <string>

namespace flashtile::codegen {
namespace {

/// The families registered here, by name; the target registry owns them.
struct Printers {
  std::mutex mutex;
  std::map<std::string, const TargetFamily *, std::less<>> families;
};

Printers &printers() {
  static Printers instance;
  return instance;
}

} // namespace

void registerTarget(std::unique_ptr<TargetFamily> family) {
  Printers &p = printers();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.families.emplace(std::string(family->name()), family.get());
  target::registerTarget(std::move(family));
}

void unregisterTarget(std::string_view name) {
  {
    Printers &p = printers();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (auto it = p.families.find(name); it != p.families.end())
      p.families.erase(it);
  }
  target::unregisterTarget(name);
}

const TargetFamily *lookupTarget(std::string_view name) {
  Printers &p = printers();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto it = p.families.find(name);
  return it == p.families.end() ? nullptr : it->second;
}

} // namespace flashtile::codegen
