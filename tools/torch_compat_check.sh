#!/usr/bin/env bash
# Builds libdtorch (the C library with the LibTorch shim, and the CUDA shim
# when the wheel is a CUDA build) against an older torch than the one in
# .venv: dtorch supports torch >= 2.4 (CMakeLists.txt, DT_TORCH_MIN_VERSION),
# so API differences must be #if'd on TORCH_VERSION_MAJOR/MINOR. A compile
# and link check only: nothing runs, no Python extension is built.
#
#   tools/torch_compat_check.sh            torch 2.4.0 (the oldest supported)
#   tools/torch_compat_check.sh 2.6.0      another release
#
# It downloads the release's cp311 Linux wheel from PyPI (the CUDA 12 build,
# ~800 MB) once into $DT_COMPAT_CACHE (default /tmp/dtorch-torch-compat) and
# unpacks its headers, CMake files and libraries there; not part of .ci/run or
# tools/test.sh for that reason. Needs the CUDA toolkit (nvcc): a CUDA torch's
# CMake config requires one. Two stand-ins, for this check build only:
#   - torch 2.4's config insists on CUDA::nvToolsExt, which CUDA >= 12.9
#     toolkits no longer ship (header-only NVTX 3): an empty target stands in;
#   - the CUDA 12 runtime libraries the wheel's libtorch_cuda.so needs are
#     not installed (pip would fetch them): links pass
#     -Wl,--allow-shlib-undefined.
#
# Environment: DT_COMPAT_CACHE, DT_JOBS (default nproc), DT_COMPAT_BUILD
# (default build-compat-VERSION).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ver=${1:-2.4.0}
cache=${DT_COMPAT_CACHE:-/tmp/dtorch-torch-compat}/$ver
build=${DT_COMPAT_BUILD:-build-compat-$ver}
jobs=${DT_JOBS:-$(nproc)}
py=python3

mkdir -p "$cache"
if [ ! -f "$cache/x/torch/share/cmake/Torch/TorchConfigVersion.cmake" ]; then
    if ! ls "$cache"/torch-"$ver"-*.whl >/dev/null 2>&1; then
        echo "torch_compat_check: downloading torch $ver (cp311, manylinux) into $cache"
        "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
            --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
            -d "$cache" "torch==$ver"
    fi
    echo "torch_compat_check: unpacking headers, CMake files and libraries"
    rm -rf "$cache/x"
    "$py" - "$cache" "$ver" <<'EOF'
import glob, sys, zipfile
cache, ver = sys.argv[1], sys.argv[2]
(whl,) = glob.glob(f"{cache}/torch-{ver}-*.whl")
with zipfile.ZipFile(whl) as z:
    z.extractall(f"{cache}/x", [n for n in z.namelist()
                                 if n.startswith(("torch/include/", "torch/share/", "torch/lib/"))
                                 or n == "torch/version.py"])
EOF
fi
echo "torch_compat_check: $(grep -E '^(__version__|cuda)' "$cache/x/torch/version.py" | tr '\n' ' ')"

# An empty CUDA::nvToolsExt for configs that insist on it (see above).
shim=$cache/nvtx_standin.cmake
cat >"$shim" <<'EOF'
if(NOT TARGET CUDA::nvToolsExt)
  add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
endif()
EOF

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_WITH_PYTHON=OFF -DDT_BUILD_TESTS=OFF \
    -DDT_TORCH_CMAKE_PREFIX="$cache/x/torch/share/cmake" -DCMAKE_PROJECT_INCLUDE="$shim" \
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--allow-shlib-undefined -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
    >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
grep -E '^-- dtorch: (LibTorch|torch=)' "$build/configure.log" | sed 's/^-- /torch_compat_check: /'
cmake --build "$build" -j"$jobs"
echo "torch_compat_check: torch $ver: libdtorch built and linked ($build/)"
