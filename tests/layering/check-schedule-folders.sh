#!/usr/bin/env bash
# A schedule is its folder plus its registration: for every schedules/<name>/, nothing outside the folder names it
# in code (its headers, its C++ namespace), the other schedules' folders included, but schedules/Registry.cpp, which
# includes its <Name>Register.h once and calls <name>::registerSchedule() once. What schedules share is generic (the
# copy pipeline of fa1, fa2 and decode: passes/Transforms/PipelineCopies.cpp). Its sources are found by
# schedules/CMakeLists.txt; tests, benchmarks and documents may name it. No other schedule names its passes
# (tile-<name>-...) or looks it up by name. With check-layering.sh (the generic layers
# name no schedule) this is the plug-in rule of the schedules. Usage: check-schedule-folders.sh [ROOT].
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
status=0
code=$(find . -path ./build -prune -o -path './build*' -prune -o -path ./tests -prune -o -path ./bench -prune -o \
         -path ./.git -prune -o -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.td' -o -name 'CMakeLists.txt' \) \
         -print | sed 's|^\./||' | sort)
for dir in schedules/*/; do
  name=$(basename "$dir")
  compgen -G "$dir*.cpp" >/dev/null || continue # a plan (schedules/fa4/README.md), not a schedule yet
  [ -f "$dir/CMakeLists.txt" ] && { echo "$dir has its own CMakeLists.txt; schedules/CMakeLists.txt finds sources"; status=1; }
  outside=$(echo "$code" | grep -v "^schedules/$name/" | grep -v '^schedules/Registry.cpp$' || true)
  # Code lines (not comments) that include the folder's headers or use its namespace.
  hits=$(echo "$outside" | xargs grep -nE "(^|[^A-Za-z0-9_/])schedules/$name/|(^|[^A-Za-z0-9_])$name::" 2>/dev/null |
           grep -vE '^[^:]+:[0-9]+:\s*(//|/\*|\*|#\s)' || true)
  if [ -n "$hits" ]; then
    echo "schedule $name is named outside its folder and its registration:"
    echo "$hits"
    status=1
  fi
  # Another schedule's passes (tile-<name>-...) or the schedule itself looked up by name from a schedule's folder: a
  # schedule must stand alone when another is not registered (what they share is a generic pass, e.g.
  # passes/Transforms/RolePipeline.h). Naming another schedule in a message or a dispatch preference is data, allowed.
  byName=$(grep -rnE "tile-$name-|lookupSchedule\(\"$name\"" schedules --include='*.cpp' --include='*.h' 2>/dev/null |
             grep -v "^schedules/$name/" | grep -vE '^[^:]+:[0-9]+:\s*(//|/\*|\*)' || true)
  if [ -n "$byName" ]; then
    echo "schedule $name's passes or the schedule itself are named by another schedule:"
    echo "$byName"
    status=1
  fi
  includes=$(grep -cE "^#include \"schedules/$name/[A-Za-z0-9]+Register\.h\"" schedules/Registry.cpp || true)
  calls=$(grep -cE "^\s*$name::registerSchedule\(\);" schedules/Registry.cpp || true)
  if [ "$includes" != 1 ] || [ "$calls" != 1 ]; then
    echo "schedules/Registry.cpp must include schedules/$name/<Name>Register.h once and call $name::registerSchedule()"
    echo "once (found $includes include(s), $calls call(s))"
    status=1
  fi
done
[ $status = 0 ] && echo "schedules: each is its folder plus its registration in schedules/Registry.cpp"
exit $status
