# nvdisasm-wheel.sh — sourced by the SASS scripts (sm90-sass.sh, sm100-sass.sh): unpacks nvdisasm from its pip wheel
# (nvidia-cuda-nvdisasm; taken from .whl/*.whl, or downloaded with pip when there is none) into the git-ignored
# .whl/nvdisasm/ and sets `nvdisasm` to the executable's absolute path. Run from the repository root.
if ! find .whl/nvdisasm -name nvdisasm -type f 2>/dev/null | grep -q .; then
  mkdir -p .whl
  wheel=$(ls .whl/nvidia_cuda_nvdisasm-*.whl 2>/dev/null | head -n 1 || true)
  if [[ -z $wheel ]]; then
    python3 -m pip download --no-deps --only-binary=:all: -d .whl nvidia-cuda-nvdisasm
    wheel=$(ls .whl/nvidia_cuda_nvdisasm-*.whl | head -n 1)
  fi
  rm -rf .whl/nvdisasm
  python3 -m zipfile -e "$wheel" .whl/nvdisasm
fi
nvdisasm=$PWD/$(find .whl/nvdisasm -name nvdisasm -type f | head -n 1)
chmod +x "$nvdisasm"
