// Printers.h — how gtest prints the compiler's parameter types in test names and messages (a dtype as "bf16",
// not as the bytes of an enum).
#ifndef FLASHTILE_TESTS_UNIT_COMPILER_PRINTERS_H
#define FLASHTILE_TESTS_UNIT_COMPILER_PRINTERS_H

#include "flashtile/dsl/Program.h"

#include <ostream>

namespace flashtile {

inline void PrintTo(ElementType type, std::ostream *out) { *out << (type == ElementType::BF16 ? "bf16" : "f16"); }

} // namespace flashtile

#endif // FLASHTILE_TESTS_UNIT_COMPILER_PRINTERS_H
