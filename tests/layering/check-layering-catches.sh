#!/usr/bin/env bash
# check-layering.sh must fail on a tree where a generic layer includes a schedule's header or a target's, or uses
# either's namespace: copies the folders, plants one line at a time, and expects the check to reject each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for planted in 'passes/Transforms/ApplySchedule.cpp:#include "schedules/fa2/Fa2Config.h"' \
               'jit/Jit.cpp:#include "codegen/sm80/TileOpsSm80.h"' \
               'runtime/lib/Runtime.cpp:#include "schedules/fa2/Fa2Pipeline.h"' \
               'interpreter/Interpreter.cpp:#include "schedules/fa1/Fa1Config.h"' \
               'tools/flashtile/Main.cpp:static const int planted = (flashtile::fa1::registerSchedule(), 0);' \
               'codegen/common/CudaEmitter.cpp:static const auto planted = sm90::createFamily();'; do
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  cp -r "$root/passes" "$root/runtime" "$root/jit" "$root/tools" "$root/capi" "$root/interpreter" "$root/dsl" \
        "$root/codegen" "$root/schedules" "$tmp/tree/"
  file=${planted%%:*}
  echo "${planted#*:}" >>"$tmp/tree/$file"
  if bash "$here/check-layering.sh" "$tmp/tree" >/dev/null; then
    echo "check-layering.sh accepted a planted include in $file"
    exit 1
  fi
done
bash "$here/check-layering.sh" "$root" >/dev/null
echo "check-layering.sh rejects planted includes and accepts the tree"

# check-schedule-folders.sh must fail on a tree where code outside a schedule's folder names it (a source listed in
# the top-level CMakeLists.txt, a runtime file including its header) and where its registration is missing.
for planted in 'CMakeLists.txt:add_library(planted STATIC schedules/fa1/Fa1Config.cpp)' \
               'runtime/lib/Runtime.cpp:#include "schedules/fa1/Fa1Config.h"' \
               'schedules/Registry.cpp:'; do
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  (cd "$root" && git ls-files -z 2>/dev/null | xargs -0 cp --parents -t "$tmp/tree") ||
    cp -r "$root/CMakeLists.txt" "$root/runtime" "$root/schedules" "$tmp/tree/"
  file=${planted%%:*}
  line=${planted#*:}
  if [ -n "$line" ]; then
    echo "$line" >>"$tmp/tree/$file"
  else
    sed -i '/fa1::registerSchedule();/d' "$tmp/tree/$file" # the registration taken out
  fi
  if bash "$here/check-schedule-folders.sh" "$tmp/tree" >/dev/null; then
    echo "check-schedule-folders.sh accepted a planted change in $file"
    exit 1
  fi
done
bash "$here/check-schedule-folders.sh" "$root" >/dev/null
echo "check-schedule-folders.sh rejects a schedule named outside its folder or unregistered, and accepts the tree"
