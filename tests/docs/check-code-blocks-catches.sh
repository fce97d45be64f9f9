#!/usr/bin/env bash
# check-code-blocks.py must fail where a block is broken: on copies of the docs with one block broken at a time
# (README.md's C++ build line without the target libraries, a CLI line with a typo, a C++ block that does not
# compile, a Python block marked for a GPU that does not parse, a cmake block that says nothing of its use), it
# must exit 1 and name the block. Usage: check-code-blocks-catches.sh BUILD [JIT_LIBRARY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
jit_library=${2:-$build/capi/libflashtile_jit.so}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_rejected NAME LINE: the check over $tmp/NAME.md must fail, and name the block that starts at LINE.
expect_rejected() {
  local name=$1 line=$2
  if python3 "$here/check-code-blocks.py" --root "$root" --build "$build" --jit-library "$jit_library" \
    "$tmp/$name.md" >"$tmp/$name.log" 2>&1; then
    echo "check-code-blocks.py accepted $name.md:"
    cat "$tmp/$name.md"
    exit 1
  fi
  if ! grep -q "^FAILED $tmp/$name.md:$line " "$tmp/$name.log"; then
    echo "check-code-blocks.py rejected $name.md, but not for its block at line $line:"
    cat "$tmp/$name.log"
    exit 1
  fi
}

# README.md's build line as issue 30 found it: without libflashtile_targets.a and libflashtile_target_registry.a.
grep -q 'libflashtile_target_registry.a' "$root/README.md"
sed -e 's| \$B/codegen/libflashtile_targets.a \$B/codegen/libflashtile_target_registry.a||' "$root/README.md" \
  >"$tmp/readme-link.md"
build_line=$(grep -n -B1 '^B=build; g++' "$tmp/readme-link.md" | sed -n '1s/-.*//p')
if cmp -s "$root/README.md" "$tmp/readme-link.md" || [ -z "$build_line" ]; then
  echo "README.md's build line is not where this test plants its break"
  exit 1
fi
expect_rejected readme-link "$build_line"

fence='```'
printf '%s\n' "A CLI line with a typo:" "${fence}sh" "flashtile compile --variant casual --head-dim 64 --emit tile" \
  "$fence" >"$tmp/cli-typo.md"
expect_rejected cli-typo 2

printf '%s\n' "${fence}cpp" '#include "flashtile/runtime/Runtime.h"' \
  "flashtile::Status s = flashtile::Runtime::forward();" "$fence" >"$tmp/cpp-error.md"
expect_rejected cpp-error 1

printf '%s\n' "<!-- gpu -->" "${fence}python" "out = flashtile.flash_attn_func(q, k, v, causal=True" "$fence" \
  >"$tmp/python-syntax.md"
expect_rejected python-syntax 2

printf '%s\n' "${fence}cmake" "find_package(flashtile REQUIRED)" "$fence" >"$tmp/cmake-unmarked.md"
expect_rejected cmake-unmarked 1

echo "check-code-blocks.py rejects a README without the target libraries in its build line, a CLI typo, C++ that does" \
  "not compile, Python that does not parse and an unmarked cmake block"
