//===- Fa4Register.h - registers FA4 with the schedule registry -----------===//
#ifndef FLASHTILE_SCHEDULES_FA4_FA4REGISTER_H
#define FLASHTILE_SCHEDULES_FA4_FA4REGISTER_H

namespace flashtile::fa4 {
/// Adds the FA4 schedule to the schedule registry.
void registerSchedule();
} // namespace flashtile::fa4

#endif // FLASHTILE_SCHEDULES_FA4_FA4REGISTER_H
