#!/usr/bin/env bash
# The plug-in rule of DESIGN.md, checked: the generic layers (passes/, codegen/common/, runtime/, jit/) include no
# schedule's headers (schedules/<name>/...) and no instruction family's (codegen/<family>/...); they reach both
# through the registries (passes/Transforms/ScheduleRegistry.h, codegen/common/TargetRegistry.h, and the
# registration files schedules/Registry.h, codegen/Registry.h). Usage: check-layering.sh [ROOT]; exit 1 on a leak.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
leaks=$(grep -rnE '^\s*#\s*include\s*"(schedules/[A-Za-z0-9_]+/|codegen/(sm[0-9]+|[a-z0-9]+)/)' \
          passes codegen/common runtime jit 2>/dev/null | grep -vE '"codegen/common/' || true)
if [ -n "$leaks" ]; then
  echo "generic layers include a schedule's or a target's headers (use the registries):"
  echo "$leaks"
  exit 1
fi
echo "layering: passes/, codegen/common/, runtime/ and jit/ include no schedule's or target's headers"
