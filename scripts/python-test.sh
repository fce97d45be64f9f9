#!/usr/bin/env bash
# The Python package and the installation, as users get them (no GPU needed); run by scripts/test.sh after the
# build. Builds the wheel from ./build (pip wheel . -C build-dir=build: scikit-build-core from PyPI, the compiled
# objects reused), installs it into a fresh virtual environment, checks what the library needs and exports, runs
# tests/python against the installed package, then `cmake --install`s into a scratch prefix, runs the installed CLI
# and builds and runs a find_package(flashtile) consumer.
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
