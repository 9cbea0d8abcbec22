#!/usr/bin/env bash
# Checks the package as a user gets it: `pip install .` into a fresh virtual
# environment (torch installed first, as for any torch extension), then
# `import dtorch` from / with no PYTHONPATH, and a C program built with
# `pkg-config --cflags --libs dtorch` against the installed library.
# The wheel's build folder (build/pip-*) is kept, so a second run is incremental.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
venv=$root/build/pkg-venv
rm -rf "$venv"
mkdir -p build
python3 -m venv "$venv"
py=$venv/bin/python

echo "check_package.sh: fresh venv $venv: pip install torch, then pip install ."
pip_quiet() { # pip's output only when it fails
    "$py" -m pip install -q --disable-pip-version-check -c requirements.txt "$@" >build/pkg-pip.log 2>&1 ||
        { cat build/pkg-pip.log >&2; return 1; }
}
pip_quiet torch numpy
pip_quiet "$root"

echo "check_package.sh: import dtorch from /"
(cd / && env -u PYTHONPATH "$py" - <<'PY'
import dtorch, torch
assert "site-packages" in dtorch.__file__, dtorch.__file__
mesh = dtorch.DeviceMesh("cpu", [0, 1])
x = dtorch.Tensor(torch.arange(6.0).reshape(3, 2), device_mesh=mesh, placements=[dtorch.Shard(0)])
y = (x * 2).sum(dim=0).redistribute(placements=[dtorch.Replicate()])
assert torch.equal(y.to_torch(), (torch.arange(6.0).reshape(3, 2) * 2).sum(dim=0)), y
print("check_package.sh: import dtorch OK:", dtorch.__version__, dtorch.__file__)
PY
)

echo "check_package.sh: the installed dtorch-node runs"
(cd / && env -u PYTHONPATH "$py" - <<'PY'
import subprocess
import dtorch.node
exe = dtorch.node.executable()
assert "site-packages" in exe, exe
out = subprocess.run([exe, "--version"], check=True, capture_output=True, text=True, timeout=60).stdout
print("check_package.sh:", out.strip(), exe)
PY
)

echo "check_package.sh: a C program with pkg-config --cflags --libs dtorch"
export PKG_CONFIG_PATH=$venv/lib/pkgconfig
flags=$(pkg-config --cflags --libs dtorch)
echo "check_package.sh: $flags"
cc -std=c11 -Wall -Wextra -Werror examples/quickstart.c $flags -o build/pkg-quickstart
(cd / && "$root/build/pkg-quickstart" >/dev/null)

echo "check_package.sh: a C program with find_package(dtorch)"
cmake_dir=build/pkg-cmake
rm -rf "$cmake_dir" && mkdir -p "$cmake_dir/src"
cat >"$cmake_dir/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(dtorch_consumer C)
find_package(dtorch REQUIRED)
add_executable(quickstart ${QUICKSTART})
target_link_libraries(quickstart PRIVATE dtorch::dtorch)
CM
cmake -S "$cmake_dir/src" -B "$cmake_dir/build" -DCMAKE_PREFIX_PATH="$venv" \
    -DQUICKSTART="$root/examples/quickstart.c" >/dev/null
cmake --build "$cmake_dir/build" >/dev/null
(cd / && "$root/$cmake_dir/build/quickstart" >/dev/null)
echo "check_package.sh: OK"
