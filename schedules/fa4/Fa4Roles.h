//===- Fa4Roles.h - tile-fa4-roles, FA4's own warp roles -------------------===//
#ifndef FLASHTILE_SCHEDULES_FA4_FA4ROLES_H
#define FLASHTILE_SCHEDULES_FA4_FA4ROLES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace flashtile::fa4 {
/// tile-fa4-roles (Fa4RolesPass.cpp): a load warp, one MMA warp, a softmax warpgroup per Q tile, a correction
/// warpgroup and an epilogue per Q tile, on the memory layer (tensor-memory buffers, channels, commits).
std::unique_ptr<mlir::Pass> createRolesPass();
} // namespace flashtile::fa4

#endif // FLASHTILE_SCHEDULES_FA4_FA4ROLES_H
