#!/usr/bin/env bash
# fa4-sass.sh — the SASS of fa4's kernels: each (variant, head dims, dtype) compiled by `flashtile compile --schedule
# fa4 --arch sm_100a --emit cubin` (NVRTC), disassembled with nvdisasm from its pip wheel (scripts/nvdisasm-wheel.sh,
# git-ignored .whl/), and checked for the tcgen05 opcodes (UTCHMMA: tcgen05.mma; UTCBAR: tcgen05.commit; LDTM/STTM:
# tcgen05.ld/st; UTCATOMSWS: tcgen05.alloc/dealloc) and for local memory (LDL/STL: spills). Prints one line a kernel
# with the counts, and exits 1 when one lacks an opcode or touches local memory. No SM100 GPU exists here: this reads
# the code ptxas made, nothing runs it.
# Usage: bash scripts/fa4-sass.sh [build dir, default build] [variant ...] (default: every built-in variant);
# FA4_FLAGS adds fa4 knobs to every compile (e.g. FA4_FLAGS="--roles 0": the first form's roles). With
# FA4_FLAGS="--two-cta 1" (cluster pairs) the head dims are the ones it is allowed for (128/128, 192/128, 256/256), a
# variant the schedule refuses (its key range depends on the Q tile) is listed as refused, and the pair's forms are
# counted too: UTCHMMA.2CTA, UTCBAR.2CTA.MULTICAST, UTMALDG.5D.2CTA and the cluster barrier (UCGABAR_ARV/WAIT); a pair
# kernel without one of them, or with a cta_group::1 UTCHMMA/UTCBAR, fails.
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
pair=0
dimsList=(64/64 128/128 192/128 256/256)
if [[ " ${FA4_FLAGS:-} " == *" --two-cta 1 "* ]]; then
  pair=1
  dimsList=(128/128 192/128 256/256)
fi
printf '%-24s %-5s %-8s %8s %6s %5s %5s %10s %4s' variant dtype dims UTCHMMA UTCBAR LDTM STTM UTCATOMSWS LDL/STL
[[ $pair = 1 ]] && printf ' %12s %21s %15s %7s' UTCHMMA.2CTA UTCBAR.2CTA.MULTICAST UTMALDG.5D.2CTA UCGABAR
printf '\n'
for variant in "${variants[@]}"; do
  for dims in "${dimsList[@]}"; do
    for dtype in bf16 f16; do
      cubin=$work/$variant-$dtype-${dims/\//-}.cubin
      # shellcheck disable=SC2086 # FA4_FLAGS is a list of flags
      if ! errors=$("$flashtile" compile --schedule fa4 --arch sm_100a --variant "$variant" --dtype "$dtype" \
        --head-dim "${dims%/*}" --head-dim-v "${dims#*/}" ${FA4_FLAGS:-} --emit cubin -o "$cubin" 2>&1 >/dev/null); then
        if [[ $pair = 1 && $errors == *"two-cta = 1 needs a key range that does not depend on the Q tile"* ]]; then
          printf '%-24s %-5s %-8s refused (two-cta = 1: its key range depends on the Q tile)\n' "$variant" "$dtype" "$dims"
          continue
        fi
        echo "$errors" >&2
        exit 1
      fi
      sass=$("$nvdisasm" -c "$cubin")
      count() { echo "$sass" | grep -cE "$1" || true; }
      hmma=$(count '\bUTCHMMA\b') bar=$(count '\bUTCBAR\b') ldtm=$(count '\bLDTM\b') sttm=$(count '\bSTTM\b')
      atom=$(count '\bUTCATOMSWS\b') local=$(count '\b(LDL|STL)\b')
      printf '%-24s %-5s %-8s %8s %6s %5s %5s %10s %4s' "$variant" "$dtype" "$dims" "$hmma" "$bar" "$ldtm" "$sttm" \
        "$atom" "$local"
      if [[ $pair = 1 ]]; then
        hmma2=$(count '\bUTCHMMA\.2CTA\b') bar2=$(count '\bUTCBAR\.2CTA\.MULTICAST\b')
        tma2=$(count '\bUTMALDG\.5D\.2CTA\b') cga=$(count '\bUCGABAR_(ARV|WAIT)\b')
        printf ' %12s %21s %15s %7s' "$hmma2" "$bar2" "$tma2" "$cga"
        if [[ $hmma2 != "$hmma" || $bar2 != "$bar" || $tma2 = 0 || $cga = 0 ]]; then
          printf '\n  ^ a pair kernel with a cta_group::1 MMA or commit, or without its cluster forms'
          status=1
        fi
      fi
      printf '\n'
      if [[ $hmma = 0 || $bar = 0 || $ldtm = 0 || $sttm = 0 || $atom = 0 || $local != 0 ]]; then
        echo "  ^ missing a tcgen05 opcode or touching local memory"
        status=1
      fi
    done
  done
done
exit $status
