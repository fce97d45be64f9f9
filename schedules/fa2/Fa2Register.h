//===- Fa2Register.h - registers FA2 with the schedule registry -----------===//
#ifndef FLASHTILE_SCHEDULES_FA2_FA2REGISTER_H
#define FLASHTILE_SCHEDULES_FA2_FA2REGISTER_H

namespace flashtile::fa2 {
/// Adds the FA2 schedule to the schedule registry (schedules/Registry.cpp calls it once).
void registerSchedule();
} // namespace flashtile::fa2

#endif // FLASHTILE_SCHEDULES_FA2_FA2REGISTER_H
