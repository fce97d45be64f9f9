#!/usr/bin/env bash
# fa4-prepare.sh — on the build machine (it reaches the package registry): the wheels that carry flash-attn-4 (FA4,
# its CuTe DSL kernels) to the GPU machine, in two git-ignored folders of at most 46 MiB each, .whl/fa4a and
# .whl/fa4b, and their checksums in bench/device/fa4-wheels.sha256 (committed). fa4-install.sh installs them there.
#
# As published the set is about 111 MB, 92 MB of it the cutlass DSL's cu13 library wheel (two shared objects): more
# than two folders of 46 MiB. So that wheel is repacked here with LZMA members (the same files and RECORD, 66 MB; pip
# installs it like any wheel, Python's zipfile reads LZMA) and split byte-wise: its first part (FA4_PART_MIB, default
# 44) fills .whl/fa4a, the rest goes to .whl/fa4b with the other wheels. The published wheel's sha256 is printed.
# Carried: flash-attn-4 and what it needs with no extras, minus torch and CUDA's runtime libraries (the GPU machine's
# image has PyTorch 2.11 with CUDA 13); cuda-bindings, cuda-pathfinder, einops and protobuf are in that image too but
# are carried so that FA4 runs on the versions it was measured with. One version of each.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
names=(flash-attn-4==4.0.0b40 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 cuda-bindings==13.5.0
  cuda-pathfinder==1.9.1 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 quack-kernels==0.6.5
  einops==0.8.2 protobuf==7.36.2)
big=nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
dl=.whl/fa4
mkdir -p "$dl"
for name in "${names[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dl" "$name"
done
[ "$(ls "$dl"/*.whl | wc -l)" -eq "${#names[@]}" ] || { echo "fa4-prepare: expected ${#names[@]} wheels in $dl"; exit 1; }
echo "published $(sha256sum "$dl/$big")"

rm -rf .whl/fa4a .whl/fa4b .whl/fa4-repack
mkdir -p .whl/fa4a .whl/fa4b .whl/fa4-repack
# Repack: every member's bytes are compared with the published wheel's before the copy is used.
nice python3 - "$dl/$big" ".whl/fa4-repack/$big" <<'EOF'
import sys, zipfile
src, dst = sys.argv[1:]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_LZMA) as zout:
    for info in zin.infolist():
        new = zipfile.ZipInfo(info.filename, info.date_time)
        new.external_attr, new.compress_type = info.external_attr, zipfile.ZIP_LZMA
        zout.writestr(new, zin.read(info))
with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst) as b:
    assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
    assert all(a.read(i) == b.read(i.filename) for i in a.infolist()), "repacked wheel differs"
EOF
(cd .whl/fa4-repack && split -b "$((${FA4_PART_MIB:-44} * 1048576))" -a 2 "$big" "$big.part-")
mv ".whl/fa4-repack/$big.part-aa" .whl/fa4a/
mv .whl/fa4-repack/"$big".part-* .whl/fa4b/
for w in "$dl"/*.whl; do [ "$(basename "$w")" = "$big" ] || cp "$w" .whl/fa4b/; done
# Checksums: the parts and the other wheels as carried, and the joined (repacked) wheel.
(cd .whl/fa4-repack && sha256sum "$big"; cd ../fa4a && sha256sum ./*; cd ../fa4b && sha256sum ./*) |
  sed 's#  \./#  #' > bench/device/fa4-wheels.sha256
rm -rf .whl/fa4-repack
du -b .whl/fa4a/* .whl/fa4b/*
du -sh --apparent-size .whl/fa4a .whl/fa4b
