"""CUDA devices on worker nodes (issue 13): ``dtorch-node --cuda-devices=...``, global CUDA ids
numbered node-major, cuda meshes over the main node's and the worker nodes' GPUs, data between them
staged through host memory.

Two modes. Without a GPU (this suite's machines) every process sees stand-in GPUs
(``_C._test_fake_cuda`` in this process, ``--debug-fake-gpus`` for a node: the CPU kernels
registered as the CUDA backend, with a fake GPU count that CUDA_VISIBLE_DEVICES and device
virtualisation apply to, and streams refused for a device the process does not have, as the real
shim refuses them). What runs then is dtorch's logic of CUDA ids: registration, numbering, routing,
the node's local numbering, collectives across nodes; not CUDA itself. With a real CUDA backend
and a GPU (tools/gpu_check.sh's cluster_cuda step, docs/cuda.md) the same tests run on the GPU:
every process maps its logical devices onto it (DTORCH_DTENSOR_IN_SAME_DEVICE=1), so the data
between nodes goes device to host, through ZeroMQ, host to device.

The main node has M = 8 CUDA devices (ids 0..7; its in-process meshes are the references, of
the same shape as the meshes over the nodes) and 6 CPU devices; worker node A offers 2 (cuda ids
8, 9), worker node B 2 (cuda ids 10, 11: with stand-ins, the GPUs of indices 0 and 2 of its 3).
Results are compared bit for bit, device by device. Every wait is bounded and every child killed
in teardown."""

import os
import subprocess

import pytest

import torch

import dtorch
from dtorch import MainNode, Partial, Replicate, Shard, _C
from dtorch.node import executable
from dtorch.test.test_util import assert_replicas_equal, genuine_partial, local_values

from helpers import moved_between_nodes


def _stand_in_available() -> bool:
    """The stand-in GPUs register only in a build without a real CUDA backend."""
    try:
        _C._test_fake_cuda(0)
        return True
    except Exception:
        return False


STAND_IN = _stand_in_available()
REAL = not STAND_IN and torch.cuda.is_available()
pytestmark = [pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ"),
              pytest.mark.skipif(not STAND_IN and not REAL, reason="a CUDA backend without a GPU"),
              # The suite on cuda meshes (conftest.py turns cpu meshes into cuda ones) would run it
              # under other devices' numbering; tools/gpu_check.sh runs it in a step of its own.
              pytest.mark.skipif(os.environ.get("DTORCH_TEST_DEVICE") == "cuda",
                                 reason="run by tools/gpu_check.sh's cluster_cuda step")]
stand_in_only = pytest.mark.skipif(not STAND_IN, reason="stand-in GPUs only (a real CUDA backend here)")

TOKEN = "test-cluster-cuda-token"
M = 8  # the main node's CUDA devices
A, B = [M, M + 1], [M + 2, M + 3]
SAME_DEVICE = {"DTORCH_DTENSOR_IN_SAME_DEVICE": "1", "DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE": "2"}


def _node(*args, env=None):
    return subprocess.Popen([executable(), f"--main-node-address={MainNode.get_address()}", "--connect-timeout=60",
                             "--quiet", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _cuda_cluster_at(monkeypatch, node_env_extra):
    monkeypatch.setenv("DTORCH_CLUSTER_TOKEN", TOKEN)
    node_env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN, **node_env_extra)
    if STAND_IN:
        _C._test_fake_cuda(M)
        args_a, args_b = ["--debug-fake-gpus=2", "--cuda-devices=2"], ["--debug-fake-gpus=3", "--cuda-devices=0,2"]
    else:  # one real GPU, every process's logical devices on it
        monkeypatch.setenv("DTORCH_DTENSOR_IN_SAME_DEVICE", "1")
        monkeypatch.setenv("DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE", str(M))
        node_env.update(SAME_DEVICE)
        args_a, args_b = ["--cuda-devices=2"], ["--cuda-devices=all"]
    children = []
    try:
        MainNode.set_address("127.0.0.1:0", cpu_devices=6)
        children.append(_node("--cpu-devices=1", *args_a, env=node_env))
        MainNode.wait_cluster_ready(1, timeout_second=60)  # one at a time: A is node 0
        children.append(_node("--cpu-devices=1", *args_b, env=node_env))
        MainNode.wait_cluster_ready(2, timeout_second=60)
        yield children
    finally:
        MainNode.shutdown()
        for p in children:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)
        if STAND_IN:
            _C._test_fake_cuda(0)


@pytest.fixture
def cuda_cluster(monkeypatch):
    """Main node: 6 CPU devices, M CUDA devices. Worker node A: 1 CPU device, --cuda-devices=2;
    worker node B: 1 CPU device, --cuda-devices=0,2 of 3 stand-ins (on a GPU: all, 2 logical).
    Returns (A, B) processes."""
    yield from _cuda_cluster_at(monkeypatch, {})


@pytest.fixture
def cuda_cluster_relayed(monkeypatch):
    """As cuda_cluster, the worker nodes started with DTORCH_DIRECT_DATA=0: all data between nodes
    passes through the main node, which counts it."""
    yield from _cuda_cluster_at(monkeypatch, {"DTORCH_DIRECT_DATA": "0"})


def _cuda(ids):
    return dtorch.DeviceMesh("cuda", ids)


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _check(got, want):
    """Every replica bitwise equal, and the value torch.equal to `want`."""
    assert_replicas_equal(None, got)
    t = got.to_torch()
    assert t.dtype == want.dtype and t.shape == want.shape, (t, want)
    assert torch.equal(t, want), (t, want)
    return t


def _same(a, b):
    """Two dtorch values equal bit for bit, device by device."""
    va, vb = local_values(a), local_values(b)
    assert len(va) == len(vb) and all(torch.equal(x, y) for x, y in zip(va, vb)), (va, vb)


def test_registration_and_numbering(cuda_cluster):
    """CUDA ids are node-major: the main node's M, then A's 2, then B's 2 (with stand-ins, its
    list of 2 of 3 GPUs); CPU ids as before. Meshes over any of them are satisfiable; ids past the
    last are a ValueError naming the counts."""
    a, b = MainNode.nodes()
    assert (a["cuda_devices"], a["first_cuda_device_id"], a["cpu_devices"], a["first_device_id"]) == (2, M, 1, 6)
    assert (b["cuda_devices"], b["first_cuda_device_id"], b["cpu_devices"], b["first_device_id"]) == (2, M + 2, 1, 7)
    info = _C._cluster_info()
    assert (info["cuda_devices"], info["cpu_devices"]) == (M + 4, 8)
    g = dtorch.Graph()
    for ids in ([0, 1], A, B, [1, A[0], B[1]], list(range(M + 4))):
        assert g.satisfy(_cuda(ids)), ids
    with pytest.raises(ValueError, match=rf"CUDA device {M + 4} does not exist in this cluster: the main node has "
                                         rf"{M} CUDA devices \(ids 0..{M - 1}\) and 2 worker nodes add 4 "
                                         rf"\(ids {M}..{M + 3}\)"):
        _cuda([M + 3, M + 4])


def test_kernels_run_on_the_nodes(cuda_cluster):
    """Programs on a node's cuda mesh run there (its backend numbers its devices from 0, and
    refuses a stream for an id it does not have, so the global ids must reach it as its own) and
    equal the same program on an in-process cuda mesh bit for bit."""
    g = dtorch.Graph()
    t = _randn(5, 7, seed=1)
    ref = dtorch.from_torch(t, _cuda([0, 1]), [Shard(0)], graph=g)
    yr = (ref * 2 + 1).sum(0)
    for ids in (A, B):
        x = dtorch.from_torch(t, _cuda(ids), [Shard(0)], graph=g)
        y = (x * 2 + 1).sum(0)
        _same(y, yr)
        _check(y, yr.to_torch())
    before = _C._cluster_info()["values"]
    dtorch.from_torch(t, _cuda(A), [Shard(0)], graph=g).to_torch()
    assert _C._cluster_info()["values"] > before  # the pieces were shipped to node A


def test_redistribute_between_nodes(cuda_cluster):
    """Moves between the cuda meshes of the main node, A and B, every way round and across
    placements, and between device types across nodes (a cuda piece on A to a cpu mesh of B and
    back); genuine multi-piece Partials moved and reduced across nodes."""
    g = dtorch.Graph()
    main, a, b = _cuda([0, 1]), _cuda(A), _cuda(B)
    t = _randn(5, 7, seed=2)  # uneven shards on 2 devices
    x = dtorch.from_torch(t, main, [Shard(0)], graph=g)
    moves = [(a, [Replicate()]), (b, [Shard(1)]), (a, [Shard(0)]), (main, [Shard(1)]), (b, [Replicate()]),
             (main, [Replicate()]), (a, [Shard(1)]), (b, [Shard(0)]),
             (dtorch.DeviceMesh("cpu", [7]), [Replicate()]), (a, [Shard(1)]),
             (dtorch.DeviceMesh("cpu", [0, 6]), [Shard(0)]), (b, [Shard(0)])]
    for mesh, pl in moves:
        x = x.redistribute(device_mesh=mesh, placements=pl)
        assert x.device_mesh == mesh and list(x.placements) == pl
        _check(x, t)
        if pl[0].is_shard():
            assert torch.equal(torch.cat(local_values(x), pl[0].dim), t)
    ti = torch.randint(-8, 9, (4, 6), generator=torch.Generator().manual_seed(5)).float()
    for src, dst in ((a, b), (a, main), (main, b), (b, a)):
        p = genuine_partial(ti, src, [Partial()], seed=7, graph=g)
        vals = local_values(p)
        assert not torch.equal(vals[0], vals[1]) and torch.equal(vals[0] + vals[1], ti)
        _check(p.redistribute(device_mesh=dst, placements=[Replicate()]), ti)
        _check(p.redistribute(device_mesh=dst, placements=[Shard(0)]), ti)
    big = _randn(700, 1024, seed=4)  # parts larger than a chunk (1 MiB)
    z = dtorch.from_torch(big, a, [Shard(0)], graph=g)
    _check(z.redistribute(device_mesh=b, placements=[Replicate()]), big)


@pytest.mark.parametrize("ids", [[M - 2, M - 1] + A + B, [A[0], B[0], M - 2, B[1], M - 1, A[1]]])
def test_collectives_on_a_spanning_mesh(cuda_cluster, ids):
    """All-reduce (a genuine Partial with a different addend on each of the 6 devices), all-gather,
    reduce-scatter and all-to-all on a cuda mesh over the main node, A and B (in node order, and
    interleaved) equal the same program on an in-process cuda mesh of the same shape, device by
    device; every replica is checked. Also a 2-D mesh whose dims each span nodes."""
    g = dtorch.Graph()
    span, ref = _cuda(ids), _cuda([0, 1, 2, 3, 4, 5])
    t = _randn(9, 13, seed=3)  # uneven on 6 devices
    ps = [genuine_partial(t, m, [Partial()], seed=11, graph=g) for m in (span, ref)]
    assert len({tuple(v.flatten().tolist()) for v in local_values(ps[0])}) == 6  # six different addends
    for pl in ([Replicate()], [Shard(0)], [Shard(1)]):  # all-reduce, reduce-scatter
        got, want = (p.redistribute(device_mesh=p.device_mesh, placements=pl) for p in ps)
        _same(got, want)
        assert_replicas_equal(None, got)
    xs = [dtorch.from_torch(t, m, [Shard(0)], graph=g) for m in (span, ref)]
    for pl in ([Replicate()], [Shard(1)]):  # all-gather, all-to-all
        got, want = (x.redistribute(device_mesh=x.device_mesh, placements=pl) for x in xs)
        _same(got, want)
        _check(got, t)
    s, r = (x.sum(0) for x in xs)  # a reduction over the sharded dim: Partial, then all-reduce
    _same(s.redistribute(device_mesh=span, placements=[Replicate()]),
          r.redistribute(device_mesh=ref, placements=[Replicate()]))
    span2 = _cuda([[ids[0], ids[2], ids[4]], [ids[1], ids[3], ids[5]]])
    ref2 = _cuda([[0, 2, 4], [1, 3, 5]])
    p2 = [genuine_partial(t, m, [Partial(), Shard(1)], seed=13, graph=g) for m in (span2, ref2)]
    got, want = (p.redistribute(device_mesh=p.device_mesh, placements=[Replicate(), Replicate()]) for p in p2)
    _same(got, want)
    _check(got, want.to_torch())


@pytest.mark.parametrize("ids, cluster, allreduce, allgather",
                         [(A + B, "cuda_cluster_relayed", 6, 2), ([M - 2, M - 1] + A, "cuda_cluster", 3, 1)],
                         ids=["A+B relayed", "main+A"])
def test_collective_bytes_between_nodes(request, ids, cluster, allreduce, allgather):
    """A cuda mesh of 2 ranks on each of 2 nodes moves as few bytes as a cpu one (in tensor sizes
    N, test_cluster_data.py): an all-reduce each rank's range to each rank of the other node and
    each reduced range once to the other node, an all-gather each shard once to the other node.
    Once per node needs the node table to say which CUDA devices share a node (its CUDA entries);
    without them each part would go to each rank (4 N and 2 N between the main node and A). The
    main node counts every byte between it and A (one hop), and every byte between A and B twice
    when they relay through it. The results equal an in-process cuda mesh's, device by device."""
    request.getfixturevalue(cluster)
    g = dtorch.Graph()
    relayed = _C._cluster_info()["relayed"]
    mesh, ref = _cuda(ids), _cuda([0, 1, 2, 3])
    t = _randn(64, 256, seed=41)
    n = t.numel() * t.element_size()
    ps = [genuine_partial(t, m, [Partial()], seed=2, graph=g) for m in (mesh, ref)]
    xs = [dtorch.from_torch(t, m, [Shard(0)], graph=g) for m in (mesh, ref)]
    g.sync()
    moved, y = moved_between_nodes(g, lambda: ps[0].redistribute(placements=[Replicate()]))
    assert moved == allreduce * n, (moved, n)
    _same(y, ps[1].redistribute(placements=[Replicate()]))
    moved, z = moved_between_nodes(g, lambda: xs[0].redistribute(placements=[Replicate()]))
    assert moved == allgather * n, (moved, n)
    _check(z, t)
    assert (_C._cluster_info()["relayed"] > relayed) == (cluster == "cuda_cluster_relayed")


def _refused(args, env_extra=None):
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN, **(env_extra or {}))
    p = subprocess.run([executable(), "--main-node-address=127.0.0.1:9", "--connect-timeout=5", *args],
                       capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stderr


@pytest.mark.parametrize("args, message", [
    pytest.param(["--cuda-devices=1"], "no CUDA device can be offered: this dtorch was built without a CUDA "
                 "backend", marks=stand_in_only),
    pytest.param(["--cuda-devices=all"], "no CUDA device can be offered", marks=stand_in_only),
    pytest.param(["--debug-fake-gpus=1", "--cuda-devices=2"], "--cuda-devices=2: this host's CUDA backend sees "
                 "1 device", marks=stand_in_only),
    pytest.param(["--debug-fake-gpus=3", "--cuda-devices=0,5"], "--cuda-devices=2: this host's CUDA backend "
                 "sees 1 device", marks=stand_in_only),
    (["--cuda-devices=-1"], "--cuda-devices must be a non-negative integer, not '-1'"),
    (["--cuda-devices=two"], "--cuda-devices must be a non-negative integer, not 'two'"),
    (["--cuda-devices="], "--cuda-devices must be a non-negative integer, not ''"),
    (["--cuda-devices=1,1"], "distinct GPU indices separated by commas, not '1,1'"),
    (["--cuda-devices=0,x"], "distinct GPU indices separated by commas, not '0,x'"),
    (["--cuda-devices=0,-1"], "distinct GPU indices separated by commas, not '0,-1'"),
    (["--cuda-devices=,"], "distinct GPU indices separated by commas, not ','"),
    (["--cuda-devices=5000"], "--cuda-devices must be in [0, 4096] or 'all'"),
])
def test_refusals(args, message):
    """Asking for CUDA devices a node does not have (no GPU, as on this machine; more than it sees;
    list indices past its GPUs) and malformed values exit with status 2 and say why, before
    connecting to anything."""
    rc, err = _refused(args)
    assert rc == 2 and message in err, (rc, err)


@stand_in_only
def test_list_composes_with_cuda_visible_devices():
    """A list's indices are positions in an outer CUDA_VISIBLE_DEVICES, as for any CUDA program:
    of '2,0' (2 of the 3 stand-in GPUs visible), index 1 is GPU 0; index 2 is past the list."""
    rc, err = _refused(["--debug-fake-gpus=3", "--cuda-devices=0,2"], {"CUDA_VISIBLE_DEVICES": "2,0"})
    assert rc == 2 and "GPU index 2 is past CUDA_VISIBLE_DEVICES=2,0" in err, (rc, err)
    # Both indices exist: the node passes the device checks and only fails to reach the main node
    # (nothing listens at port 9): exit status 1, not 2.
    rc, err = _refused(["--debug-fake-gpus=3", "--cuda-devices=1,0"], {"CUDA_VISIBLE_DEVICES": "2,0"})
    assert rc == 1 and "no answer from the main node" in err, (rc, err)


def test_zero_and_no_flag_offer_none(cuda_cluster):
    """--cuda-devices=0 (and no flag) offer no CUDA device, on a host with GPUs too: the node's CUDA
    range is empty and the CUDA ids after it are unchanged."""
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN)
    extra = [_node(*(["--debug-fake-gpus=2"] if STAND_IN else []), "--cuda-devices=0", env=env), _node(env=env)]
    try:
        MainNode.wait_cluster_ready(4, timeout_second=60)
        nodes = MainNode.nodes()
        assert [n["cuda_devices"] for n in nodes] == [2, 2, 0, 0]
        assert _C._cluster_info()["cuda_devices"] == M + 4
    finally:
        for p in extra:
            p.kill()
            p.communicate(timeout=30)
