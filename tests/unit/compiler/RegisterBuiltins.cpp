// RegisterBuiltins.cpp — the compiler tests see the built-in schedules and targets, as the tools do.
#include "jit/Jit.h"

namespace {
const bool kRegistered = (flashtile::jit::registerBuiltins(), true);
} // namespace
