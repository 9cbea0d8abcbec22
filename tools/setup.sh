#!/usr/bin/env bash
# Makes a fresh machine ready to build, test and run dtorch, then builds it.
# Safe to run again: a second run installs nothing and rebuilds only what changed.
#
#   1. Debian packages, only for what pip does not provide (compiler, CMake,
#      pkg-config, ZeroMQ, valgrind), and only those missing (root or sudo).
#   2. The project's virtual environment .venv (python3 on PATH, -m venv) with
#      requirements.txt (torch==2.13.0 and the libraries the tests, benchmarks
#      and examples use); skipped while requirements.txt is unchanged.
#   2b. With nvcc on the PATH (a CUDA toolkit), requirements-cuda.txt too:
#      the nvidia-nccl-cu13 wheel, whose header the NCCL comm is compiled
#      against (docs/cuda.md); skipped while that file is unchanged.
#   3. A .pth file in .venv pointing at python/, so `import dtorch` works from
#      any directory with .venv/bin/python (no PYTHONPATH), the development
#      tree's sources and the extension built next to them.
#   4. CMake configure + build into build/ against .venv's torch.
#
# Environment:
#   DT_VENV        the virtual environment (default: .venv)
#   DT_BUILD_DIR   build folder (default: build)
#   DT_BUILD_TYPE  CMake build type (default: RelWithDebInfo)
#   DT_JOBS        parallel build jobs (default: nproc)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# ------------------------------------------------------------ 1. Debian
packages=(cmake build-essential pkg-config libzmq3-dev valgrind clang-format)
missing=()
for p in "${packages[@]}"; do
    if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    echo "setup.sh: installing Debian packages: ${missing[*]}"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2
            exit 1
        fi
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ------------------------------------------------------ 2. the venv
venv=${DT_VENV:-$root/.venv}
if [ ! -x "$venv/bin/python" ]; then
    echo "setup.sh: creating $venv with $(command -v python3)"
    python3 -m venv "$venv"
fi
py=$venv/bin/python
stamp=$venv/.dtorch-requirements
if ! cmp -s requirements.txt "$stamp"; then
    echo "setup.sh: pip install -r requirements.txt into $venv"
    "$py" -m pip install -q --disable-pip-version-check -r requirements.txt
    cp requirements.txt "$stamp"
fi
cuda_stamp=$venv/.dtorch-requirements-cuda
if command -v nvcc >/dev/null 2>&1 && ! cmp -s requirements-cuda.txt "$cuda_stamp"; then
    echo "setup.sh: nvcc found: pip install -r requirements-cuda.txt into $venv"
    "$py" -m pip install -q --disable-pip-version-check -r requirements-cuda.txt
    cp requirements-cuda.txt "$cuda_stamp"
fi

# ------------------------------------------------- 3. import dtorch from anywhere
site=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$root/python" >"$site/dtorch-dev.pth"

# ------------------------------------------------------------ 4. build
build_dir=${DT_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${DT_BUILD_TYPE:-RelWithDebInfo}" -DDT_PYTHON="$py" >/dev/null
cmake --build "$build_dir" -j"${DT_JOBS:-$(nproc)}"
echo "setup.sh: built into $build_dir/ against torch $("$py" -c 'import torch; print(torch.__version__)') ($py)"
