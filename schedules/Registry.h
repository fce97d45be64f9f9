//===- Registry.h - the built-in schedules --------------------------------===//
#ifndef FLASHTILE_SCHEDULES_REGISTRY_H
#define FLASHTILE_SCHEDULES_REGISTRY_H

namespace flashtile::schedule {
/// Registers every schedule under schedules/ with the schedule registry (once; later calls do nothing).
void registerBuiltinSchedules();
} // namespace flashtile::schedule

#endif // FLASHTILE_SCHEDULES_REGISTRY_H
