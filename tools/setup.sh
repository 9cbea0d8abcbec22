#!/usr/bin/env bash
# Installs what dtorch needs from Debian's archive (only what is missing), then
# configures and builds the project into build/. Safe to run again: a second run
# installs nothing and rebuilds only what changed.
#
#   tools/setup.sh            # install + configure + build
#
# Environment:
#   DT_BUILD_DIR   build folder (default: build)
#   DT_BUILD_TYPE  CMake build type (default: RelWithDebInfo)
#   DT_JOBS        parallel build jobs (default: nproc)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(cmake build-essential libtorch-dev python3-torch python3-dev python3-numpy
          python3-pytest libzmq3-dev valgrind)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$p")
    fi
done

if ((${#missing[@]})); then
    echo "setup.sh: installing ${missing[*]}"
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
else
    echo "setup.sh: all Debian packages present"
fi

# The python3 first on PATH may be another interpreter without torch; Debian's
# torch lives in /usr/bin/python3.
torch_python=""
for py in /usr/bin/python3 "$(command -v python3 || true)"; do
    if [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import torch' >/dev/null 2>&1; then
        torch_python=$py
        break
    fi
done
if [ -z "$torch_python" ]; then
    echo "setup.sh: no Python interpreter can import torch (is python3-torch installed?)" >&2
    exit 1
fi

build_dir=${DT_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${DT_BUILD_TYPE:-RelWithDebInfo}" -DDT_PYTHON="$torch_python"
cmake --build "$build_dir" -j"${DT_JOBS:-$(nproc)}"
echo "setup.sh: built into $build_dir/ (Python with torch: $torch_python)"
