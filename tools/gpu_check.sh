#!/usr/bin/env bash
# The GPU checks of issue 12, as one prepared script for a machine with a GPU
# (docs/cuda.md): at most 8 minutes, one line per figure, then a summary.
# Written for the device machine: its own python3 with torch 2.11+cu130,
# no venv, no network, nvcc and CMake present. NOT YET RUN ON A GPU.
#
#   1. build      CMake into build-gpu/ against python3's torch (the CUDA shim
#                 must be linked: torch_cuda=ON, nccl=ON in the configure line)
#   2. smoke      a cuda mesh is satisfiable; tests/python/test_cuda.py
#   3. suite x8   the Python suite on cuda meshes, one GPU as 8 logical devices
#                 (DTORCH_TEST_DEVICE=cuda: tests/python/conftest.py turns cpu
#                 meshes into cuda ones and torch's default device into cuda)
#   4. suite x4   the same as 4 logical devices (tests needing ids >= 4 fail)
#   5. bench      bench/pipeline.py --device cuda (goals: P1 <= 0.8, P2 <= 0.25)
#
#   tools/gpu_check.sh            run it
#   tools/gpu_check.sh --dry-run  print the steps and their time limits only
#
# Environment: DT_GPU_PY (default python3), DT_JOBS (default nproc),
# DT_GPU_BUILD (default build-gpu).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
dry=0
if [ "${1:-}" = "--dry-run" ]; then
    dry=1
elif [ $# -gt 0 ]; then
    echo "usage: tools/gpu_check.sh [--dry-run]" >&2
    exit 2
fi

py=${DT_GPU_PY:-python3}
jobs=${DT_JOBS:-$(nproc)}
build=${DT_GPU_BUILD:-build-gpu}
log=${OUT:-/tmp}/gpu_check
start=$SECONDS
failed=0
lines=()

# step NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, its output in
# $log/NAME.log; prints "gpu_check: NAME rc=... in ...s".
step() {
    local name=$1 limit=$2
    shift 2
    if [ "$dry" = 1 ]; then
        echo "gpu_check: [dry-run] $name (limit ${limit}s): $*"
        return 0
    fi
    local t0=$SECONDS rc=0
    timeout "$limit" "$@" >"$log/$name.log" 2>&1 || rc=$?
    echo "gpu_check: $name rc=$rc in $((SECONDS - t0))s (log $log/$name.log)"
    [ "$rc" -eq 0 ] || failed=1
    return "$rc"
}

# The pytest summary line of a log ("12 passed, 3 failed in 40.1s"), or why none.
summary() {
    local s
    s=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$1" | tail -n 1 | tr -d '=')
    echo "${s:-no pytest summary (timed out or crashed: see $1)}"
}

[ "$dry" = 1 ] || mkdir -p "$log"
if [ "$dry" = 0 ]; then
    echo "gpu_check: $($py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU")' 2>&1)"
fi

# ------------------------------------------------------------ 1. build
step configure 45 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_PYTHON="$(command -v "$py")"
step build 140 cmake --build "$build" -j"$jobs"
if [ "$dry" = 0 ]; then
    lines+=("build: $(grep -o 'torch=.*' "$log/configure.log" | head -n 1)")
fi

export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

# ------------------------------------------------------------ 2. smoke
step smoke 30 "$py" -c '
import torch, dtorch
from dtorch import DeviceMesh
m = DeviceMesh("cuda", [0])
assert dtorch.default_graph.satisfy(m), "cuda:0 not satisfiable"
x = torch.randn(256, 256, device="cuda")
y = (dtorch.from_torch(x, m) @ dtorch.from_torch(x, m)).to_torch()
print("smoke: equal", torch.equal(y, x @ x), y.device)
'
step test_cuda 30 "$py" -m pytest -q -p no:cacheprovider tests/python/test_cuda.py
if [ "$dry" = 0 ]; then
    lines+=("smoke: $(grep '^smoke:' "$log/smoke.log" || echo failed)")
    lines+=("test_cuda: $(summary "$log/test_cuda.log")")
fi

# ------------------------------------------------------------ 3-4. suite
# pytest-xdist (on the device image) spreads the files over processes when present.
xdist=()
if [ "$dry" = 1 ] || "$py" -c 'import xdist' 2>/dev/null; then
    xdist=(-n 8)
fi
for n in 8 4; do
    limit=$((n == 8 ? 120 : 60))
    step "suite_x$n" "$limit" env DTORCH_TEST_DEVICE=cuda DTORCH_DTENSOR_IN_SAME_DEVICE=1 \
        DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE="$n" \
        "$py" -m pytest -q -p no:cacheprovider "${xdist[@]}" tests/python
    if [ "$dry" = 0 ]; then
        lines+=("suite on cuda, 1 GPU as $n: $(summary "$log/suite_x$n.log")")
    fi
done

# ------------------------------------------------------------ 5. bench
step bench 45 env DTORCH_DTENSOR_IN_SAME_DEVICE=1 DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=2 \
    "$py" bench/pipeline.py --device cuda --n 5000 --repeat 3 --p3-repeat 5
if [ "$dry" = 0 ]; then
    while IFS= read -r l; do
        lines+=("bench $l")
    done < <(grep -E '^P[0-9]' "$log/bench.log")
fi

# ------------------------------------------------------------ summary
for l in "${lines[@]}"; do
    echo "gpu_check: $l"
done
if [ "$dry" = 1 ]; then
    echo "gpu_check: [dry-run] limits add up to 470s; logs would go to $log/"
    exit 0
fi
echo "gpu_check: $([ "$failed" = 0 ] && echo PASSED || echo FAILED) in $((SECONDS - start))s"
exit "$failed"
