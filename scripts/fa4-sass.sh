#!/usr/bin/env bash
# fa4-sass.sh — the SASS of fa4's kernels: each (variant, head dims, dtype) compiled by `flashtile compile --schedule
# fa4 --arch sm_100a --emit cubin` (NVRTC), disassembled with nvdisasm from its pip wheel (scripts/nvdisasm-wheel.sh,
# git-ignored .whl/), and checked for the tcgen05 opcodes (UTCHMMA: tcgen05.mma; UTCBAR: tcgen05.commit; LDTM/STTM:
# tcgen05.ld/st; UTCATOMSWS: tcgen05.alloc/dealloc) and for local memory (LDL/STL: spills). Prints one line a kernel
# with the counts, and exits 1 when one lacks an opcode or touches local memory. No SM100 GPU exists here: this reads
# the code ptxas made, nothing runs it.
# Usage: bash scripts/fa4-sass.sh [build dir, default build] [variant ...] (default: every built-in variant);
# FA4_FLAGS adds fa4 knobs to every compile (e.g. FA4_FLAGS="--roles 0": the first form's roles).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
source scripts/nvdisasm-wheel.sh
flashtile=$BUILD/tools/flashtile
variants=("$@")
if [[ ${#variants[@]} -eq 0 ]]; then
  mapfile -t variants < <("$flashtile" compile --help | grep -oE 'Built-in variant: .*' | sed 's/Built-in variant: //' |
    tr -d ' ' | tr ',' '\n' | grep -v '^$')
fi
echo "nvdisasm: $nvdisasm ($("$nvdisasm" --version | tail -n 1))"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
printf '%-24s %-5s %-8s %8s %6s %5s %5s %10s %4s\n' variant dtype dims UTCHMMA UTCBAR LDTM STTM UTCATOMSWS LDL/STL
for variant in "${variants[@]}"; do
  for dims in 64/64 128/128 192/128 256/256; do
    for dtype in bf16 f16; do
      cubin=$work/$variant-$dtype-${dims/\//-}.cubin
      # shellcheck disable=SC2086 # FA4_FLAGS is a list of flags
      "$flashtile" compile --schedule fa4 --arch sm_100a --variant "$variant" --dtype "$dtype" \
        --head-dim "${dims%/*}" --head-dim-v "${dims#*/}" ${FA4_FLAGS:-} --emit cubin -o "$cubin" >/dev/null
      sass=$("$nvdisasm" -c "$cubin")
      count() { echo "$sass" | grep -cE "$1" || true; }
      hmma=$(count '\bUTCHMMA\b') bar=$(count '\bUTCBAR\b') ldtm=$(count '\bLDTM\b') sttm=$(count '\bSTTM\b')
      atom=$(count '\bUTCATOMSWS\b') local=$(count '\b(LDL|STL)\b')
      printf '%-24s %-5s %-8s %8s %6s %5s %5s %10s %4s\n' "$variant" "$dtype" "$dims" "$hmma" "$bar" "$ldtm" "$sttm" \
        "$atom" "$local"
      if [[ $hmma = 0 || $bar = 0 || $ldtm = 0 || $sttm = 0 || $atom = 0 || $local != 0 ]]; then
        echo "  ^ missing a tcgen05 opcode or touching local memory"
        status=1
      fi
    done
  done
done
exit $status
