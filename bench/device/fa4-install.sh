#!/usr/bin/env bash
# fa4-install.sh — on the GPU machine: installs flash-attn-4 (FA4, CuTe DSL) and what it needs into /tmp/fa4-site from
# wheels carried in two folders (bench/device/fa4-prepare.sh makes them on the build machine; with the repository and
# flashtile's wheel, one call carries only one of them). From the repository root:
#   call 1, carrying .whl/fa4a:   bash bench/device/fa4-install.sh
#       copies that folder to /tmp/fa4-parts and says what is still missing;
#   call 2, right after it (the machine stays warm about 30 s), carrying .whl/fa4b (and .device/python):
#       bash bench/device/fa4-install.sh; bash bench/device/backward-anchors.sh
#       copies the rest, joins the split wheel, checks every file against bench/device/fa4-wheels.sha256, installs all
#       wheels with one pip install --no-deps --target into a fresh /tmp/fa4-site and prints the PYTHONPATH to use.
# With both folders carried, one call does it all. Run again once installed, it only prints the PYTHONPATH (and
# /tmp/fa4-env.sh sets it). Exit 0 once installed or while parts are still missing (it says which); 1 when a
# checksum, the install or the import check fails. FA4_WHEEL_DIRS: the carried folders (default .whl/fa4a .whl/fa4b).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
sums=$PWD/bench/device/fa4-wheels.sha256
parts=/tmp/fa4-parts site=/tmp/fa4-site
pythonpath=$site:$site/nvidia_cutlass_dsl/dsl_packages
announce() {
  echo "export FA4_PYTHONPATH=$pythonpath" > /tmp/fa4-env.sh
  echo "FA4 installed in $site: PYTHONPATH=$pythonpath"
}
stamp=$(sha256sum "$sums" | cut -c1-64)
if [ "$(cat "$site/.fa4-installed" 2>/dev/null)" = "$stamp" ]; then announce; exit 0; fi

mkdir -p "$parts"
for dir in ${FA4_WHEEL_DIRS:-.whl/fa4a .whl/fa4b}; do
  [ -d "$dir" ] && cp -f "$dir"/* "$parts"/ && echo "fa4-install: copied $(ls "$dir" | wc -l) files from $dir"
done
# The checksum file lists the carried files and, for the split wheel, the wheel its parts join into.
mapfile -t names < <(awk '{print $2}' "$sums")
missing=()
for name in "${names[@]}"; do
  case $name in
    *.part-*) [ -f "$parts/$name" ] || missing+=("$name") ;;
    *) [ -f "$parts/$name" ] || ls "$parts/$name".part-* > /dev/null 2>&1 || missing+=("$name") ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fa4-install: ${#missing[@]} of ${#names[@]} files still missing (carry the other folder next): ${missing[*]}"
  exit 0
fi
cd "$parts" || exit 1
for name in "${names[@]}"; do  # join each split wheel: its parts in name order
  [[ $name != *.part-* ]] && ls "$name".part-* > /dev/null 2>&1 || continue
  cat "$name".part-* > "$name.tmp" && mv "$name.tmp" "$name" || exit 1
done
sha256sum --quiet -c "$sums" || { echo "fa4-install: checksum mismatch (see above); nothing installed"; exit 1; }
wheels=()
for name in "${names[@]}"; do [[ $name == *.whl ]] && wheels+=("$name"); done
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}" ||
  { echo "fa4-install: pip install failed"; exit 1; }
[ -d "$site/nvidia_cutlass_dsl/dsl_packages/cutlass" ] || { echo "fa4-install: no cutlass in dsl_packages"; exit 1; }
PYTHONPATH=$pythonpath${PYTHONPATH:+:$PYTHONPATH} timeout 180 python3 -c '
import importlib.metadata as m, torch, cutlass
from flash_attn.cute import interface
print("fa4-install: imports ok: flash-attn-4", m.version("flash-attn-4"), "nvidia-cutlass-dsl", m.version("nvidia-cutlass-dsl"),
      "torch", torch.__version__, "on", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")' ||
  { echo "fa4-install: flash_attn.cute does not import"; exit 1; }
echo "$stamp" > "$site/.fa4-installed"
announce
