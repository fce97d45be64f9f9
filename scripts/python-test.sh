#!/usr/bin/env bash
# The Python package and the installation, as users get them (no GPU needed); run by scripts/test.sh after the
# build. Builds the wheel from ./build (pip wheel . -C build-dir=build: scikit-build-core from PyPI, the compiled
# objects reused), installs it into a fresh virtual environment, checks what the library needs and exports, runs
# tests/python against the installed package (with PyTorch from PyPI, on the CPU), then `cmake --install`s into a
# scratch prefix, runs the installed CLI and builds and runs a find_package(flashtile) consumer.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The compilers scripts/build.sh configured ./build with (scikit-build-core would otherwise take Python's, and a
# different compiler path makes CMake start ./build afresh).
export CC=${CC:-cc} CXX=${CXX:-c++}
work=build/python-test
rm -rf "$work"
mkdir -p "$work"

echo "== wheel"
"$PYTHON" -m pip wheel . -C build-dir=build --no-deps -q -w "$work/dist"
wheel=$(ls "$work"/dist/flashtile-*.whl)
echo "$(basename "$wheel"): $(du -h "$wheel" | cut -f1)"
case "$(basename "$wheel")" in
  *-py3-none-linux_x86_64.whl) ;;
  *) echo "error: the wheel is not tagged py3-none-linux_x86_64" >&2; exit 1 ;;
esac
size=$(stat -c %s "$wheel")
if [ "$size" -gt $((60 * 1024 * 1024)) ]; then
  echo "error: the wheel is $size bytes; at most 60 MiB" >&2
  exit 1
fi

echo "== fresh virtual environment"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
lib=$("$work/venv/bin/python" -c 'import flashtile; print(flashtile.library_path())')

echo "== $lib: needs and exports"
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
echo "NEEDED: $needed"
for library in $needed; do
  case "$library" in
    libc.so.6 | libm.so.6 | libgcc_s.so.1 | ld-linux-x86-64.so.2) ;;
    *) echo "error: $lib needs $library; only libc, libm, libgcc_s (libcuda and NVRTC are opened at run time)" >&2
       exit 1 ;;
  esac
done
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
others=$(echo "$exported" | grep -v '^flashtile_' || true)
if [ -n "$others" ]; then
  echo "error: $lib exports symbols outside the C ABI:" >&2
  echo "$others" | head -20 >&2
  exit 1
fi
echo "exports $(echo "$exported" | wc -l) symbols, all flashtile_*"
glibc=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
echo "newest glibc symbol version: $glibc"

echo "== PyTorch for the torch-facing tests"
# tests/python's torch tests (the fp64 reference, flashtile.parallel over gloo, the flash-attn entry points) run on
# the CPU. PyPI's torch is its CUDA build: installed without its dependencies it imports with the CUDA libraries
# of the toolkit (/usr/local/cuda) and, from their wheels, the four the toolkit lacks or has too old (NCCL, NVSHMEM,
# cuSPARSELt, cuFile): about 900 MB instead of 3 GB. Installed once per version into a cache outside ./build (whose
# ELF files ctest checks), which the fresh environment reads through a .pth file; where the toolkit's libraries do
# not serve (a CUDA 12 toolkit), torch is installed with all its dependencies instead. FLASHTILE_TEST_TORCH=none
# skips it (the torch tests then skip); FLASHTILE_TEST_DEPS moves the cache (default ~/.cache/flashtile-test-deps).
torch_spec=${FLASHTILE_TEST_TORCH:-torch==2.15.0}
if [ "$torch_spec" != none ]; then
  py=$("$work/venv/bin/python" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
  deps=${FLASHTILE_TEST_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/flashtile-test-deps}
  deps=$deps/$(echo "$torch_spec" | tr -c 'A-Za-z0-9.\n' _)-$py
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  imports() { PYTHONPATH="$1" "$work/venv/bin/python" -c \
    'import torch, torch.distributed as d; assert d.is_gloo_available(); print("torch", torch.__version__)' 2>&1; }
  if [ ! -e "$deps/.complete" ]; then
    start=$SECONDS
    tmp=$deps.tmp.$$  # another run may fill the same cache meanwhile: the first one complete is kept
    rm -rf "$tmp"
    mkdir -p "$(dirname "$deps")"
    "$work/venv/bin/python" -m pip install -q --disable-pip-version-check --target "$tmp" --no-deps \
      "$torch_spec" nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2 nvidia-cusparselt-cu13==0.8.1 \
      "nvidia-cufile==1.17.1.22.*" typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0
    if ! imports "$tmp" >/dev/null; then
      echo "torch without its dependencies does not import here ($(imports "$tmp" | tail -1)); with them:"
      rm -rf "$tmp"
      "$work/venv/bin/python" -m pip install -q --disable-pip-version-check --target "$tmp" "$torch_spec"
      imports "$tmp" >/dev/null || { echo "error: $torch_spec does not import: $(imports "$tmp")" >&2; exit 1; }
    fi
    touch "$tmp/.complete"
    [ -e "$deps/.complete" ] || rm -rf "$deps"  # an interrupted earlier attempt
    mv -T "$tmp" "$deps" 2>/dev/null || rm -rf "$tmp"
    echo "installed into $deps in $((SECONDS - start)) s"
  fi
  echo "$deps" > "$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/torch-deps.pth"
  imports "" | tail -1
  # ring-flash-attn from the registry (pure Python, 25 KB), so that tests/python/test_flash_attn_compat.py runs it
  # itself on flashtile's flash-attn entry points over gloo (docs/parallel.md); filelock and networkx, which
  # torch.compile imports, so that tests/python/test_parallel_compile.py compiles flashtile.parallel's calls.
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps ring-flash-attn==0.1.8 \
    filelock==4.3.2 networkx==3.6.1
fi

echo "== tests/python against the installed package"
tests=$PWD/tests/python
(cd "$work" && env -u FLASHTILE_LIBRARY -u PYTHONPATH FLASHTILE_DISABLE_CACHE=1 \
  venv/bin/python -m unittest discover -s "$tests" 2>&1 | tail -4)

echo "== cmake --install and find_package(flashtile)"
cmake --install build --prefix "$work/prefix" --component devel >/dev/null
"$work/prefix/bin/flashtile" --version
"$work/prefix/bin/flashtile" compile --variant causal --head-dim 64 --arch sm_80 -o "$work/installed.cubin"
cmake -S tests/python/consumer -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$work/prefix" \
  -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
echo "python-test: ok"
