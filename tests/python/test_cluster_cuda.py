"""CUDA devices on worker nodes (issue 13): ``dtorch-node --cuda-devices=...``, global CUDA ids
numbered node-major, cuda meshes over the main node's and the worker nodes' GPUs, data between them
staged through host memory.

There is no GPU here, so every process sees stand-in GPUs (``_C._test_fake_cuda`` in this process,
``--debug-fake-gpus`` for a node: the CPU kernels registered as the CUDA backend, with a fake GPU
count that CUDA_VISIBLE_DEVICES and device virtualisation apply to, and streams refused for a device
the process does not have, as the real shim refuses them). What runs is dtorch's logic of CUDA ids:
registration, numbering, routing, the node's local numbering, collectives across nodes; not CUDA
itself (docs/cuda.md says what a GPU session checks). Results are compared bit for bit with the same
program on an in-process CPU mesh of the same shape, whose kernels are the stand-in's.

The main node has 2 stand-in GPUs (cuda ids 0, 1) and 6 CPU devices (the in-process reference
meshes); worker node A offers 2 of its 2 (cuda ids 2, 3), worker node B the GPUs of indices 0 and 2
of its 3 (cuda ids 4, 5). Every wait is bounded and every child killed in teardown."""

import os
import subprocess

import pytest

import torch

import dtorch
from dtorch import MainNode, Partial, Replicate, Shard, _C
from dtorch.node import executable
from dtorch.test.test_util import assert_replicas_equal, genuine_partial, local_values



def _stand_in_available() -> bool:
    """The stand-in GPUs register only in a build without a real CUDA backend."""
    try:
        _C._test_fake_cuda(0)
        return True
    except Exception:
        return False


pytestmark = [pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ"),
              pytest.mark.skipif(not _stand_in_available(), reason="a real CUDA backend: docs/cuda.md's GPU run")]

TOKEN = "test-cluster-cuda-token"


def _node(*args, env=None):
    return subprocess.Popen([executable(), f"--main-node-address={MainNode.get_address()}", "--connect-timeout=60",
                             "--quiet", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture
def cuda_cluster(monkeypatch):
    """Main node: 6 CPU devices, 2 stand-in GPUs. Worker node A: 1 CPU device, --cuda-devices=2 of
    2; worker node B: 1 CPU device, --cuda-devices=0,2 of 3. Returns (A, B) processes."""
    monkeypatch.setenv("DTORCH_CLUSTER_TOKEN", TOKEN)
    _C._test_fake_cuda(2)
    children = []
    try:
        MainNode.set_address("127.0.0.1:0", cpu_devices=6)
        children.append(_node("--cpu-devices=1", "--debug-fake-gpus=2", "--cuda-devices=2"))
        MainNode.wait_cluster_ready(1, timeout_second=60)  # one at a time: A is node 0
        children.append(_node("--cpu-devices=1", "--debug-fake-gpus=3", "--cuda-devices=0,2"))
        MainNode.wait_cluster_ready(2, timeout_second=60)
        yield children
    finally:
        MainNode.shutdown()
        for p in children:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)
        _C._test_fake_cuda(0)


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
    """CUDA ids are node-major: the main node's 2, then A's 2, then B's 2 (its list of 2 of 3 GPUs);
    CPU ids as before. Meshes over any of them are satisfiable; ids past the last are a ValueError
    naming the counts, and a graph's mesh check agrees."""
    a, b = MainNode.nodes()
    assert (a["cuda_devices"], a["first_cuda_device_id"], a["cpu_devices"], a["first_device_id"]) == (2, 2, 1, 6)
    assert (b["cuda_devices"], b["first_cuda_device_id"], b["cpu_devices"], b["first_device_id"]) == (2, 4, 1, 7)
    info = _C._cluster_info()
    assert (info["cuda_devices"], info["cpu_devices"]) == (6, 8)
    g = dtorch.Graph()
    for ids in ([0, 1], [2, 3], [4, 5], [1, 2, 4], [0, 1, 2, 3, 4, 5]):
        assert g.satisfy(dtorch.DeviceMesh("cuda", ids)), ids
    with pytest.raises(ValueError, match=r"CUDA device 6 does not exist in this cluster: the main node has 2 "
                                         r"CUDA devices \(ids 0..1\) and 2 worker nodes add 4 \(ids 2..5\)"):
        dtorch.DeviceMesh("cuda", [5, 6])


def test_kernels_run_on_the_nodes(cuda_cluster):
    """Programs on a node's cuda mesh run there (the node's stand-in refuses streams for ids it does
    not have, so the global ids 2..5 must reach its backend as its own 0, 1) and equal the
    in-process CPU mesh's results bit for bit."""
    g = dtorch.Graph()
    t = _randn(5, 7, seed=1)
    for ids in ([2, 3], [4, 5]):
        x = dtorch.from_torch(t, dtorch.DeviceMesh("cuda", ids), [Shard(0)], graph=g)
        ref = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(0)], graph=g)
        y, yr = (x * 2 + 1).sum(0), (ref * 2 + 1).sum(0)
        _same(y, yr)
        _check(y, yr.to_torch())
        assert x.device_mesh.device_type == "cuda"
    before = _C._cluster_info()["values"]
    dtorch.from_torch(t, dtorch.DeviceMesh("cuda", [2, 3]), [Shard(0)], graph=g).to_torch()
    assert _C._cluster_info()["values"] > before  # the pieces were shipped to node A


def test_redistribute_between_nodes(cuda_cluster):
    """Moves between the cuda meshes of the main node, A and B, every way round and across
    placements, and between device types across nodes (a cuda piece on A to a cpu mesh of B and
    back); genuine multi-piece Partials moved and reduced across nodes."""
    g = dtorch.Graph()
    main, a, b = (dtorch.DeviceMesh("cuda", ids) for ids in ([0, 1], [2, 3], [4, 5]))
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


@pytest.mark.parametrize("ids", [[0, 1, 2, 3, 4, 5], [2, 4, 0, 5, 1, 3]])
def test_collectives_on_a_spanning_mesh(cuda_cluster, ids):
    """All-reduce (a genuine Partial with a different addend on each of the 6 devices), all-gather,
    reduce-scatter and all-to-all on a cuda mesh over the main node, A and B (in node order, and
    interleaved) equal the same program on an in-process CPU mesh of the same shape, device by
    device; every replica is checked. Also a 2-D mesh whose dims each span nodes."""
    g = dtorch.Graph()
    span, ref = dtorch.DeviceMesh("cuda", ids), dtorch.DeviceMesh("cpu", [0, 1, 2, 3, 4, 5])
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
    span2 = dtorch.DeviceMesh("cuda", [[ids[0], ids[2], ids[4]], [ids[1], ids[3], ids[5]]])
    ref2 = dtorch.DeviceMesh("cpu", [[0, 2, 4], [1, 3, 5]])
    p2 = [genuine_partial(t, m, [Partial(), Shard(1)], seed=13, graph=g) for m in (span2, ref2)]
    got, want = (p.redistribute(device_mesh=p.device_mesh, placements=[Replicate(), Replicate()]) for p in p2)
    _same(got, want)
    _check(got, want.to_torch())


def _refused(args, env_extra=None):
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN, **(env_extra or {}))
    p = subprocess.run([executable(), "--main-node-address=127.0.0.1:9", "--connect-timeout=5", *args],
                       capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stderr


@pytest.mark.parametrize("args, message", [
    (["--cuda-devices=1"], "no CUDA device can be offered: this dtorch was built without a CUDA backend"),
    (["--cuda-devices=all"], "no CUDA device can be offered"),
    (["--debug-fake-gpus=1", "--cuda-devices=2"], "--cuda-devices=2: this host's CUDA backend sees 1 device"),
    (["--debug-fake-gpus=3", "--cuda-devices=0,5"], "--cuda-devices=2: this host's CUDA backend sees 1 device"),
    (["--cuda-devices=-1"], "--cuda-devices must be a non-negative integer, not '-1'"),
    (["--cuda-devices=two"], "--cuda-devices must be a non-negative integer, not 'two'"),
    (["--cuda-devices="], "--cuda-devices must be a non-negative integer, not ''"),
    (["--cuda-devices=1,1"], "distinct GPU indices separated by commas, not '1,1'"),
    (["--cuda-devices=0,x"], "distinct GPU indices separated by commas, not '0,x'"),
    (["--cuda-devices=0,-1"], "distinct GPU indices separated by commas, not '0,-1'"),
    (["--cuda-devices=,"], "distinct GPU indices separated by commas, not ','"),
    (["--debug-fake-gpus=2", "--cuda-devices=5000"], "--cuda-devices must be in [0, 4096] or 'all'"),
])
def test_refusals(args, message):
    """Asking for CUDA devices a node does not have (no GPU, as on this machine; more than it sees;
    list indices past its GPUs) and malformed values exit with status 2 and say why, before
    connecting to anything."""
    rc, err = _refused(args)
    assert rc == 2 and message in err, (rc, err)


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
    extra = [_node("--debug-fake-gpus=2", "--cuda-devices=0", env=env), _node(env=env)]
    try:
        MainNode.wait_cluster_ready(4, timeout_second=60)
        nodes = MainNode.nodes()
        assert [n["cuda_devices"] for n in nodes] == [2, 2, 0, 0]
        assert _C._cluster_info()["cuda_devices"] == 6
    finally:
        for p in extra:
            p.kill()
            p.communicate(timeout=30)
