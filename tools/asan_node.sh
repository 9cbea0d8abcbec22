#!/usr/bin/env bash
# The worker node under AddressSanitizer: builds dtorch-node with -DDT_SANITIZE=address and the
# LibTorch backend (build-asan-node/, no Python extension, so the Python tests keep the regular
# build's _C), then runs cluster test files with DTORCH_NODE_EXECUTABLE pointing at it, so every
# worker node those tests start (by hand, through dtorch.cluster.init's launchers, through
# GraphOption(per_device_per_process=True)) is the sanitized one. Fails when a test fails or when
# any node wrote an ASan/UBSan report (printed). tools/test.sh's asan stage covers the C tests with
# the 'ref' backend only; this covers the node with real kernels, traces and the wire. Not part of
# CI (its build takes minutes): run it after changing src/net/, src/core/records/trace.* or the
# node's side of a feature, and loop it for races that show rarely:
#
#     tools/asan_node.sh [--repeat N] [PYTEST FILES...]   # default: the cluster test files
#
# Found with it: the worker node's trace hand-over sized its message from one count of each
# stream's records and wrote it from a second (docs/decisions.md, "Trace records are taken up to
# one count").
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "asan_node: no $PY: run tools/setup.sh first" >&2; exit 1; }
REPEAT=1
if [ "${1:-}" = "--repeat" ]; then REPEAT="$2"; shift 2; fi
FILES=("$@")
if [ ${#FILES[@]} -eq 0 ]; then
    FILES=(tests/python/test_cluster.py tests/python/test_cluster_launch.py tests/python/test_cluster_trace.py
           tests/python/test_cluster_data.py tests/python/test_cluster_recover.py tests/python/test_per_process.py)
fi
BUILD="$ROOT/build-asan-node"
cd "$ROOT" || exit 1
echo "asan_node: building $BUILD (dtorch-node, -DDT_SANITIZE=address, LibTorch backend)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_PYTHON="$PY" -DDT_WITH_PYTHON=OFF \
    -DDT_SANITIZE=address -DDT_BUILD_TESTS=OFF >/dev/null || exit 1
cmake --build "$BUILD" -j"${DT_JOBS:-$(nproc)}" --target dtorch_node >/dev/null || exit 1
LOGS="$(mktemp -d /tmp/asan-node.XXXXXX)"
wrapper="$LOGS/dtorch-node"
cat >"$wrapper" <<EOF
#!/bin/sh
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:log_path=$LOGS/asan
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$LOGS/ubsan
exec "$BUILD/dtorch-node" "\$@"
EOF
chmod +x "$wrapper"
rc=0
for i in $(seq 1 "$REPEAT"); do
    echo "asan_node: run $i of $REPEAT: pytest ${FILES[*]}"
    DTORCH_NODE_EXECUTABLE="$wrapper" "$PY" -m pytest -q -p no:cacheprovider "${FILES[@]}" || rc=1
    if ls "$LOGS"/asan* "$LOGS"/ubsan* >/dev/null 2>&1; then
        for f in "$LOGS"/asan* "$LOGS"/ubsan*; do echo "asan_node: report $f:"; head -60 "$f"; done
        rc=1
        break
    fi
done
[ $rc = 0 ] && echo "asan_node: PASS (no report from any worker node)" || echo "asan_node: FAIL (logs in $LOGS)"
exit $rc
