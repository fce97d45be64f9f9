#!/usr/bin/env bash
# The plug-in rule of docs/architecture.md, checked: the generic layers (passes/, codegen/common/, runtime/, jit/) and
# what is built on them (tools/, capi/, interpreter/, dsl/, examples/) include no schedule's headers
# (schedules/<name>/...) and no instruction family's (codegen/<family>/...), and use neither's C++ namespace; they
# reach both through the registries (passes/Transforms/ScheduleRegistry.h, codegen/common/TargetRegistry.h, and the
# registration files schedules/Registry.h, codegen/Registry.h). Usage: check-layering.sh [ROOT]; exit 1 on a leak.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
# Everything but the plug-ins themselves: the generic layers and what is built on them (the CLI, the C ABI, the
# interpreter, the DSL, the examples). Only schedules/Registry.cpp and codegen/Registry.cpp name the plug-ins.
generic=""
for dir in passes codegen/common runtime jit tools capi interpreter dsl examples; do
  [ -d "$dir" ] && generic="$generic $dir"
done
leaks=$(grep -rnE '^\s*#\s*include\s*"(schedules/[A-Za-z0-9_]+/|codegen/(sm[0-9]+|[a-z0-9]+)/)' \
          $generic 2>/dev/null | grep -vE '"codegen/common/' || true)
# A schedule's or a family's C++ namespace used in code (not in comments), e.g. `fa1::createKvStepsPass()`.
for dir in schedules/*/ codegen/*/; do
  name=$(basename "$dir")
  [ "$name" = common ] && continue
  uses=$(grep -rnE "(^|[^A-Za-z0-9_])${name}::" $generic --include='*.cpp' --include='*.h' 2>/dev/null |
           grep -vE '^[^:]+:[0-9]+:\s*//' | grep -vE '^[^:]+:[0-9]+:.*//.*'"${name}::" || true)
  [ -n "$uses" ] && leaks="$leaks${leaks:+
}$uses"
done
if [ -n "$leaks" ]; then
  echo "generic layers name a schedule or a target (reach them through the registries):"
  echo "$leaks"
  exit 1
fi
echo "layering: the generic layers, the tools, the C ABI, the interpreter and the DSL name no schedule or target"
