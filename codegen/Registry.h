//===- Registry.h - the built-in instruction families ---------------------===//
#ifndef FLASHTILE_CODEGEN_REGISTRY_H
#define FLASHTILE_CODEGEN_REGISTRY_H

namespace flashtile::codegen {
/// Registers every family under codegen/ with the target registry (once; later calls do nothing).
void registerBuiltinTargets();
} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_REGISTRY_H
