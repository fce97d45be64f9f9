#!/usr/bin/env bash
# The plug-in checks must fail where the rule is broken: on a copy of the sources, plants one line at a time (an
# include of a schedule's or a target's header in a generic layer, their namespace used there, codegen/ or the runtime
# included by the passes, one family's header or namespace (in code or as a bare string) in another's, a schedule,
# family or arch name written as a string in a generic layer, inline asm or PTX text in codegen/common, codegen/ptx
# including codegen/, a family using codegen/ptx undeclared, a schedule's source listed outside its folder, a
# schedule named in another's folder) or takes fa1's registration out, and expects the check to reject each; both
# accept the tree as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_rejected CHECK FILE LINE: a fresh copy of the sources with LINE appended to FILE (an empty LINE: fa1's
# registration taken out of FILE) must fail CHECK.
expect_rejected() {
  local check=$1 file=$2 line=$3
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  tar -C "$root" --exclude='./build*' --exclude=./.git --exclude=./.whl --exclude=./.device -cf - . |
    tar -C "$tmp/tree" -xf -
  if [ -n "$line" ]; then
    echo "$line" >>"$tmp/tree/$file"
  else
    sed -i '/fa1::registerSchedule();/d' "$tmp/tree/$file"
  fi
  if bash "$here/$check" "$tmp/tree" >/dev/null; then
    echo "$check accepted a planted change in $file: ${line:-the fa1 registration removed}"
    exit 1
  fi
}

expect_rejected check-layering.sh passes/Transforms/ApplySchedule.cpp '#include "schedules/fa2/Fa2Config.h"'
expect_rejected check-layering.sh jit/Jit.cpp '#include "codegen/sm80/TileOpsSm80.h"'
expect_rejected check-layering.sh runtime/lib/Runtime.cpp '#include "schedules/fa2/Fa2Pipeline.h"'
expect_rejected check-layering.sh interpreter/Interpreter.cpp '#include "schedules/fa1/Fa1Config.h"'
expect_rejected check-layering.sh tools/flashtile/Main.cpp \
  'static const int planted = (flashtile::fa1::registerSchedule(), 0);'
expect_rejected check-layering.sh codegen/common/CudaEmitter.cpp 'static const auto planted = sm90::createFamily();'
expect_rejected check-layering.sh passes/IR/TileDialect.cpp '#include "codegen/common/TargetRegistry.h"'
expect_rejected check-layering.sh passes/IR/TileDialect.cpp '#include "flashtile/runtime/KernelInfo.h"'
expect_rejected check-layering.sh passes/Transforms/ApplySchedule.cpp '#include "flashtile/runtime/KernelInfo.h"'
expect_rejected check-layering.sh passes/Target/TargetFamily.cpp '#include "flashtile/runtime/KernelInfo.h"'
expect_rejected check-layering.sh codegen/sm90/TileOpsSm90.cpp '#include "codegen/sm80/TileOpsSm80.h"'
expect_rejected check-layering.sh codegen/sm90/TileOpsSm90.cpp 'static const auto planted = sm80::createFamily();'
expect_rejected check-layering.sh codegen/sm80/TileOpsSm80.cpp '#include "codegen/sm90/InstructionsSm90.h"'
expect_rejected check-layering.sh codegen/sm90/TileOpsSm90.cpp 'constexpr const char *kPlantedNamespace = "sm80";'
expect_rejected check-layering.sh codegen/common/CudaEmitter.cpp 'static const char *planted = "sm_90a";'
expect_rejected check-layering.sh runtime/lib/Runtime.cpp 'static const char *planted = "use fa3 here";'
expect_rejected check-layering.sh jit/Jit.cpp 'static const std::string planted = std::string("decode");'
expect_rejected check-layering.sh passes/Transforms/LowerToTarget.cpp 'static const char *planted = R"(sm80)";'
expect_rejected check-layering.sh capi/CApiJit.cpp 'static const char *planted = "sm_100a";'
expect_rejected check-layering.sh runtime/include/flashtile/runtime/KernelInfo.h \
  'inline constexpr const char *kPlanted = "sm_80";'
expect_rejected check-layering.sh codegen/common/CudaOps.cpp \
  'static const char *planted = "red.global.add.f32 [%0], %1;\n";'
expect_rejected check-layering.sh codegen/common/CudaOps.cpp \
  '__device__ inline void planted() { asm volatile("nanosleep.u32 1;"); }'
expect_rejected check-layering.sh codegen/common/CudaOps.cpp '#include "codegen/ptx/FragmentPrelude.h"'
expect_rejected check-layering.sh codegen/ptx/BackwardPrelude.h '#include "codegen/common/Concat.h"'
expect_rejected check-layering.sh codegen/sm100/TileOpsSm100.cpp '#include "codegen/ptx/BackwardPrelude.h"'
bash "$here/check-layering.sh" "$root" >/dev/null
echo "check-layering.sh rejects planted includes, namespace uses, names in strings, instructions in codegen/common and"
echo "undeclared uses of codegen/ptx, and accepts the tree"

expect_rejected check-schedule-folders.sh CMakeLists.txt 'add_library(planted STATIC schedules/fa1/Fa1Config.cpp)'
expect_rejected check-schedule-folders.sh runtime/lib/Runtime.cpp '#include "schedules/fa1/Fa1Config.h"'
expect_rejected check-schedule-folders.sh schedules/fa1/Fa1Schedule.cpp '#include "schedules/fa2/Fa2Pipeline.h"'
expect_rejected check-schedule-folders.sh schedules/fa4/Fa4Schedule.cpp \
  'static const char *planted = "tile-fa3-pipeline{pingpong=0}";'
expect_rejected check-schedule-folders.sh schedules/fa2/Fa2Schedule.cpp \
  'static const auto *planted = flashtile::schedule::lookupSchedule("fa1");'
expect_rejected check-schedule-folders.sh schedules/Registry.cpp ''
bash "$here/check-schedule-folders.sh" "$root" >/dev/null
echo "check-schedule-folders.sh rejects a schedule named outside its folder or unregistered, and accepts the tree"
