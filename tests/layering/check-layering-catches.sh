#!/usr/bin/env bash
# check-layering.sh must fail on a tree where a generic layer includes a schedule's header and where one includes a
# target's: copies the generic folders, plants one include at a time, and expects the check to reject each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for planted in 'passes/Transforms/ApplySchedule.cpp:#include "schedules/fa2/Fa2Config.h"' \
               'jit/Jit.cpp:#include "codegen/sm80/TileOpsSm80.h"' \
               'runtime/lib/Runtime.cpp:#include "schedules/fa2/Fa2Pipeline.h"'; do
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree/codegen"
  cp -r "$root/passes" "$root/runtime" "$root/jit" "$tmp/tree/"
  cp -r "$root/codegen/common" "$tmp/tree/codegen/"
  file=${planted%%:*}
  echo "${planted#*:}" >>"$tmp/tree/$file"
  if bash "$here/check-layering.sh" "$tmp/tree" >/dev/null; then
    echo "check-layering.sh accepted a planted include in $file"
    exit 1
  fi
done
bash "$here/check-layering.sh" "$root" >/dev/null
echo "check-layering.sh rejects planted includes and accepts the tree"
