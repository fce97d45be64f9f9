// PlanSupport.h — reading a compiled module's launch plan in tests.
#ifndef FLASHTILE_TESTS_UNIT_COMPILER_PLANSUPPORT_H
#define FLASHTILE_TESTS_UNIT_COMPILER_PLANSUPPORT_H

#include "flashtile/runtime/KernelInfo.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace flashtile::plans {

/// The launch of a module's own entry (its attention kernel) in its plan.
inline const PlanLaunch &mainLaunch(const KernelInfo &info) {
  const PlanLaunch *launch = info.plan.launchOf(info.entry);
  EXPECT_NE(launch, nullptr) << info.entry << " is not launched by its plan";
  static const PlanLaunch none;
  return launch ? *launch : none;
}
/// The entries a module's plan launches, in order.
inline std::vector<std::string> launchedEntries(const KernelInfo &info) {
  std::vector<std::string> entries;
  for (const PlanLaunch &launch : info.plan.launches)
    entries.push_back(launch.entry);
  return entries;
}
/// Whether the plan sets the parameter field `field` per call (persistent modules set qTiles).
inline bool setsField(const KernelInfo &info, std::string_view field) {
  for (const auto &[name, rule] : info.plan.set)
    if (name == field)
      return true;
  return false;
}
/// Whether a workspace of the plan binds the pointer field `field` (dynamic schedulers' tileCounter).
inline bool bindsField(const KernelInfo &info, std::string_view field) {
  for (const PlanWorkspace &workspace : info.plan.workspaces)
    for (const auto &[name, offset] : workspace.bind)
      if (name == field)
        return true;
  return false;
}

} // namespace flashtile::plans

#endif // FLASHTILE_TESTS_UNIT_COMPILER_PLANSUPPORT_H
