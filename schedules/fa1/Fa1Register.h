//===- Fa1Register.h - registers the FA1 teaching schedule ----------------===//
#ifndef FLASHTILE_SCHEDULES_FA1_FA1REGISTER_H
#define FLASHTILE_SCHEDULES_FA1_FA1REGISTER_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace flashtile::fa1 {
/// Adds the fa1 schedule to the schedule registry and tile-fa1-kv-steps to MLIR's pass registry
/// (schedules/Registry.cpp calls it once).
void registerSchedule();
/// tile-fa1-kv-steps (Fa1KvStepsPass.cpp): one K/V tile a launch, the state through global memory.
std::unique_ptr<mlir::Pass> createKvStepsPass();
} // namespace flashtile::fa1

#endif // FLASHTILE_SCHEDULES_FA1_FA1REGISTER_H
