//===- Registry.cpp - the built-in schedules ------------------------------===//
//
// One line per schedule: adding a schedule is a folder schedules/<name>/ plus its line here.
//===----------------------------------------------------------------------===//
#include "schedules/Registry.h"
#include "schedules/decode/DecodeRegister.h"
#include "schedules/fa1/Fa1Register.h"
#include "schedules/fa2/Fa2Register.h"
#include "schedules/fa3/Fa3Register.h"
#include "schedules/fa4/Fa4Register.h"

#include <mutex>

namespace flashtile::schedule {

void registerBuiltinSchedules() {
  static std::once_flag once;
  std::call_once(once, [] {
    fa1::registerSchedule();
    fa2::registerSchedule();
    fa3::registerSchedule();
    fa4::registerSchedule();
    decode::registerSchedule();
  });
}

} // namespace flashtile::schedule
