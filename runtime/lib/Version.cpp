// Version.cpp — kept apart so that a new git revision or an edited compiler source recompiles only this file.
#include "flashtile/runtime/Version.h"
#include "flashtile/SourceHash.h"

#ifndef FLASHTILE_COMPILER_VERSION
#error "FLASHTILE_COMPILER_VERSION must be defined by the build (runtime/CMakeLists.txt)"
#endif

std::string_view flashtile::compilerVersion() { return FLASHTILE_COMPILER_VERSION "+src." FLASHTILE_SOURCE_HASH; }
