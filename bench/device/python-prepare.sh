#!/usr/bin/env bash
# python-prepare.sh — on the build machine: the wheel for the GPU machine, in .device/python/ (git-ignored; about
# 2 MB). Then run bench/device/python-check.sh there with .device/python/ copied there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash scripts/build.sh
rm -rf .device/python
mkdir -p .device/python
CC=${CC:-cc} CXX=${CXX:-c++} python3 -m pip wheel . -C build-dir=build --no-deps -q -w .device/python
ls -la .device/python
