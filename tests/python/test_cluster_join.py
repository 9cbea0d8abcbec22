"""Worker nodes joining a program that already runs (issue 32, item 2, its first half): a node that
registers after the program made values on other nodes shows in ``MainNode.nodes()`` and new
meshes use its devices, alone or spanning it and an earlier node, with results equal to torch; the
values made before it came are untouched. On loopback; every wait bounded, every child killed."""

import pytest

import torch

import dtorch
from dtorch import MainNode, Replicate, Shard, _C
from test_cluster import HB, cluster_at

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")


@pytest.fixture
def cluster(monkeypatch):
    yield from cluster_at(monkeypatch, HB)


def test_node_joins_a_running_program(cluster):
    t = torch.randn(6, 8, generator=torch.Generator().manual_seed(3))
    cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    on_a = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [a, a + 1]), [Shard(0)], graph=g) * 3
    assert torch.equal(on_a.to_torch(), t * 3)
    local = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(1)], graph=g) - 1
    with pytest.raises(ValueError, match=f"CPU device {a + 2} does not exist"):
        dtorch.DeviceMesh("cpu", [a + 2])

    cluster("--cpu-devices=3")  # the program has run; a second node comes now
    MainNode.wait_cluster_ready(2, timeout_second=60)
    nodes = MainNode.nodes()
    assert [n["state"] for n in nodes] == ["alive", "alive"]
    b = nodes[1]["first_device_id"]
    assert b == a + 2 and nodes[1]["cpu_devices"] == 3 and _C._cluster_info()["cpu_devices"] == b + 3

    on_b = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [b, b + 1, b + 2]), [Shard(1)], graph=g)
    assert torch.equal((on_b.exp() - on_b).to_torch(), t.exp() - t)
    moved = on_a.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [b + 1, b + 2]), placements=[Replicate()])
    assert torch.equal(moved.to_torch(), t * 3)
    span = dtorch.DeviceMesh("cpu", [a, a + 1, b, b + 1])  # the early node and the late one
    s = dtorch.from_torch(t, span, [Shard(1)], graph=g).sum(1)
    torch.testing.assert_close(s.to_torch(), t.sum(1))
    assert torch.equal(on_a.to_torch(), t * 3) and torch.equal(local.to_torch(), t - 1)  # untouched
    g.sync()
