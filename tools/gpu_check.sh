#!/usr/bin/env bash
# The GPU checks of issue 12, as one prepared script for a machine with a GPU
# (docs/cuda.md): at most 8 minutes in all (DT_GPU_DEADLINE), a time limit on
# every step, one line per figure, then a summary. Written for the device
# machine: its own python3 with torch 2.11+cu130, no network, nvcc and CMake
# present. First run on an H200 on 2026-12-04 (docs/cuda.md "What ran on a
# GPU"): the build, smoke, test_cuda, bench and sd3m steps work there.
#
#   0. probe      torch, its CUDA, the GPU (or "NO GPU"); wheels from .whl/
#                 (tools/gpu_wheels.sh: diffusers, which the device lacks)
#                 installed into a private folder on PYTHONPATH
#   1. build      CMake into build-gpu/ against python3's torch; the CUDA shim
#                 must be linked (torch_cuda=ON nccl=ON in the configure line);
#                 only the extension and dtorch-node are built (-j nproc)
#   2. smoke      a cuda mesh is satisfiable; tests/python/test_cuda.py;
#                 cluster_cuda: tests/python/test_cluster_cuda.py on the GPU
#                 (worker nodes' CUDA devices, data between nodes staged
#                 through host memory), when libzmq travelled in .zmq/
#                 (tools/gpu_zmq.sh; the image has none)
#   3. suite x8   the Python suite on cuda meshes, one GPU as 8 logical devices
#                 (DTORCH_TEST_DEVICE=cuda: tests/python/conftest.py turns cpu
#                 meshes into cuda ones and torch's default device into cuda)
#   4. suite x4   the same as 4 logical devices (tests needing ids >= 4 fail)
#   5. bench      bench/pipeline.py --device cuda (goals: P1 <= 0.8, P2 <= 0.25)
#   6. sd3m       bench/sd3_medium.py: an SD3-medium-shaped transformer, bf16,
#                 latents 1x16x128x128, 4 steps, dtorch on cuda:0 against
#                 diffusers eager (goals: time <= 0.95, client <= 0.3, peak
#                 memory <= 0.97; its "sd3m" lines go into the summary)
#   6b. flux      bench/flux.py --mode transformer: a FLUX.1-dev-shaped
#                 transformer, bf16, 1024x1024, 4 steps, against diffusers eager
#                 (goals: time <= 0.9, memory <= 0.97; its "flux" lines go
#                 into the summary)
#   7. moe        bench/moe.py --check: a tiny Mixtral on 8 logical devices (ep4 x
#                 tp2), forward and greedy decode steps against transformers on
#                 the GPU; its "moe check" lines go into the summary
#   7b. userk     user kernels on CUDA: a local_map function on 2 logical
#                 devices runs on the workers' streams, equal to eager; a
#                 two-output one runs once per device; compiled_op's adaLN
#                 through torch.compile (Triton) allclose; "userk" lines
#   7c. cuda_graph  CUDA graphs of repeated run slots (issue 30 item 3, opt-in,
#                 never run on a GPU before): tests/python/test_cuda_graph.py
#                 on cuda meshes (8 logical devices; real graphs, not the CPU
#                 emulation), then bench/cuda_graph.py: tiny Llama greedy
#                 decode per-token time, graphs on vs off vs eager
#                 transformers, on one GPU and on tp8 logical devices,
#                 tokens checked equal (goal: on/torch <= 0.5); "cuda_graph" lines
#   7d. p3prof    bench/cuda_graph.py --p3prof: bench/pipeline.py's P3 (large
#                 ops, 1.55x eager on the first GPU run) under torch.profiler,
#                 dtorch's and torch's top kernels and copies by device time
# Without a GPU (torch.cuda.is_available() False) steps 0-1 run, then the
# no-GPU checks (cuda meshes refused at the call, satisfy False, the
# "torch_cuda" backend registered); it says NO GPU and exits 3.
#
#   tools/gpu_check.sh            run it
#   tools/gpu_check.sh --dry-run  print the steps and their time limits only
#
# Logs: $OUT/gpu_check/NAME.log (OUT unset: /tmp), and summary.txt there; at
# most 8 files (what the device tool brings back: configure.log and build.log
# are removed once the build has passed). Exit: 0 passed, 1 a step
# failed, 3 no GPU (the steps that need none passed), 2 usage.
#
# Environment: DT_GPU_PY (default python3), DT_JOBS (default nproc),
# DT_GPU_BUILD (default build-gpu), DT_GPU_DEADLINE (seconds, default 480),
# DT_GPU_STEPS (names of the steps after the build to run, e.g. "smoke
# test_cuda suite_x8"; default all).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
dry=0
if [ "${1:-}" = "--dry-run" ]; then
    dry=1
elif [ $# -gt 0 ]; then
    echo "usage: tools/gpu_check.sh [--dry-run]" >&2
    exit 2
fi

py=$(command -v "${DT_GPU_PY:-python3}") || {
    echo "gpu_check: no Python '${DT_GPU_PY:-python3}'" >&2
    exit 2
}
jobs=${DT_JOBS:-$(nproc)}
build=${DT_GPU_BUILD:-build-gpu}
deadline=${DT_GPU_DEADLINE:-480}
log=${OUT:-/tmp}/gpu_check
start=$SECONDS
failed=0
lines=()
dry_total=0

# step NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, its output in
# $log/NAME.log; prints "gpu_check: NAME rc=... in ...s". The limit is cut to
# what is left of the deadline; a step with under 5 s left is not started.
step() {
    local name=$1 limit=$2
    shift 2
    case " configure build nogpu ${DT_GPU_STEPS:-$name} " in
    *" $name "*) ;;
    *) return 0 ;;
    esac
    if [ "$dry" = 1 ]; then
        echo "gpu_check: [dry-run] $name (limit ${limit}s): $*"
        dry_total=$((dry_total + limit))
        return 0
    fi
    local left=$((deadline - (SECONDS - start)))
    if [ "$left" -lt 5 ]; then
        echo "gpu_check: $name skipped: the ${deadline}s deadline has passed"
        failed=1
        return 124
    fi
    [ "$limit" -le "$left" ] || limit=$left
    local t0=$SECONDS rc=0
    timeout -k 5 "$limit" "$@" >"$log/$name.log" 2>&1 || rc=$?
    local how=""
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || how=" (TIMED OUT at ${limit}s)"
    echo "gpu_check: $name rc=$rc in $((SECONDS - t0))s$how (log $log/$name.log)"
    [ "$rc" -eq 0 ] || failed=1
    return "$rc"
}

# The pytest summary line of a log ("12 passed, 3 failed in 40.1s"), or why none.
summary() {
    local s
    s=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped)' "$1" | tail -n 1 | tr -d '=')
    echo "${s:-no pytest summary (timed out or crashed: see $1)}"
}

finish() { # finish EXIT_STATUS VERDICT
    for l in "${lines[@]}"; do
        echo "gpu_check: $l"
    done
    echo "gpu_check: $2 in $((SECONDS - start))s"
    { printf '%s\n' "${lines[@]}"; echo "$2 in $((SECONDS - start))s"; } >"$log/summary.txt"
    exit "$1"
}

# ------------------------------------------------------------ 0. probe
gpu=1
if [ "$dry" = 0 ]; then
    rm -rf "$log" && mkdir -p "$log"
    probe=$(timeout -k 5 60 "$py" -c 'import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, end=" ")
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU")' 2>&1)
    echo "gpu_check: $probe ($py)"
    lines+=("probe: $probe")
    case $probe in
    *"NO GPU") gpu=0 ;;
    torch*) ;;
    *)
        lines+=("probe: $py cannot import torch")
        finish 1 FAILED
        ;;
    esac
    # Wheels the device image lacks travel in .whl/ (tools/gpu_wheels.sh); the
    # device README's recipe: no index, no deps, a private target folder.
    if ls .whl/*.whl >/dev/null 2>&1; then
        site=/tmp/dtorch-gpu-site
        if "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" .whl/*.whl >/tmp/dtorch-gpu-wheels.log 2>&1; then
            export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
            lines+=("wheels: $(cd .whl && echo *.whl)")
        else
            cp /tmp/dtorch-gpu-wheels.log "$log/wheels.log"
            lines+=("wheels: install FAILED (see $log/wheels.log)")
            failed=1
        fi
    fi
    "$py" -c 'import diffusers' 2>/dev/null ||
        lines+=("note: no diffusers (tools/gpu_wheels.sh, carry .whl): test_sd3 and sd3m will fail")
fi

# ------------------------------------------------------------ 1. build
# The same configure line as a development build (tools/setup.sh) against
# this Python; only the targets the Python suite needs are built. libzmq, which
# the image lacks, comes from .zmq/ when it travelled (tools/gpu_zmq.sh): found
# there at configure, link and run time, never installed into /.
zmq_args=()
if [ -e .zmq/lib/libzmq.so.5 ] && [ -e .zmq/include/zmq.h ]; then
    zmq_args=(-DZMQ_LIBRARY="$PWD/.zmq/lib/libzmq.so.5" -DZMQ_INCLUDE_DIR="$PWD/.zmq/include")
    export LD_LIBRARY_PATH=$PWD/.zmq/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    lines+=("zmq: carried in .zmq/ ($(cd .zmq/lib && echo *.so*))")
fi
step configure 90 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_PYTHON="$py" "${zmq_args[@]}"
if [ "$dry" = 0 ]; then
    status=$(grep -o 'torch=.*' "$log/configure.log" | head -n 1)
    lines+=("build: ${status:-no dtorch status line (configure failed: see $log/configure.log)}")
    case $status in
    *"nccl=ON torch_cuda=ON"*) ;;
    *)
        lines+=("build: the CUDA shim is not built (needs cuda=ON nccl=ON torch_cuda=ON)")
        finish 1 FAILED
        ;;
    esac
fi
targets=(dtorch_python dtorch_node)
if [ "$dry" = 0 ]; then
    have=$(cmake --build "$build" --target help 2>/dev/null)
    if ! grep -q dtorch_python <<<"$have"; then
        lines+=("build: no extension target (CMake found no Python development files for $py)")
        finish 1 FAILED
    fi
    grep -q dtorch_node <<<"$have" || targets=(dtorch_python)
fi
# The extension and dtorch-node are written into python/dtorch/ by whichever
# build folder links them last; remove them so they come from this one (a
# rehearsal beside a development build/ would otherwise keep build/'s).
[ "$dry" = 1 ] || rm -f python/dtorch/_C*.so python/dtorch/bin/dtorch-node
brc=0
step build 200 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || brc=$?
if [ "$dry" = 0 ]; then
    [ "$brc" = 0 ] || finish 1 FAILED
    # Passed: its lines are in the summary; the files the device tool brings back are few (8).
    rm -f "$log/configure.log" "$log/build.log"
    lib=$(ls "$build"/libdtorch.so.* "$build"/libdtorch.so 2>/dev/null | head -n 1)
    needed=$(readelf -d "$lib" 2>/dev/null | grep -oE 'lib(c10_cuda|torch_cuda|cudart)[^]]*' | tr '\n' ' ')
    lines+=("link: $lib needs ${needed:-none of c10_cuda, torch_cuda, cudart}")
fi

export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

# ------------------------------------------------------------ no GPU
if [ "$gpu" = 0 ]; then
    step nogpu 60 "$py" -c '
import dtorch
from dtorch import DeviceMesh
g = dtorch.Graph(backend="torch_cuda")  # registered: the shim is linked in
m = DeviceMesh("cuda", [0])
assert not g.satisfy(m) and not dtorch.default_graph.satisfy(m), "a cuda mesh is satisfiable with no GPU"
try:
    dtorch.zeros(4, device_mesh=m)
except RuntimeError as e:
    print("nogpu: refused at the call:", str(e).splitlines()[0])
else:
    raise SystemExit("nogpu: a cuda mesh ran with no GPU")
'
    step test_cuda 60 "$py" -m pytest -q -p no:cacheprovider tests/python/test_cuda.py
    lines+=("$(grep '^nogpu:' "$log/nogpu.log" || echo "nogpu: FAILED (see $log/nogpu.log)")")
    lines+=("test_cuda: $(summary "$log/test_cuda.log")")
    lines+=("NO GPU: torch.cuda.is_available() is False; the GPU steps (smoke, suite x8/x4, bench, sd3m, flux) did not run")
    [ "$failed" = 0 ] && finish 3 "NO GPU (build and no-GPU checks passed)"
    finish 1 "FAILED (and NO GPU)"
fi

# ------------------------------------------------------------ 2. smoke
step smoke 45 "$py" -c '
import torch, dtorch
from dtorch import DeviceMesh
m = DeviceMesh("cuda", [0])
assert dtorch.default_graph.satisfy(m), "cuda:0 not satisfiable"
x = torch.randn(256, 256, device="cuda")
y = (dtorch.from_torch(x, m) @ dtorch.from_torch(x, m)).to_torch()
print("smoke: equal", torch.equal(y, x @ x), y.device)
'
step test_cuda 45 "$py" -m pytest -q -p no:cacheprovider tests/python/test_cuda.py
# CUDA devices on worker nodes (issue 13 items 1-2): dtorch-node processes on this
# machine, every process's logical devices on its GPU. Needs the cluster (zmq=ON).
if [ "$dry" = 1 ] || grep -q 'zmq=ON' <<<"${status:-}"; then
    crc=0
    step cluster_cuda 90 "$py" -X faulthandler -m pytest -v -p no:cacheprovider -rfE tests/python/test_cluster_cuda.py ||
        crc=$?
    [ "$dry" = 1 ] || lines+=("cluster_cuda: $(summary "$log/cluster_cuda.log")")
    # A crash (a signal: rc 128 + N, 139 a segfault) again under cuda-gdb (on the image; it
    # debugs host code too), which prints each thread's C stack where the signal came.
    if [ "$dry" = 1 ] || { [ "$crc" -gt 128 ] && [ "$crc" -ne 137 ] && command -v cuda-gdb >/dev/null; }; then
        step cluster_gdb 120 cuda-gdb -q -batch -ex 'set pagination off' -ex 'set confirm off' \
            -ex 'handle SIGPIPE SIGUSR1 SIGUSR2 nostop noprint' -ex run -ex 'info threads' \
            -ex 'thread apply all bt 40' --args "$py" -m pytest -x -v -p no:cacheprovider \
            tests/python/test_cluster_cuda.py
        [ "$dry" = 1 ] || lines+=("cluster_gdb: $(grep -m1 -E 'received signal|exited normally|exited with code' "$log/cluster_gdb.log" || echo 'no signal line')")
    fi
else
    lines+=("cluster_cuda: not run: no libzmq (tools/gpu_zmq.sh here, carry .zmq)")
fi
if [ "$dry" = 0 ]; then
    lines+=("smoke: $(grep '^smoke:' "$log/smoke.log" 2>/dev/null || echo failed)")
    lines+=("test_cuda: $(summary "$log/test_cuda.log")")
    # At most 8 files come back: the smoke log only when it failed.
    grep -q '^smoke: equal True' "$log/smoke.log" 2>/dev/null && rm -f "$log/smoke.log"
fi

# ------------------------------------------------------------ 3-4. suite
# pytest-xdist (on the device image) spreads the files over processes when present;
# pytest-timeout (also there) ends a hung test instead of the whole step. Failures
# are listed one a line (-rfE) with short tracebacks, so the log says what broke.
popts=(-q -p no:cacheprovider --tb=short -rfE)
if [ "$dry" = 1 ] || "$py" -c 'import xdist' 2>/dev/null; then
    popts+=(-n 8)
fi
# The thread method: a test blocked in C (a wait that never returns to Python) is ended too,
# its stacks dumped and its worker replaced.
if [ "$dry" = 0 ] && "$py" -c 'import pytest_timeout' 2>/dev/null; then
    popts+=(--timeout 60 --timeout-method=thread)
fi
# The cluster tests start dtorch-node processes with CPU devices and have a GPU step of
# their own (cluster_cuda); under the cuda harness they would only fail or wait.
cluster_ignore=()
for f in tests/python/test_cluster*.py; do
    cluster_ignore+=("--ignore=$f")
done
suite() { # suite N LIMIT
    rm -f "$log/suite_x$1.fails.txt"
    step "suite_x$1" "$2" env COLUMNS=240 DTORCH_TEST_DEVICE=cuda DTORCH_DTENSOR_IN_SAME_DEVICE=1 \
        DTORCH_TEST_FAILLOG="$log/suite_x$1.fails.txt" \
        DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE="$1" \
        "$py" -m pytest "${popts[@]}" "${cluster_ignore[@]}" tests/python
    if [ "$dry" = 0 ] && [ -f "$log/suite_x$1.log" ]; then
        lines+=("suite on cuda, 1 GPU as $1: $(summary "$log/suite_x$1.log")")
        # The whole log can pass the 16 MiB a file the device tool brings back: a digest (each
        # cause once, with the tests it broke) and the log compressed.
        "$py" tools/pytest_digest.py "$log/suite_x$1.log" >"$log/suite_x$1.digest.txt" 2>&1
        gzip -f "$log/suite_x$1.log"
    fi
}
suite 8 "${DT_GPU_SUITE_S:-150}"

# ------------------------------------------------------------ 5. bench
step bench 45 env DTORCH_DTENSOR_IN_SAME_DEVICE=1 DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=2 \
    "$py" bench/pipeline.py --device cuda --n 5000 --repeat 3 --p3-repeat 5
if [ "$dry" = 0 ]; then
    while IFS= read -r l; do
        lines+=("bench $l")
    done < <(grep -E '^P[0-9]' "$log/bench.log")
fi

# figures NAME: the lines of $log/NAME.log that start with "NAME " go into the summary.
figures() {
    [ "$dry" = 1 ] && return
    local found
    found=$(grep -E "^$1 " "$log/$1.log" 2>/dev/null)
    if [ -n "$found" ]; then
        while IFS= read -r l; do
            lines+=("$l")
        done <<<"$found"
    else
        lines+=("$1: no figure lines (see $log/$1.log)")
    fi
}

# ------------------------------------------------------------ 6. sd3m
# SD3-medium shapes end to end (issue 12 item 6): one GPU, no virtualisation.
step sd3m 120 "$py" bench/sd3_medium.py --device cuda --steps 4 --repeat 3
figures sd3m

# ------------------------------------------------------------ 6b. flux
# A FLUX.1-dev-shaped transformer (19 double and 38 single blocks, 24 heads x 128; two bf16 copies
# are 47 GB) at 1024x1024 (4096 image + 512 text tokens), 4 steps, against diffusers eager (issue 33).
step flux 150 "$py" bench/flux.py --mode transformer --device cuda --steps 4 --repeat 2
figures flux

# ------------------------------------------------------------ 7. moe
# Mixture of experts (issue 34): a tiny Mixtral (8 experts, top 2) on 8 logical devices of
# one GPU, ep4 x tp2 (two experts a rank, each split over tp; the tokens dispatched by
# all-to-alls), its forward and 8 greedy decode steps against transformers on the GPU.
step moe 60 env DTORCH_DTENSOR_IN_SAME_DEVICE=1 DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=8 \
    "$py" bench/moe.py --check --device cuda --mesh ep4,tp2
if [ "$dry" = 0 ]; then
    moe=$(grep -E '^moe check:' "$log/moe.log" 2>/dev/null)
    if [ -n "$moe" ]; then
        while IFS= read -r l; do
            lines+=("$l")
        done <<<"$moe"
    else
        lines+=("moe check: no lines (see $log/moe.log)")
    fi
    grep -q '^moe check: PASSED' "$log/moe.log" 2>/dev/null && rm -f "$log/moe.log"
fi

# ------------------------------------------------------------ 7b. userk
# User kernels on CUDA (issue 31): a local_map function runs on each device's worker stream
# (torch's current stream inside it is the worker's, not the default one), equal to eager torch;
# a two-output function once per device; compiled_op.layer_norm_mul_add through torch.compile
# (Triton) allclose to eager. Two logical devices of one GPU.
step userk 90 env DTORCH_DTENSOR_IN_SAME_DEVICE=1 DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=2 "$py" -c '
import threading, torch, dtorch, torch.nn.functional as F
from dtorch import DeviceMesh, Shard
m = DeviceMesh("cuda", [0, 1])
seen, lock = [], threading.Lock()
def act(t):
    with lock:
        seen.append((t.device.type, torch.cuda.current_stream().cuda_stream, torch.cuda.default_stream().cuda_stream))
    return torch.special.erf(t) * torch.sigmoid(t) + torch.log1p(t.abs())
a = torch.randn(1024, 512, device="cuda")
y = dtorch.local_map(act, [Shard(0)])(dtorch.from_torch(a, m, [Shard(0)])).to_torch()
real = [s for s in seen if s[0] == "cuda"]
on_worker = len(real) == 2 and all(cur != 0 and cur != dflt for _, cur, dflt in real)
print("userk equal", torch.equal(y, act(a)), "on the worker stream", on_worker)
calls = []
def two(t):
    if t.device.type != "meta":
        with lock:
            calls.append(1)
    return t * 2, t.sum(-1)
p, q = dtorch.local_map(two, ([Shard(0)], [Shard(0)]))(dtorch.from_torch(a, m, [Shard(0)]))
print("userk two outputs equal", torch.equal(p.to_torch(), a * 2) and torch.equal(q.to_torch(), a.sum(-1)),
      "runs", len(calls))
x, sc, sh = torch.randn(2, 256, 512, device="cuda"), torch.randn(2, 1, 512, device="cuda"), torch.randn(2, 1, 512, device="cuda")
d = [dtorch.from_torch(t, m, [Shard(0)]) for t in (x, sc, sh)]
on = dtorch.ExecuteConfig(compile_fused_ops=True)
got = dtorch.compiled_op.layer_norm_mul_add(*d, execute_config=on).to_torch()
want = F.layer_norm(x, (512,), eps=1e-6) * (1 + sc) + sh
print("userk compiled layer_norm_mul_add allclose", torch.allclose(got, want, rtol=1e-4, atol=1e-4),
      "kernels", len(dtorch.compiled_op.compiled_kernels()))
'
figures userk

# ------------------------------------------------------------ 7c. cuda_graph
# CUDA graphs of repeated run slots (issue 30 item 3; docs/cuda.md "CUDA graphs"): the test file on
# cuda meshes (the suite's conftest maps its cpu meshes onto the GPU), where the captures are real
# CUDA graphs; then the decode figures. Alone: DT_GPU_STEPS="smoke cuda_graph p3prof".
step cuda_graph 90 env DTORCH_DTENSOR_IN_SAME_DEVICE=1 DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=8 \
    bash -c 'rc=0
DTORCH_TEST_DEVICE=cuda "$0" -m pytest -q -p no:cacheprovider tests/python/test_cuda_graph.py || rc=1
"$0" bench/cuda_graph.py --device cuda --long 40 --short 8 --repeat 3 --tp 8 || rc=1
exit $rc' "$py"
if [ "$dry" = 0 ]; then
    while IFS= read -r l; do
        lines+=("cuda_graph $l")
    done < <(grep -E '^(G[12] |[0-9]+ (passed|failed))' "$log/cuda_graph.log")
fi

# ------------------------------------------------------------ 7d. p3prof
# Where the time of large ops on a CUDA mesh goes (P3 took 1.55x eager torch on the first GPU run):
# pipeline.py's P3 under torch.profiler, dtorch's and torch's tables in the log.
step p3prof 60 "$py" bench/cuda_graph.py --device cuda --p3prof --rows 20
if [ "$dry" = 0 ]; then
    while IFS= read -r l; do
        lines+=("p3prof $l")
    done < <(grep -E '^P3 ' "$log/p3prof.log")
fi

# ------------------------------------------------------------ 8. suite x4
# Last: as 4 logical devices, the tests that need ids >= 4 fail by design.
suite 4 60

# ------------------------------------------------------------ summary
if [ "$dry" = 1 ]; then
    echo "gpu_check: [dry-run] the GPU path's limits add up to ${dry_total}s (the no-GPU path's steps" \
        "nogpu and test_cuda not counted), cut to the ${deadline}s deadline; logs would go to $log/"
    exit 0
fi
finish "$failed" "$([ "$failed" = 0 ] && echo PASSED || echo FAILED)"
