"""Worker nodes leaving a running program (issue 32, item 2, its second half): ``MainNode.remove``
stops an idle node, refuses one that holds live values (listing each: shape, dtype, the line that
made it), or moves them to the devices named and then stops it; its ids stay numbered but a mesh
on them is refused. On loopback; every wait bounded, every child killed."""

import sys

import pytest

import torch

import dtorch
from dtorch import MainNode, Partial, Replicate, Shard, _C
from dtorch.test.test_util import genuine_partial, local_values
from test_cluster import HB, cluster_at, wait_exit

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")

HERE = "test_cluster_drain.py"


@pytest.fixture
def cluster(monkeypatch):
    yield from cluster_at(monkeypatch, HB)


def _line():
    return sys._getframe(1).f_lineno


def _local_still_works(g):
    t = torch.randn(4, 6, generator=torch.Generator().manual_seed(9))
    x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(1)], graph=g)
    assert torch.equal((x * 2 - 1).sum(0).to_torch(), (t * 2 - 1).sum(0))


def test_remove_an_idle_node(cluster):
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)  # node 0, then node 1
    q = cluster("--cpu-devices=1")
    MainNode.wait_cluster_ready(2, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    t = torch.arange(12.0).reshape(3, 4)
    x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [a, a + 1]), [Shard(0)], graph=g)
    assert torch.equal((x + 1).to_torch(), t + 1)
    del x  # nothing lives there now

    MainNode.remove(MainNode.nodes()[0])
    rc, err = wait_exit(p, timeout=30)  # told to stop: exits 0 by itself
    assert rc == 0, err
    nodes = MainNode.nodes()
    assert [n["state"] for n in nodes] == ["removed", "alive"] and "removed" in nodes[0]["error"]
    assert MainNode.num_node_in_cluster() == 1 and nodes[1]["first_device_id"] == a + 2  # ids stay numbered
    for ids in ([a], [a + 1], [0, a + 1]):
        with pytest.raises(ValueError, match=f"device {ids[-1]} belonged to worker node 0, which was removed"):
            dtorch.DeviceMesh("cpu", ids)
    with pytest.raises(ValueError, match="worker node 0 is removed, not alive"):
        MainNode.remove(0)
    with pytest.raises(IndexError, match="worker node 5 does not exist"):
        MainNode.remove(5)
    with pytest.raises(TypeError, match="node must be"):
        MainNode.remove("0")

    b = nodes[1]["first_device_id"]  # the other node and the main node go on
    y = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [b]), [Replicate()], graph=g)
    assert torch.equal(y.exp().to_torch(), t.exp())
    _local_still_works(g)
    assert q.poll() is None


def test_remove_refuses_a_node_holding_values(cluster):
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    t = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))
    x, lx = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [a, a + 1]), [Shard(0)], graph=g), _line()
    y, ly = (x * 2).to(torch.bfloat16)[:, :3], _line()
    z, lz = dtorch.from_torch(t[0], dtorch.DeviceMesh("cpu", [a]), [Replicate()], graph=g), _line()
    span, ls = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, a + 1]), [Shard(1)], graph=g), _line()
    local = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(1)], graph=g)

    with pytest.raises(RuntimeError) as e:
        MainNode.remove(0)
    msg = str(e.value)
    assert "worker node 0 holds 4 live values" in msg and "to=[device ids]" in msg
    for shape, dtype, line in (([6, 8], torch.float32, lx), ([6, 3], torch.bfloat16, ly), ([8], torch.float32, lz),
                               ([6, 8], torch.float32, ls)):
        assert f"shape {shape}, {dtype}, made at " in msg and f"{HERE}:{line}" in msg, msg
    assert len(msg.splitlines()) == 5  # the four, and nothing else (`local` is the main node's)

    assert MainNode.nodes()[0]["state"] == "alive" and p.poll() is None  # nothing changed
    assert torch.equal(y.to_torch(), (t * 2).to(torch.bfloat16)[:, :3])
    assert torch.equal(z.to_torch(), t[0]) and torch.equal(span.to_torch(), t) and torch.equal(local.to_torch(), t)
    del x, y, z, span
    MainNode.remove(0)  # idle now
    rc, err = wait_exit(p, timeout=30)
    assert rc == 0, err
    assert torch.equal(local.to_torch(), t)
    _local_still_works(g)


def test_remove_drains_values_to_local_devices(cluster):
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    gen = torch.Generator().manual_seed(5)
    t, u = torch.randn(6, 8, generator=gen), torch.randn(5, 4, generator=gen).to(torch.bfloat16)
    node = dtorch.DeviceMesh("cpu", [a, a + 1])
    x = dtorch.from_torch(t, node, [Shard(0)], graph=g) * 3  # computed on the node
    y = dtorch.from_torch(u, node, [Replicate()], graph=g)
    part = genuine_partial(torch.randn(3, 5, generator=gen), node, [Partial()], graph=g)
    uneven = dtorch.from_torch(t[:5], node, [Shard(0)], graph=g)  # 3 rows and 2
    span = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [1, a]), [Shard(1)], graph=g)  # main node and the node
    alias, kept = x, [y]
    values = {"x": x, "y": y, "part": part, "uneven": uneven, "span": span}
    before = {k: (v.to_torch(), local_values(v), list(v.placements)) for k, v in values.items()}

    with pytest.raises(ValueError, match="must name 2 distinct cpu devices"):
        MainNode.remove(0, to=[0, 0])
    with pytest.raises(ValueError, match="to has 1 cpu device ids but worker node 0 has 2"):
        MainNode.remove(0, to=[0])
    with pytest.raises(ValueError, match="duplicate device ids"):  # span would be [1, 1]: refused before any move
        MainNode.remove(0, to=[1, 0])
    assert x.device_mesh.mesh.tolist() == [a, a + 1] and MainNode.nodes()[0]["state"] == "alive"

    MainNode.remove(0, to=[0, 1])  # a -> 0, a + 1 -> 1
    rc, err = wait_exit(p, timeout=30)
    assert rc == 0, err
    assert MainNode.nodes()[0]["state"] == "removed" and MainNode.num_node_in_cluster() == 0
    moved = {"x": [0, 1], "y": [0, 1], "part": [0, 1], "uneven": [0, 1], "span": [1, 0]}
    for k, v in values.items():
        full, pieces, placements = before[k]
        assert v.device_mesh.mesh.tolist() == moved[k], k
        assert list(v.placements) == placements, k
        assert torch.equal(v.to_torch(), full), k
        after = local_values(v)  # every device's piece, replicas included
        if k == "part":  # the sum is finished on the way (redistribute between meshes): coordinate 0 holds it
            assert torch.equal(after[0], full) and not after[1].any()
        else:
            assert len(after) == len(pieces) and all(torch.equal(b, c) for b, c in zip(pieces, after)), k
    assert alias is x and alias.device_mesh.mesh.tolist() == [0, 1] and kept[0] is y

    # keep computing on them, with values made after
    s = (x + dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(0)], graph=g)).sum(1)
    assert torch.equal(s.to_torch(), (t * 3 + t).sum(1))
    assert torch.equal((y * 2).to_torch(), u * 2)
    assert torch.equal((part.redistribute(placements=[Replicate()]) + 1).to_torch(), before["part"][0] + 1)
    assert torch.equal((span * 2 - 1).to_torch(), t * 2 - 1)
    _local_still_works(g)


def test_remove_drains_to_another_worker_node(cluster):
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    q = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(2, timeout_second=60)
    a, b = (n["first_device_id"] for n in MainNode.nodes())
    g = dtorch.Graph()
    t = torch.randn(5, 6, generator=torch.Generator().manual_seed(7))
    x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [[a], [a + 1]]), [Shard(0), Replicate()], graph=g).exp()
    pieces = local_values(x)
    MainNode.remove(0, to=[b + 1, b])  # node to node, the order swapped
    rc, err = wait_exit(p, timeout=30)
    assert rc == 0, err
    assert x.device_mesh.mesh.tolist() == [[b + 1], [b]] and list(x.placements) == [Shard(0), Replicate()]
    assert all(torch.equal(u, v) for u, v in zip(pieces, local_values(x))) and torch.equal(x.to_torch(), t.exp())
    assert torch.equal((x - 1).to_torch(), t.exp() - 1)  # computed on node 1 now
    assert [n["state"] for n in MainNode.nodes()] == ["removed", "alive"] and q.poll() is None


def test_a_python_kernel_on_a_worker_node_is_refused_at_the_call(cluster):
    """A dtorch-node runs no Python: a local_map on a mesh holding one of its devices is a
    NotImplementedError at the call, naming the ids, with nothing recorded (it used to be shipped
    and its whole batch dropped, host values included); the main node's own devices run it."""
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    t = torch.randn(4, 6, generator=torch.Generator().manual_seed(3))
    gelu = dtorch.local_map(torch.nn.functional.gelu, out_placements=[Shard(0)])
    for ids, named in (([a, a + 1], f"{a}, {a + 1}"), ([0, a + 1], f"{a + 1}")):
        x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", ids), [Shard(0)], graph=g)
        with pytest.raises(NotImplementedError, match=f"worker-node devices \\(cpu ids {named}:"):
            gelu(x)
        assert torch.equal((x + 1).to_torch(), t + 1)  # the host data was not dropped with a batch
    y = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(0)], graph=g)
    assert torch.equal(gelu(y).to_torch(), torch.nn.functional.gelu(t))
    _local_still_works(g)
    assert p.poll() is None
