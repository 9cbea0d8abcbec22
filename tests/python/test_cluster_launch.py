"""Clusters started by a launcher (``dtorch.cluster.init``, docs/cluster.md "Launchers"): the
launcher's variables read into one ``Launch`` (torchrun's, Slurm's, Slurm's host lists checked
against ``scontrol show hostnames`` where Slurm is installed), then whole jobs: processes given
torchrun's variables by hand, the real ``torchrun`` running examples/llama/run.py, and the
refusals (a wrong token, a second main node on a port, a worker node of another job or of another
dtorch version) each a message and a non-zero exit; as root, ranks in two network namespaces.
The real Slurm test is tools/slurm_test.sh (tools/test.sh's stage 5b). Every child is killed in
teardown; every wait is bounded."""

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from dtorch import _C
from dtorch._launch import Launch, detect, expand_hostlist, read_token
from dtorch.node import executable
from helpers import communicate_within, reap
from test_cluster import netns_pair  # noqa: F401  (a fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
zmq = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")

# ------------------------------------------------------------------ host lists


@pytest.mark.parametrize("text, hosts", [
    ("node07", ["node07"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]),
    ("x-[3]", ["x-3"]),
    ("[0-1]", ["0", "1"]),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, why", [
    ("", "empty"), ("node[1-", "without its"), ("node1]", "without its"), ("n[3-1]", "backwards"),
    ("n[a-b]", "not a number"), ("n[1-2]],m", "without its"), ("a,,b", "empty name"), ("n[[1]]", "nested"),
    ("x[3]-ib", "after the last"),
])
def test_expand_hostlist_refuses_malformed(text, why):
    with pytest.raises(ValueError, match=why):
        expand_hostlist(text)


def test_expand_hostlist_as_scontrol(tmp_path):
    """The same names as Slurm's own expansion (scontrol show hostnames), where Slurm is installed."""
    if shutil.which("scontrol") is None:
        pytest.skip("Slurm's scontrol is not installed (tools/slurm_test.sh installs it as root)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n")
    for text in ("node[01-03,07],gpu5", "n[8-10]", "n[098-101]", "a,b[1-2],c", "r[1-2]n[8-9]", "x-[3]",
                 "c[1-3,5,9-11]-[0-1]"):
        r = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "SLURM_CONF": str(conf)})
        assert r.returncode == 0, r.stderr
        assert expand_hostlist(text) == r.stdout.split(), text


# --------------------------------------------------------------- the variables

TORCHRUN = {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "abc"}
SLURM = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "12345",
         "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_NODELIST": "gpu[01-08]"}


def test_detect_torchrun():
    # torchrun's agent holds MASTER_PORT: the main node takes the next port (and its heartbeats the one after).
    assert detect(TORCHRUN) == Launch("torchrun", 2, 3, 1, "10.0.0.5", 29501, "torchrun/abc/10.0.0.5:29500")
    # torchrun's variables win over Slurm's (torchrun started by srun).
    assert detect({**SLURM, **TORCHRUN}).launcher == "torchrun"
    assert detect({**TORCHRUN, "DTORCH_MAIN_NODE_PORT": "6000"}).port == 6000
    got = detect({**TORCHRUN, "DTORCH_MAIN_NODE_ADDRESS": "head:7000"})
    assert (got.main_host, got.port, got.rank) == ("head", 7000, 2)


def test_detect_slurm():
    # The step's first host; port 20000 + 2 * (12345 mod 20000).
    assert detect(SLURM) == Launch("slurm", 1, 4, 1, "gpu07", 44690, "slurm/12345.0")
    no_step = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NODELIST"}
    assert detect(no_step).main_host == "gpu01"
    assert detect({**SLURM, "SLURM_JOB_ID": "20001"}).port == 20002
    assert detect({"SLURM_PROCID": "0", "SLURM_NPROCS": "2", "SLURM_NODELIST": "h1"}).world_size == 2


@pytest.mark.parametrize("env, exc, why", [
    ({}, RuntimeError, "no launcher"),
    ({**TORCHRUN, "RANK": "3"}, ValueError, "RANK=3 is out of range"),
    ({**TORCHRUN, "WORLD_SIZE": "x"}, ValueError, "WORLD_SIZE='x' is not an integer"),
    ({**TORCHRUN, "MASTER_PORT": "65535"}, ValueError, "MASTER_PORT"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, ValueError, "SLURM_STEP_NODELIST"),
    ({**SLURM, "SLURM_PROCID": "4"}, ValueError, "SLURM_PROCID=4"),
    ({**SLURM, "SLURM_STEP_NODELIST": "gpu[1-"}, ValueError, "without its"),
    ({**TORCHRUN, "DTORCH_MAIN_NODE_ADDRESS": "head"}, ValueError, "HOST:PORT"),
])
def test_detect_refuses(env, exc, why):
    with pytest.raises(exc, match=why):
        detect(env)


def test_read_token(tmp_path):
    f = tmp_path / "token"
    f.write_text("from-file\n")
    assert read_token("given", None, {"DTORCH_CLUSTER_TOKEN": "env"}) == "given"
    assert read_token(None, None, {"DTORCH_CLUSTER_TOKEN": "env", "DTORCH_CLUSTER_TOKEN_FILE": str(f)}) == "env"
    assert read_token(None, None, {"DTORCH_CLUSTER_TOKEN_FILE": str(f)}) == "from-file"
    assert read_token(None, str(f), {}) == "from-file"
    with pytest.raises(ValueError, match="no cluster token"):
        read_token(None, None, {})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        read_token(None, str(tmp_path / "empty"), {})
    with pytest.raises(FileNotFoundError):
        read_token(None, str(tmp_path / "missing"), {})


# ------------------------------------------------------------------- whole jobs

# Each rank runs this; only rank 0 may get past init(). It runs elementwise ops on each worker
# node's mesh (bit-identical to torch), traced (the trace must hold every worker node's kernels),
# and a sum over a mesh spanning both worker nodes.
PROGRAM = textwrap.dedent("""
    import sys
    import torch
    import dtorch
    launch = dtorch.cluster.init(cpu_devices=2, timeout_second=float(sys.argv[1]))
    print("RETURNED rank", launch.rank, "of", launch.world_size, launch.launcher, flush=True)
    nodes = dtorch.MainNode.nodes()
    assert len(nodes) == launch.world_size - 1 and all(n["cpu_devices"] == 2 for n in nodes), nodes
    t = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    ids = []
    with dtorch.profiler.trace(None) as tr:  # every worker node's kernels, on one time axis
        for n in nodes:
            f = n["first_device_id"]
            ids += [f, f + 1]
            mesh = dtorch.DeviceMesh("cpu", [f, f + 1])
            x = dtorch.from_torch(t, mesh, [dtorch.Shard(0)])
            assert torch.equal((x.exp() * 3 - x).to_torch(), t.exp() * 3 - t)
    names = {e["pid"]: e["args"]["name"] for e in tr.events if e.get("name") == "process_name"}
    traced = {e["args"]["device"] for e in tr.events if e.get("cat") == "kernel" and e["name"] == "exp"
              and names[e["pid"]].startswith("worker node")}
    assert traced == {f"cpu:{i}" for i in ids}, (traced, ids)
    if len(ids) > 2:
        x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", ids), [dtorch.Shard(1)])
        torch.testing.assert_close(x.sum(1).to_torch(), t.sum(1))
    print("PROGRAM OK on", len(nodes), "worker nodes", flush=True)
""")


def free_port_pair():
    """A port P such that P and P + 1 were both free (the main node's and its heartbeats')."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p >= 65534:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    pytest.skip("no two consecutive free ports")


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DTORCH_CLUSTER_TOKEN", "DTORCH_MAIN_NODE"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "python"), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def job(tmp_path):
    """``start(rank, world, master_port, **env)`` starts PROGRAM as one rank with torchrun's variables
    (by hand: what torchrun or a Kubernetes Job sets); every process is killed at the end."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    procs = []

    def start(rank, world, master_port, timeout=60, prefix=(), master_addr="127.0.0.1", **extra):
        env = clean_env()
        env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                    "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port), "TORCHELASTIC_RUN_ID": "test",
                    "DTORCH_CLUSTER_TOKEN": "launch-test-token"})
        env.update({k: str(v) for k, v in extra.items()})
        p = subprocess.Popen([*prefix, sys.executable, str(script), str(timeout)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    try:
        yield start
    finally:
        reap(procs)


def finish(p, timeout=120):
    return communicate_within(p, timeout)


@zmq
def test_three_ranks_one_cluster(job):
    """Rank 0 returns as the main node and runs the program on the other ranks' devices; ranks 1 and
    2 never return into the script, serve, and exit 0 when the main node ends."""
    port = free_port_pair() - 1  # the main node takes MASTER_PORT + 1 and + 2
    ranks = [job(r, 3, port) for r in (1, 2, 0)]  # workers first: they wait for the main node
    results = [finish(p) for p in ranks]
    for (rc, out, err), rank in zip(results, (1, 2, 0)):  # every rank's stderr when one failed
        assert rc == 0, (rank, out, err[-3000:], [(r, e[-2000:]) for (c, _, e), r in zip(results, (1, 2, 0)) if r != rank])
    rc, out, err = results[2]
    assert "RETURNED rank 0 of 3 torchrun" in out and "PROGRAM OK on 2 worker nodes" in out, (out, err)
    for rc, out, err in results[:2]:
        assert out == "", out  # a worker rank never ran a line of the script after init()


@zmq
def test_token_from_file(job, tmp_path):
    f = tmp_path / "token"
    f.write_text("secret-in-a-file\n")
    port = free_port_pair() - 1
    ranks = [job(r, 2, port, DTORCH_CLUSTER_TOKEN="", DTORCH_CLUSTER_TOKEN_FILE=f) for r in (1, 0)]
    (rc1, out1, err1), (rc0, out0, err0) = finish(ranks[0]), finish(ranks[1])
    assert rc0 == 0 and "PROGRAM OK on 1 worker nodes" in out0, err0[-3000:]
    assert rc1 == 0 and out1 == "", err1[-3000:]


@zmq
def test_wrong_token_refused(job):
    """A rank with another token: it says so and exits 1; the main node's wait fails naming the refusal."""
    port = free_port_pair() - 1
    main = job(0, 2, port, timeout=15)
    bad = job(1, 2, port, DTORCH_CLUSTER_TOKEN="not-the-token")
    rc, out, err = finish(bad, 90)
    assert rc == 1 and "refused by the main node" in err and "token" in err, err
    rc, out, err = finish(main, 90)
    # With CURVE the wrong token fails the handshake, before the main node could count a refusal.
    assert rc != 0 and "TimeoutError: MainNode.wait_cluster_ready: 0 of 1 worker nodes joined" in err, err[-2000:]
    assert "within 15 s (0 registered in all; " in err and " lost)" in err, err[-2000:]
    assert "PROGRAM OK" not in out


@zmq
def test_second_main_node_on_a_port(job):
    """A second job's rank 0 on a port the first holds: a clear error and a non-zero exit; a worker
    rank of that second job, with the same secret, is refused by the first job's main node."""
    port = free_port_pair() - 1
    first = job(0, 3, port, timeout=90)  # waits for 2 worker ranks; 1 comes
    worker = job(1, 3, port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the first main node listens
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port + 1)) == 0:
                break
        time.sleep(0.1)
    second = job(0, 2, port, timeout=10, TORCHELASTIC_RUN_ID="another-job")
    rc, out, err = finish(second)
    assert rc != 0 and "cannot be the main node" in err and "Another dtorch main node" in err, err[-2000:]
    assert "RETURNED" not in out
    stray = job(1, 2, port, TORCHELASTIC_RUN_ID="another-job")
    rc, out, err = finish(stray)
    assert rc == 1 and "refused by the main node" in err, err[-2000:]
    first.kill()  # its worker rank hears nothing more and exits 0 two heartbeat intervals later
    rc, out, err = finish(worker, 60)
    assert rc == 0 and out == "", err[-2000:]


@zmq
def test_worker_of_another_version_refused(monkeypatch):
    """A worker node speaking another wire version (another dtorch): refused with both versions named,
    exit 1, at once (not after its connect timeout)."""
    from dtorch import MainNode

    monkeypatch.setenv("DTORCH_CLUSTER_TOKEN", "version-test")
    MainNode.set_address("127.0.0.1:0", cpu_devices=1)
    try:
        p = subprocess.Popen([executable(), f"--main-node-address={MainNode.get_address()}", "--connect-timeout=60",
                              "--debug-wire-version=3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rc, out, err = finish(p, 30)
        assert rc == 1 and "speaks cluster wire version" in err and "version 3" in err, err
        assert "run the same dtorch version on every host" in err
        with pytest.raises(TimeoutError, match="1 refused"):
            MainNode.wait_cluster_ready(1, timeout_second=0.5)
    finally:
        MainNode.shutdown()


@zmq
def test_torchrun_runs_the_llama_example():
    """The real torchrun: examples/llama/run.py --cluster env over 3 processes on one host."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.access(torchrun, os.X_OK):
        pytest.skip(f"no torchrun beside {sys.executable}")
    env = clean_env()
    env["DTORCH_CLUSTER_TOKEN"] = "torchrun-test"
    port = free_port_pair() - 1
    p = subprocess.Popen([torchrun, "--nnodes", "1", "--nproc-per-node", "3", "--master-addr", "127.0.0.1",
                          "--master-port", str(port), os.path.join(ROOT, "examples", "llama", "run.py"),
                          "--cluster", "env", "--mesh", "dp=1,tp=2,pp=2", "--max-new-tokens", "6",
                          "--node-timeout", "120"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    rc, out, err = finish(p, 300)
    assert rc == 0, (out, err[-3000:])
    assert out.count("matches single-device: True") == 1, out  # rank 0 alone ran the example
    assert "main node (torchrun rank 0 of 3)" in out and "worker node 1 " in out, out


@zmq
def test_two_network_namespaces(netns_pair, job):  # noqa: F811
    """Rank 0 in one namespace, rank 1 in the other, MASTER_ADDR the main node's veth address."""
    ns_main, ns_node = netns_pair
    port = 29600
    main = job(0, 2, port, prefix=("ip", "netns", "exec", ns_main), master_addr="10.231.7.1")
    node = job(1, 2, port, prefix=("ip", "netns", "exec", ns_node), master_addr="10.231.7.1")
    rc, out, err = finish(main)
    if rc != 0 or "PROGRAM OK on 1 worker nodes" not in out:  # the worker rank's side of it too
        before = node.poll()  # None: it still ran when the main node ended
        node.kill()
        _, nout, nerr = finish(node, 30)
        raise AssertionError(f"main node rc={rc}: {err[-3000:]}\nworker rank's status {before}: {nerr[-3000:]}")
    rc, out, err = finish(node)
    assert rc == 0 and out == "", err[-3000:]
