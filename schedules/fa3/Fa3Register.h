//===- Fa3Register.h - registers FA3 with the schedule registry -----------===//
#ifndef FLASHTILE_SCHEDULES_FA3_FA3REGISTER_H
#define FLASHTILE_SCHEDULES_FA3_FA3REGISTER_H

namespace flashtile::fa3 {
/// Adds the FA3 schedule to the schedule registry (its roles are the generic tile-role-pipeline's).
void registerSchedule();
} // namespace flashtile::fa3

#endif // FLASHTILE_SCHEDULES_FA3_FA3REGISTER_H
