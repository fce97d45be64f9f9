#!/usr/bin/env bash
# The plug-in rule of docs/architecture.md, checked:
#  1. the generic layers (passes/, codegen/common/, runtime/, jit/) and what is built on them (tools/, capi/,
#     interpreter/, dsl/, examples/) include no schedule's headers (schedules/<name>/...) and no instruction family's
#     (codegen/<family>/...), and use neither's C++ namespace; they reach both through the registries
#     (passes/Transforms/ScheduleRegistry.h, passes/Target/TargetFamily.h, codegen/common/TargetRegistry.h, and the
#     registration files schedules/Registry.h, codegen/Registry.h);
#  2. passes/ includes nothing of codegen/ and passes/IR and passes/Transforms nothing of the runtime but the schedule
#     registry's dispatch-rule data (below): what they need of a target is the target interface, passes/Target (which
#     reads the one table of arch names users may write, the runtime's ArchNames.h, shared with the runtime-only CLI);
#  3. the instruction families stand side by side: codegen/<family>/ includes nothing of another family's folder and
#     uses no other family's namespace (what they share is generic code in codegen/common/, or instruction text in
#     codegen/ptx/, which a family declares it prints in its README.md's "Shared instructions:" line; codegen/common/
#     writes no inline asm or PTX: check 5);
#  4. the generic layers (passes/IR, passes/Transforms, passes/Target, codegen/common, runtime, jit, capi) write no
#     schedule name (fa1, fa2, fa3, fa4, decode), family name (sm80, sm90, sm100) or arch name (sm_80, sm_90a, sm_100a)
#     in a string (names-in-strings.py; comments, TableGen descriptions and a layer's tests/ may), but in the single
#     declared lists, the exceptions below, which the rest of the code reads.
# Usage: check-layering.sh [ROOT]; exit 1 on a leak.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${1:-$(cd "$here/../.." && pwd)}
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
status=0
if [ -n "$leaks" ]; then
  echo "generic layers name a schedule or a target (reach them through the registries):"
  echo "$leaks"
  status=1
fi

# 2. The passes and what they include. One exception: the schedule registry records each schedule's dispatch rule
# into the kernels' metadata (flashtile/runtime/Dispatch.h, KernelInfo.h: data the runtime reads, no runtime code).
passes=$(grep -rnE '^\s*#\s*include\s*"codegen/' passes 2>/dev/null || true)
passes="$passes${passes:+
}$(grep -rnE '^\s*#\s*include\s*[<"]flashtile/runtime/' passes/IR passes/Transforms 2>/dev/null |
     grep -vE '^passes/Transforms/ScheduleRegistry\.h:[0-9]+:#include "flashtile/runtime/(Dispatch|KernelInfo)\.h"' || true)"
passes="$passes${passes:+
}$(grep -rnE '^\s*#\s*include\s*[<"]flashtile/runtime/' passes/Target 2>/dev/null |
     grep -v '"flashtile/runtime/ArchNames.h"' || true)"
passes=$(echo "$passes" | sed '/^$/d')
if [ -n "$passes" ]; then
  echo "passes/ includes codegen/ or the runtime (the target interface is passes/Target/TargetFamily.h):"
  echo "$passes"
  status=1
fi

# 3. Families side by side (codegen/common/ and codegen/ptx/, the shared-instruction folder, are no family).
families=$(for dir in codegen/*/; do case $(basename "$dir") in common | ptx) ;; *) echo "$dir" ;; esac; done)
for dir in $families; do
  family=$(basename "$dir")
  for other in $families; do
    name=$(basename "$other")
    [ "$name" = "$family" ] && continue
    # Its headers, its namespace in code, or its namespace given as a bare string (a family printing primitives
    # under another's name, e.g. `kFragmentNamespace = "sm80"` in sm90).
    uses=$(grep -rnE "^\s*#\s*include\s*\"codegen/$name/|(^|[^A-Za-z0-9_])$name::|\"$name\"" "$dir" --include='*.cpp' \
             --include='*.h' 2>/dev/null | grep -vE '^[^:]+:[0-9]+:\s*//' | grep -vE '^[^:]+:[0-9]+:.*//.*'"$name::" ||
           true)
    if [ -n "$uses" ]; then
      echo "the $family family names the $name family (what families share belongs in codegen/common/):"
      echo "$uses"
      status=1
    fi
  done
done

# 5. Instructions live in the families and in codegen/ptx/: codegen/common/ writes no `asm` and no PTX statement
# (a string holding "<mnemonic>.<qualifiers> ...;\n"); codegen/ptx/ includes nothing of codegen/; a family that
# includes codegen/ptx/<file> declares it on its README.md's "Shared instructions:" line.
ptx='(mma|ldmatrix|stmatrix|cp|red|ld|st|cvt|wgmma|tcgen05|mbarrier|fence|shfl|ex2|bar|elect|setmaxnreg|atom|prmt)'
common_asm=$(grep -rnE "(^|[^A-Za-z0-9_])asm([^A-Za-z0-9_]|$)|\"([^\"]*[^A-Za-z0-9_])?$ptx\.[a-z0-9_.:]+[^\"]*;\\\\n" \
               codegen/common --include='*.cpp' --include='*.h' --include='*.in' 2>/dev/null |
               grep -vE '^[^:]+:[0-9]+:\s*//' || true)
if [ -n "$common_asm" ]; then
  echo "codegen/common/ writes instructions (inline asm or PTX text belongs to a family, or to codegen/ptx/):"
  echo "$common_asm"
  status=1
fi
if [ -d codegen/ptx ]; then
  ptx_includes=$(grep -rnE '^\s*#\s*include\s*"codegen/' codegen/ptx 2>/dev/null | grep -vE '"codegen/ptx/' || true)
  if [ -n "$ptx_includes" ]; then
    echo "codegen/ptx/ is instruction text only; it includes nothing else of codegen/:"
    echo "$ptx_includes"
    status=1
  fi
  for dir in $families; do
    family=$(basename "$dir")
    declared=$(grep -hE '^Shared instructions:' "$dir/README.md" 2>/dev/null || true)
    for used in $(grep -rhoE '^\s*#\s*include\s*"codegen/ptx/[A-Za-z0-9_]+\.h"' "$dir" --include='*.cpp' --include='*.h' |
                    grep -oE 'codegen/ptx/[A-Za-z0-9_]+\.h' | sort -u); do
      if ! grep -qF "$used" <<<"$declared"; then
        echo "the $family family includes $used without declaring it (a \"Shared instructions:\" line of $dir""README.md)"
        status=1
      fi
    done
  done
fi

# 4. Names written as strings. The declared lists (file|first line|last line|why, regexes) the generic layers read:
exempt='
runtime/include/flashtile/runtime/KernelInfo.h|kSupportedArchs = |kDefaultCompileArch = |the archs kernels are built for, and the arch of a compile that names none
runtime/include/flashtile/runtime/ArchNames.h|kArchAliases = |}}};|the arch names users may write and the arch each one builds
runtime/lib/KernelInfo.cpp|^int flashtile::maxSmemBytes|^}|the shared-memory limit of each arch the runtime dispatches to
passes/Transforms/ScheduleRegistry.h|^struct Request \{|^\};|the schedule and arch of a request that names none (pass options, tools)
'
strings=""
for dir in passes/IR passes/Transforms passes/Target codegen/common runtime jit capi; do
  [ -d "$dir" ] && strings="$strings $dir"
done
if ! named=$(python3 "$here/names-in-strings.py" --exempt "$exempt" $strings); then
  echo "generic layers write a schedule, family or arch name in a string (read the declared lists, or the registries):"
  echo "$named"
  status=1
fi

[ $status = 0 ] &&
  echo "layering: the generic layers, the tools, the C ABI, the interpreter and the DSL name no schedule or target;" \
    "passes/ includes no codegen/; the families include nothing of each other"
exit $status
