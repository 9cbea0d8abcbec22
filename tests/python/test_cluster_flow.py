"""Host values and flow control on a worker node's devices (issue 13): a host value bound for a node
ships only its devices' pieces; the backlog bound covers kernels queued on a node; a read's future
is ready only once the node has run its producer. The main node is this pytest process and the
worker node a ``dtorch-node`` process (test_cluster.py's fixture); a stopped node (SIGSTOP) is the
deterministic slow node: it runs nothing until SIGCONT, and the fixture's teardown kills it."""

import os
import signal
import threading
import time

import pytest

import torch

import dtorch
from dtorch import MainNode, Partial, Replicate, Shard, _C
from dtorch.test.probes import graph_stats
from dtorch.test.test_util import local_values

from test_cluster import cluster_at, wait_for  # noqa: F401 - the fixture factory

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")

SLOW_HB = 5.0  # heartbeats of the stopped-node tests: a node stopped for ~2 s is far from lost (11.25 s)


@pytest.fixture
def cluster(monkeypatch):
    yield from cluster_at(monkeypatch, 1.0)


@pytest.fixture
def slow_hb_cluster(monkeypatch):
    yield from cluster_at(monkeypatch, SLOW_HB)


def _node(start, n):
    p = start(f"--cpu-devices={n}")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    first = MainNode.nodes()[0]["first_device_id"]
    return p, list(range(first, first + n))


def _counters():
    i = _C._cluster_info()
    return i["value_bytes"], i["values"]


def _chunk_sizes(n, parts):
    """torch.chunk's sizes of a dim of `n` split in `parts` (trailing ones may be 0)."""
    sizes = [c.shape[0] for c in torch.chunk(torch.empty(n), parts)]
    return sizes + [0] * (parts - len(sizes))


# ------------------------------------------------------------------ per-device pieces (item 1)

def test_host_value_ships_only_pieces(cluster):
    """Each from_torch / dtorch.Tensor(t) on the node's mesh ships its distinct per-device regions,
    each once: bytes shipped = the sum of the distinct pieces, one value per distinct piece (not one
    whole value); values read back torch.equal, every device's piece the torch.chunk piece."""
    _, ids = _node(cluster, 4)
    m1 = dtorch.DeviceMesh("cpu", ids)
    m2 = dtorch.DeviceMesh("cpu", [ids[:2], ids[2:]])
    g = dtorch.Graph()
    gen = torch.Generator().manual_seed(3)
    t73 = torch.randn(7, 3, generator=gen)  # Shard(0) over 4: 2, 2, 2, 1 rows
    t53 = torch.randn(5, 3, generator=gen)  # 2, 2, 1, 0 rows: an empty trailing piece
    t54 = torch.randn(5, 4, generator=gen)
    t35 = torch.arange(15, dtype=torch.int64).reshape(3, 5)
    cases = [
        # (tensor, mesh, placements, the distinct pieces' shapes)
        (t73, m1, [Shard(0)], [(r, 3) for r in _chunk_sizes(7, 4)]),
        (t53, m1, [Shard(0)], [(r, 3) for r in _chunk_sizes(5, 4)]),
        (t54, m1, [Replicate()], [(5, 4)]),                                 # one copy for 4 devices
        (t54, m1, [Partial()], [(5, 4)]),                                   # the others are zeros
        (t54, m2, [Shard(0), Replicate()], [(r, 4) for r in _chunk_sizes(5, 2)]),
        (t35, m2, [Shard(1), Shard(0)], [(r, c) for c in _chunk_sizes(5, 2) for r in _chunk_sizes(3, 2)]),
        (t54, m2, [Replicate(), Shard(1)], [(5, c) for c in _chunk_sizes(4, 2)]),
    ]
    for i, (t, mesh, pl, shapes) in enumerate(cases):
        for make in (lambda: dtorch.from_torch(t, mesh, pl, graph=g),
                     lambda: dtorch.Tensor(t, device_mesh=mesh, placements=pl, graph=g)):
            b0, v0 = _counters()
            x = make()
            got = x.to_torch()
            b1, v1 = _counters()
            want_bytes = sum(r * c for r, c in shapes) * t.element_size()
            assert (b1 - b0, v1 - v0) == (want_bytes, len(shapes)), (i, pl, b1 - b0, v1 - v0, shapes)
            assert got.dtype == t.dtype and torch.equal(got, t), (i, pl)
    # What each device holds: its torch.chunk piece (the layout's semantics, read per device).
    x = dtorch.from_torch(t35, m2, [Shard(1), Shard(0)], graph=g)
    want = [r for c in torch.chunk(t35, 2, dim=1) for r in torch.chunk(c, 2, dim=0)]
    assert all(torch.equal(a, b) for a, b in zip(local_values(x), want))
    # Ops on the pieces: the node computes with them as with whole values.
    ti = torch.randint(-5, 6, (7, 3), generator=gen).float()  # integer values: any summation order is exact
    y = dtorch.from_torch(ti, m1, [Shard(0)], graph=g)
    assert torch.equal((y * 2 + 1).sum(0).to_torch(), (ti * 2 + 1).sum(0))


def test_dtorch_tensor_default_graph_pieces(cluster):
    """dtorch.Tensor(t) with a node's mesh on a fresh default graph ships pieces too."""
    _, ids = _node(cluster, 2)
    mesh = dtorch.DeviceMesh("cpu", ids)
    t = torch.arange(12.0).reshape(4, 3)

    def run():
        b0, v0 = _counters()
        x = dtorch.Tensor(t, device_mesh=mesh, placements=[Shard(1)])
        got = x.to_torch()
        b1, v1 = _counters()
        return got, b1 - b0, v1 - v0

    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", run()))  # a thread's default graph: made now
    th.start()
    th.join(120)
    got, nbytes, nvalues = out["r"]
    assert torch.equal(got, t)
    assert (nbytes, nvalues) == (sum(4 * c * 4 for c in _chunk_sizes(3, 2)), 2)


# ------------------------------------------------------------------ a stopped node (items 2 and 3)

def _stopped(p):
    os.kill(p.pid, signal.SIGSTOP)


def _resumed(p):
    os.kill(p.pid, signal.SIGCONT)


def test_read_not_ready_until_node_ran_it(slow_hb_cluster):
    """A read's future and a sync future of work on a stopped node are not ready (the node has
    run nothing); after SIGCONT they become ready, and the value is torch's."""
    p, ids = _node(slow_hb_cluster, 2)
    mesh = dtorch.DeviceMesh("cpu", ids)
    g = dtorch.Graph()
    t = torch.arange(8.0)
    x = dtorch.from_torch(t, mesh, [Shard(0)], graph=g)
    assert torch.equal((x + 1).to_torch(), t + 1)  # the node is up and serving
    _stopped(p)
    try:
        y = x * 3 - 1
        f = y.to_torch_async()
        s = g.sync_future()
        time.sleep(0.5)  # ample time for a running node; a stopped one runs nothing
        assert not f.is_ready() and not s.is_ready()
        assert f.wait_for(200) is False
        assert _C._cluster_info()["kernels_on_nodes"] > 0
    finally:
        _resumed(p)
    assert f.wait_for(60_000) is True and f.is_ready()
    assert torch.equal(f.get(), t * 3 - 1)
    assert s.wait_for(60_000) is True
    assert wait_for(lambda: _C._cluster_info()["kernels_on_nodes"] == 0, 30)
    assert MainNode.nodes()[0]["state"] == "alive"


def test_backlog_waits_for_a_slow_node(slow_hb_cluster):
    """Recording past the backlog bound while the node runs nothing makes the recording thread wait
    (no spinning: it sleeps in the flow-control wait, counted in flow_waits) with the pipeline
    bounded; once the node runs again the recording finishes and the value is torch's."""
    p, ids = _node(slow_hb_cluster, 2)
    mesh = dtorch.DeviceMesh("cpu", ids)
    g = dtorch.Graph()
    x = dtorch.from_torch(torch.zeros(4), mesh, [Shard(0)], graph=g)
    assert torch.equal(x.to_torch(), torch.zeros(4))
    bound = graph_stats(g)["in_flight_limit"]
    # More nodes than the bound: a node counts 1 until the controller lowers it into its 2 kernels,
    # so the recorder reaches the bound even when the controller takes nothing while it records
    # (a loaded machine: with 30000 nodes, fewer than the bound, the whole recording once went in
    # before the controller's first round and no flow wait happened).
    n_ops = bound + bound // 4
    done = {"i": 0}

    def record():
        y = x
        for i in range(n_ops):
            y = y + 1
            done["i"] = i + 1
        done["y"] = y

    waits0 = graph_stats(g)["flow_waits"]
    _stopped(p)
    th = threading.Thread(target=record)
    try:
        th.start()
        # The recorder stops advancing: it waits for the node.
        assert wait_for(lambda: graph_stats(g)["flow_waits"] > waits0, 60), (done["i"], graph_stats(g))
        stalled = done["i"]
        time.sleep(0.5)
        assert done["i"] == stalled < n_ops
        st = graph_stats(g)
        # A client counts a node record as 1 until it is lowered into its 2 kernels: at most 2x the
        # bound (plus a check interval) stays in flight, far below the 3 * n_ops recorded.
        assert st["in_flight"] <= 2 * bound + 3 * 64 and _C._cluster_info()["kernels_on_nodes"] > 0, st
    finally:
        _resumed(p)
    th.join(120)
    assert not th.is_alive() and done["i"] == n_ops
    assert torch.equal(done["y"].to_torch(), torch.full((4,), float(n_ops)))
    assert graph_stats(g)["peak_in_flight"] <= 2 * bound + 3 * 64
