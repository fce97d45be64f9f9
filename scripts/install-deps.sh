#!/usr/bin/env bash
# Installs what flashtile needs on Debian 12 and is missing. The CUDA toolkit (NVRTC, headers) must already be
# installed under /usr/local/cuda; it is not a Debian package.
set -euo pipefail

# python3-venv: scripts/python-test.sh installs the wheel into a fresh virtual environment.
packages=(cmake ninja-build g++ ccache lld-22 libmlir-22-dev mlir-22-tools llvm-22-dev libfmt-dev libcli11-dev
          libgtest-dev python3 python3-venv python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -e /usr/local/cuda/include/nvrtc.h ] && ! command -v nvcc >/dev/null; then
  echo "error: the CUDA toolkit (>= 12.8, with NVRTC) is not installed under /usr/local/cuda" >&2
  exit 1
fi
