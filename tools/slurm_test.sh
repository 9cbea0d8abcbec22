#!/usr/bin/env bash
# A real Slurm on this host, for dtorch.cluster.init() (docs/cluster.md, "Launchers"): installs
# Debian's slurmctld, slurmd and munge when they are missing (apt-get), writes a one-host
# slurm.conf in a temporary folder (nothing under /etc is changed: SLURM_CONF points at it),
# starts munged, slurmctld and slurmd there on ports of their own, runs
#     srun -n 3 PYTHON examples/llama/run.py --cluster env ...
# (task 0 the main node, tasks 1 and 2 worker nodes) and checks that it printed tokens equal to one
# device's and that every task exited 0, then stops the daemons it started (by their pids) and
# removes the folder, whatever happened. Every step has a timeout: the whole script ends within
# about 15 minutes even when a daemon hangs (most of it apt-get's, once).
#
#     tools/slurm_test.sh [PYTHON]       # default: .venv/bin/python of this tree, else python3
#
# Exit status: 0 passed, 1 failed, 77 skipped (not root, or the packages cannot be installed; the
# reason printed). Runs as root on a fresh Debian 12 (bookworm); tests/python/test_slurm.py calls it.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${1:-}"
if [ -z "$PY" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi
skip() { echo "slurm_test: SKIP: $*"; exit 77; }
fail() { echo "slurm_test: FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (it starts munged, slurmctld and slurmd)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null ||
    ! command -v srun >/dev/null; then
    command -v apt-get >/dev/null || skip "slurmctld, slurmd, munge are not installed and there is no apt-get"
    echo "slurm_test: installing slurmctld slurmd munge slurm-client (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -qq >/dev/null 2>&1
    timeout 600 apt-get install -y -qq slurmctld slurmd munge slurm-client >/dev/null 2>&1 ||
        skip "apt-get could not install slurmctld slurmd munge slurm-client (no network or no such packages)"
fi

W="$(mktemp -d /tmp/dtorch-slurm.XXXXXX)"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do # at most 10 s each, then SIGKILL
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# Runs "$@" in the background and waits for it, so that a signal to this script (its own timeout)
# ends it at once (bash runs traps only between foreground commands); cleanup stops it too.
bg() {
    "$@" &
    local p=$!
    PIDS+=("$p")
    wait "$p"
}

HOST="$(hostname -s)"
# At least 4 CPUs declared (config_overrides: slurmd takes the figure), so 3 tasks fit one host.
CPUS="$(nproc)"
[ "$CPUS" -ge 4 ] || CPUS=4
mkdir -p "$W/state" "$W/spool" "$W/munge"
chmod 700 "$W/munge"
# munged wants a key only its user reads; the package made one, else make one.
KEY=/etc/munge/munge.key
if [ ! -r "$KEY" ]; then
    KEY="$W/munge/munge.key"
    head -c 1024 /dev/urandom >"$KEY"
    chmod 400 "$KEY"
fi
timeout 20 munged --force --socket="$W/munge/socket" --key-file="$KEY" --pid-file="$W/munge/pid" \
    --log-file="$W/munge/log" --seed-file="$W/munge/seed" || fail "munged did not start: $(cat "$W/munge/log" 2>/dev/null)"
for _ in $(seq 100); do [ -s "$W/munge/pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$W/munge/pid")")

# Ports of our own (not the default 6817/6818), so a Slurm already on the host is left alone.
PORT_CTLD=$((17000 + RANDOM % 2000))
cat >"$W/slurm.conf" <<EOF
ClusterName=dtorchtest
SlurmctldHost=$HOST
SlurmctldPort=$PORT_CTLD
SlurmdPort=$((PORT_CTLD + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/socket
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
SlurmdParameters=config_overrides
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=30 State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$W/slurm.conf"

slurmctld -D -i >"$W/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D >"$W/slurmd.out" 2>&1 &
PIDS+=($!)
ready=0
for _ in $(seq 120); do # 60 s for the node to be idle
    if timeout 5 sinfo -h -N -o '%t' 2>/dev/null | grep -q idle; then ready=1; break; fi
    sleep 0.5
done
if [ "$ready" != 1 ]; then
    echo "--- slurmctld log"; tail -20 "$W/slurmctld.log" "$W/slurmctld.out" 2>/dev/null
    echo "--- slurmd log"; tail -20 "$W/slurmd.log" "$W/slurmd.out" 2>/dev/null
    fail "the Slurm node did not become idle within 60 s"
fi
echo "slurm_test: Slurm up on $HOST ($CPUS CPUs); srun -n 3 examples/llama/run.py --cluster env"

export DTORCH_CLUSTER_TOKEN="slurm-test-$RANDOM$RANDOM"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT" || fail "no $ROOT"
# --kill-on-bad-exit: a task that fails ends the others at once; timeouts bound both sides.
bg timeout 420 srun -n 3 --overcommit --kill-on-bad-exit=1 --time=8 --label "$PY" examples/llama/run.py \
    --cluster env --mesh dp=1,tp=2,pp=2 --max-new-tokens 6 --node-timeout 120 >"$W/run.out" 2>&1
rc=$?
cat "$W/run.out"
[ "$rc" = 0 ] || fail "srun exited $rc"
grep -q "^0: matches single-device: True" "$W/run.out" || fail "task 0 did not print equal tokens"
[ "$(grep -c 'matches single-device' "$W/run.out")" = 1 ] || fail "a rank other than 0 ran the program"
grep -q "^0: worker node 1 " "$W/run.out" || fail "the main node did not list 2 worker nodes"
echo "slurm_test: PASS"
