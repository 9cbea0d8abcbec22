"""Data between nodes (docs/decisions.md, "Data between nodes"): this pytest process is the main
node with 4 CPU devices (ids 0..3, the one-process reference meshes) and two ``dtorch-node`` worker nodes of 2 devices
each (A: ids 4, 5; B: ids 6, 7). Values move between nodes (redistribute across meshes of
different nodes), meshes span nodes (their collectives exchange messages), and the results are
bit-identical to the same program on a mesh of the same shape in this process; a node killed
while a cross-node collective waits on it is an error naming it within the loss bound, and so is
a batch a node cannot decode (at once); large transfers on a loaded machine cause no false loss.
Every wait is bounded and every child is killed in teardown."""

import signal
import subprocess
import sys
import time

import pytest

import torch

import dtorch
from dtorch import MainNode, Partial, Replicate, Shard, _C
from dtorch.node import executable
from dtorch.test.test_util import assert_replicas_equal, genuine_partial, local_values

from helpers import moved_between_nodes, node_data_bytes

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")

HB = 1.0
TOKEN = "test-cluster-data-token"


def _two_nodes_at(monkeypatch, hb):
    monkeypatch.setenv("DTORCH_CLUSTER_TOKEN", TOKEN)
    MainNode.set_address("127.0.0.1:0", cpu_devices=4, heartbeat_second=hb)
    children = []
    try:
        for _ in range(2):
            children.append(subprocess.Popen(
                [executable(), f"--main-node-address={MainNode.get_address()}", "--cpu-devices=2",
                 "--connect-timeout=60", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            MainNode.wait_cluster_ready(len(children), timeout_second=60)  # one at a time: A is node 0
        nodes = MainNode.nodes()
        assert [n["first_device_id"] for n in nodes] == [4, 6]
        by_pid = {p.pid: p for p in children}
        yield [by_pid[n["pid"]] for n in nodes]
    finally:
        MainNode.shutdown()
        for p in children:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)


@pytest.fixture
def two_nodes(monkeypatch):
    """The main node (4 devices) and worker nodes A (ids 4, 5) and B (ids 6, 7); returns the
    worker processes in node order."""
    yield from _two_nodes_at(monkeypatch, HB)


FAST_HB = 0.5  # a node is lost after 1 s of silence


@pytest.fixture
def two_nodes_fast(monkeypatch):
    """As two_nodes, with heartbeats every FAST_HB seconds."""
    yield from _two_nodes_at(monkeypatch, FAST_HB)


@pytest.fixture
def two_nodes_relayed(monkeypatch):
    """As two_nodes, the worker nodes started with DTORCH_DIRECT_DATA=0: they neither listen for
    nor connect to each other, so all data between nodes passes through the main node."""
    monkeypatch.setenv("DTORCH_DIRECT_DATA", "0")
    yield from _two_nodes_at(monkeypatch, HB)


def _direct_links_up(g):
    """Waits (bounded) until A and B send each other messages directly: they connect when the
    second registers, and until a connection is up (a few ms after) a message goes through the
    main node instead."""
    on = {i: dtorch.DeviceMesh("cpu", [i]) for i in (4, 6)}
    small = {i: dtorch.from_torch(torch.arange(4.0), on[i], [Replicate()], graph=g) for i in (4, 6)}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        before = _C._cluster_info()["relayed"]
        for i, j in ((4, 6), (6, 4)):
            small[i].redistribute(device_mesh=on[j], placements=[Replicate()]).to_torch()
        if _C._cluster_info()["relayed"] == before:
            return
    raise AssertionError("A and B still relay through the main node after 30 s")


def _on_three_nodes(kind, t, seed, g):
    """`t` on a mesh of 2 ranks on each of the main node, A and B, placed so that its redistribute
    to Replicate is the collective `kind`: a genuine Partial ("all-reduce") or Shard(0)."""
    span = dtorch.DeviceMesh("cpu", [0, 1, 4, 5, 6, 7])
    if kind == "all-reduce":
        return genuine_partial(t, span, [Partial()], seed=seed, graph=g)
    return dtorch.from_torch(t, span, [Shard(0)], graph=g)


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _check(got, want, exact=True):
    """Every replica bitwise equal, and the value torch.equal (exact) or allclose to `want`."""
    assert_replicas_equal(None, got)
    t = got.to_torch()
    assert t.dtype == want.dtype and t.shape == want.shape, (t, want)
    assert torch.equal(t, want) if exact else torch.allclose(t, want, rtol=1e-5, atol=1e-5), (t, want)
    return t


def _same(a, b):
    """Two dtorch values equal bit for bit, device by device."""
    va, vb = local_values(a), local_values(b)
    assert len(va) == len(vb) and all(torch.equal(x, y) for x, y in zip(va, vb)), (va, vb)


def test_redistribute_between_nodes(two_nodes):
    """Moves between meshes of the main node, worker node A and worker node B, every way round and
    across placements; a genuine multi-piece Partial on one node read as Replicate on another."""
    g = dtorch.Graph()
    main, a, b = (dtorch.DeviceMesh("cpu", ids) for ids in ([0, 1], [4, 5], [6, 7]))
    t = _randn(5, 7, seed=1)  # uneven shards on 2 devices
    x = dtorch.from_torch(t, main, [Shard(0)], graph=g)
    moves = [(a, [Replicate()]), (b, [Shard(1)]), (a, [Shard(0)]), (main, [Shard(1)]), (b, [Replicate()]),
             (main, [Replicate()]), (a, [Shard(1)]), (b, [Shard(0)]), (main, [Shard(0)])]
    for mesh, pl in moves:
        x = x.redistribute(device_mesh=mesh, placements=pl)
        assert x.device_mesh == mesh and list(x.placements) == pl
        _check(x, t)
        vals = local_values(x)
        if pl[0].is_shard():
            assert torch.equal(torch.cat(vals, pl[0].dim), t)
    # Genuine Partials (a different addend on each device) moved and reduced across nodes.
    ti = torch.randint(-8, 9, (4, 6), generator=torch.Generator().manual_seed(5)).float()
    for src, dst in ((a, b), (a, main), (main, b), (b, a)):
        p = genuine_partial(ti, src, [Partial()], seed=7, graph=g)
        vals = local_values(p)
        assert not torch.equal(vals[0], vals[1]) and torch.equal(vals[0] + vals[1], ti)
        _check(p.redistribute(device_mesh=dst, placements=[Replicate()]), ti)
        _check(p.redistribute(device_mesh=dst, placements=[Shard(0)]), ti)
    # Parts larger than a chunk (1 MiB) cross in several messages.
    big = _randn(700, 1024, seed=4)
    z = dtorch.from_torch(big, a, [Shard(0)], graph=g)
    _check(z.redistribute(device_mesh=b, placements=[Replicate()]), big)
    _check(z.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [0, 4, 6]), placements=[Replicate()]), big)
    # Computation continues on the destination node with the moved value.
    y = dtorch.from_torch(t, a, [Shard(0)], graph=g).redistribute(device_mesh=b, placements=[Replicate()])
    _check(y * 2 + 1, t * 2 + 1)


def _collectives(mesh, g, t, ti):
    """All-gather, all-to-all, all-reduce and reduce-scatter (genuine Partials), uneven shards,
    and ops that run them."""
    x = dtorch.from_torch(t, mesh, [Shard(0)], graph=g)
    p = genuine_partial(t, mesh, [Partial()], seed=3, graph=g)
    pi = genuine_partial(ti, mesh, [Partial()], seed=4, graph=g)
    w = dtorch.from_torch(_randn(7, 3, seed=9), mesh, [Replicate()], graph=g)
    return [x.redistribute(placements=[Replicate()]),       # all-gather
            x.redistribute(placements=[Shard(1)]),           # all-to-all
            p.redistribute(placements=[Replicate()]),        # all-reduce, float addends
            p.redistribute(placements=[Shard(0)]),           # reduce-scatter
            pi.redistribute(placements=[Replicate()]),       # exact
            x.sum(0), (x @ w).sum(), dtorch.softmax(x, dim=1)]


@pytest.mark.parametrize("ids", [[2, 3, 4, 5], [4, 5, 6, 7], [0, 4, 6, 1]],
                         ids=["main+A", "A+B", "main+A+B"])
def test_mesh_spanning_nodes(two_nodes, ids):
    """Collectives of a mesh whose devices live on several nodes give, device by device, what a
    one-process mesh of the same size gives (torch.equal), and eager torch's values (allclose;
    exact for integer values)."""
    g = dtorch.Graph()
    span, here = dtorch.DeviceMesh("cpu", ids), dtorch.DeviceMesh("cpu", [0, 1, 2, 3])
    t = _randn(5, 7, seed=2)
    ti = torch.randint(-9, 10, (5, 7), generator=torch.Generator().manual_seed(6)).float()
    got, ref = _collectives(span, g, t, ti), _collectives(here, g, t, ti)
    want = [t, t, t, t, ti, t.sum(0), (t @ _randn(7, 3, seed=9)).sum(), torch.softmax(t, dim=1)]
    for i, (r, loc, w) in enumerate(zip(got, ref, want)):
        _same(r, loc)
        _check(r, w, exact=i in (0, 1, 4))


def _mlp(stages, g, x, w1s, w2s):
    """A 2-stage MLP: each stage TP=2 on its own mesh (column- then row-parallel, the Partial
    all-reduced), the activations moved to the next stage's mesh."""
    h = dtorch.from_torch(x, stages[0], [Replicate()], graph=g)
    for mesh, w1, w2 in zip(stages, w1s, w2s):
        h = h.redistribute(device_mesh=mesh, placements=[Replicate()])
        a = dtorch.from_torch(w1, mesh, [Shard(1)], graph=g)
        b = dtorch.from_torch(w2, mesh, [Shard(0)], graph=g)
        h = dtorch.relu(h @ a) @ b  # Partial over the TP dim
        h = h.redistribute(placements=[Replicate()])
    return h


def test_tp_pp_model_across_nodes(two_nodes):
    """Stage 1 on worker A, stage 2 on worker B (and on the main node): the same result as the same
    meshes' shapes in this process, bit for bit; torch's within float tolerance."""
    g = dtorch.Graph()
    x = _randn(6, 8, seed=11)
    w1s = [_randn(8, 16, seed=12), _randn(8, 16, seed=13)]
    w2s = [_randn(16, 8, seed=14), _randn(16, 8, seed=15)]
    m = {k: dtorch.DeviceMesh("cpu", v) for k, v in (("A", [4, 5]), ("B", [6, 7]), ("m0", [0, 1]),
                                                   ("m1", [2, 3]))}
    ref = _mlp([m["m0"], m["m1"]], g, x, w1s, w2s)
    want = x
    for w1, w2 in zip(w1s, w2s):
        want = torch.relu(want @ w1) @ w2
    r = _check(ref, want, exact=False)
    for stages in ((m["A"], m["B"]), (m["A"], m["m1"]), (m["m0"], m["B"])):
        got = _mlp(list(stages), g, x, w1s, w2s)
        _same(got, ref)
        assert torch.equal(_check(got, want, exact=False), r)


def test_node_killed_during_cross_node_collective(two_nodes):
    """Worker node B SIGKILLed while an all-reduce over the main node, A and B waits for its
    parts: the read fails naming B within the loss bound (the main node's ranks woke); A's ranks
    woke too (its streams run later work); the main node and A still work."""
    node_b = MainNode.nodes()[1]
    g = dtorch.Graph()
    span = dtorch.DeviceMesh("cpu", [0, 1, 4, 5, 6, 7])
    t = torch.randint(-5, 6, (6, 4), generator=torch.Generator().manual_seed(8)).float()
    p = genuine_partial(t, span, [Partial()], seed=2, graph=g)
    _check(p.redistribute(placements=[Replicate()]), t)  # the mesh works before
    two_nodes[1].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    r = (p * 2).redistribute(placements=[Replicate()])  # the main node's and A's ranks wait for B's
    with pytest.raises(RuntimeError) as e:
        r.to_torch()
    took = time.monotonic() - t0
    msg = str(e.value)
    assert "worker node 1" in msg and "127.0.0.1" in msg and str(node_b["pid"]) in msg, msg
    assert took < 2 * HB + 2.0, took
    assert MainNode.nodes()[0]["state"] == "alive" and MainNode.nodes()[1]["state"] == "lost"
    # A's communication streams are not stuck in the failed collective; the main node works.
    t1 = time.monotonic()
    a = dtorch.DeviceMesh("cpu", [4, 5])
    y = dtorch.from_torch(t, a, [Shard(0)], graph=g)
    _check(y.redistribute(placements=[Replicate()]), t)
    _check(y.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [0, 1]), placements=[Shard(1)]) + 1, t + 1)
    assert time.monotonic() - t1 < 30
    with pytest.raises(RuntimeError, match="worker node 1"):
        dtorch.from_torch(t, span, [Shard(0)], graph=g).redistribute(placements=[Replicate()]).to_torch()


@pytest.mark.parametrize("rows", [[[4, 5], [6, 7]], [[4, 6], [5, 7]], [[2, 4], [3, 5]]],
                         ids=["rows A, B", "columns A, B", "columns main, A"])
def test_2d_mesh_data_parallel_across_nodes(two_nodes, rows):
    """A 2x2 mesh over two nodes, one mesh dim across the nodes and the other within one (either
    way round; the main node as one of them): collectives along either dim, and a row-parallel
    matmul's Partial over both, give what the 2x2 mesh of this process's 4 devices gives, device
    by device, and torch's values."""
    g = dtorch.Graph()
    span = dtorch.DeviceMesh("cpu", rows, mesh_dim_names=("dp", "tp"))
    here = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
    t, w = _randn(6, 8, seed=21), _randn(8, 5, seed=22)
    outs = []
    for mesh in (span, here):
        x = dtorch.from_torch(t, mesh, [Shard(0), Shard(1)], graph=g)
        ww = dtorch.from_torch(w, mesh, [Replicate(), Shard(0)], graph=g)
        p = genuine_partial(t, mesh, [Partial(), Partial()], seed=5, graph=g)
        outs.append([x.redistribute(placements=[Replicate(), Replicate()]),
                     x.redistribute(placements=[Shard(1), Shard(0)]),
                     p.redistribute(placements=[Replicate(), Shard(0)]),
                     p.redistribute(placements=[Shard(1), Replicate()]),
                     x @ ww])
    for i, (r, loc, want) in enumerate(zip(outs[0], outs[1], [t, t, t, t, t @ w])):
        _same(r, loc)
        _check(r, want, exact=i < 2)


def test_worker_to_worker_directly(two_nodes):
    """Worker nodes send each other DATA straight, over a connection of their own (each listens on
    a port of its own, the main node tells the others where): a 4 MiB copy from A to B and an
    all-gather over A and B are right and the main node relays none of their messages."""
    g = dtorch.Graph()
    a, b = dtorch.DeviceMesh("cpu", [4, 5]), dtorch.DeviceMesh("cpu", [6, 7])
    t = _randn(1024, 1024, seed=12)
    x = dtorch.from_torch(t, a, [Shard(0)], graph=g)
    _check(x.redistribute(device_mesh=b, placements=[Replicate()]), t)
    _direct_links_up(g)
    before = _C._cluster_info()["relayed"]
    _check(x.redistribute(device_mesh=b, placements=[Shard(1)]), t)
    assert _C._cluster_info()["relayed"] == before
    _check(x.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [4, 5, 6, 7]), placements=[Replicate()]), t)
    assert _C._cluster_info()["relayed"] == before


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather"])
def test_batch_a_node_cannot_decode(two_nodes, kind):
    """Worker node B cannot decode the batch holding its ranks of an all-reduce (or all-gather)
    over 2 ranks on each of the main node, A and B (a test hook sends it a byte short): the read
    fails at once, naming B; the main node's and A's ranks that waited for B's parts woke (B's
    shared messages, and the all-reduce's second round, whose messages for B's ranks' reduced
    ranges never come either); the mesh's next collective, which needs every rank's stream, is
    right; B stays in the cluster (no loss ended the wait), and a value the failed batch would have
    made reads as failed with the same error."""
    from dtorch.test.probes import held_controller

    node_b = MainNode.nodes()[1]
    g = dtorch.Graph()
    t = torch.randint(-5, 6, (6, 4), generator=torch.Generator().manual_seed(8)).float()
    p = _on_three_nodes(kind, t, 2, g)
    _check(p.redistribute(placements=[Replicate()]), t)
    g.sync()
    _C._test_corrupt_next_batch(1)
    t0 = time.monotonic()
    with held_controller(g):  # one round: B's product and its collective's ranks in one batch
        doubled = p * 2
        r = doubled.redistribute(placements=[Replicate()])
    f = r.to_torch_async()
    assert f.wait_for(60_000), "the read still waits for B's parts"
    took = time.monotonic() - t0
    with pytest.raises(RuntimeError) as e:
        f.get()
    msg = str(e.value)
    assert "worker node 1" in msg and "could not run a batch" in msg and str(node_b["pid"]) in msg, msg
    assert took < 2 * HB, took  # B is alive: nothing but its notice could end the wait
    assert [n["state"] for n in MainNode.nodes()] == ["alive", "alive"]
    with pytest.raises(RuntimeError, match="could not run a batch"):
        doubled.to_torch()
    later = (p * 3).redistribute(placements=[Replicate()]).to_torch_async()
    assert later.wait_for(60_000), f"a rank is still stuck in the failed {kind}"
    assert torch.equal(later.get(), t * 3)


def test_large_transfers_under_load_no_false_loss(two_nodes_fast):
    """Heartbeats every 0.5 s (a node is lost after 1 s of silence) while two busy processes load
    the machine's cores: 128 MiB from the main node to A, then from A to B (directly), and an
    all-reduce of 32 MiB over the main node, A and B finish with the right values and no node is
    lost. (Before heartbeats had a connection, a ZeroMQ I/O thread and a thread of
    their own, 64 MB lost nodes at a 1 s interval on this machine.)"""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        g = dtorch.Graph()
        a, b = dtorch.DeviceMesh("cpu", [4]), dtorch.DeviceMesh("cpu", [6])
        big = torch.randint(-4, 5, (32 << 20,), generator=torch.Generator().manual_seed(3)).float()
        x = dtorch.from_torch(big, a, [Replicate()], graph=g)
        y = x.redistribute(device_mesh=b, placements=[Replicate()])
        part = torch.randint(-4, 5, (8 << 20,), generator=torch.Generator().manual_seed(4)).float()
        span = dtorch.DeviceMesh("cpu", [0, 4, 6])
        ar = dtorch.from_torch(part, span, [Partial()], graph=g).redistribute(placements=[Replicate()])
        # Sums of small integers: every partial sum is exact in float32, in any order.
        fy, far = y.sum().to_torch_async(), ar.sum().to_torch_async()
        assert fy.wait_for(300_000) and far.wait_for(300_000), "a transfer did not finish"
        assert torch.equal(fy.get(), big.sum()) and torch.equal(far.get(), part.sum())
        assert [n["state"] for n in MainNode.nodes()] == ["alive", "alive"], MainNode.nodes()
    finally:
        for q in busy:
            q.kill()
            q.wait(timeout=30)


def _fold(vals):
    """The pieces added left to right in rank order: what the in-process all-reduce computes."""
    acc = vals[0]
    for v in vals[1:]:
        acc = torch.add(acc, v)
    return acc


@pytest.mark.parametrize("ids", [[2, 3, 4, 5], [4, 6, 5, 7], [0, 1, 4, 5, 6, 7]],
                         ids=["main+A", "A+B interleaved", "2 on each node"])
def test_all_reduce_ranges_across_nodes(two_nodes, ids):
    """An all-reduce across nodes is a reduce-scatter then an all-gather of the flattened tensor,
    each rank adding its range of the ranks' pieces in rank order: uneven ranges (numel not a
    multiple of the ranks), fewer elements than ranks, none, 1-D, ranges larger than a message
    chunk (1 MiB), float64, bfloat16 and int32 give on every device exactly the rank-order sum of
    the genuine Partial's pieces, and what a one-process mesh of the same size gives (for the
    sizes this process has devices for)."""
    g = dtorch.Graph()
    span = dtorch.DeviceMesh("cpu", ids)
    here = dtorch.DeviceMesh("cpu", list(range(len(ids)))) if len(ids) <= 4 else None
    ints = torch.randint(-50, 50, (3, 9), generator=torch.Generator().manual_seed(36), dtype=torch.int32)
    cases = [_randn(5, 7, seed=31), _randn(1, 3, seed=32), torch.zeros(0, 7), _randn(11, seed=33),
             _randn(1100, 1024, seed=34), _randn(6, 5, seed=35).double(), _randn(4, 9, seed=37).bfloat16(),
             ints]
    for i, t in enumerate(cases):
        p = genuine_partial(t, span, [Partial()], seed=40 + i, graph=g)
        got = p.redistribute(placements=[Replicate()])
        want = _fold(local_values(p))
        vals = local_values(got)
        assert len(vals) == len(ids) and all(torch.equal(v, want) for v in vals), (t.shape, t.dtype)
        if here is not None:
            ref = genuine_partial(t, here, [Partial()], seed=40 + i, graph=g)
            assert all(torch.equal(a, b) for a, b in zip(local_values(ref), local_values(p)))
            _same(got, ref.redistribute(placements=[Replicate()]))


@pytest.mark.parametrize("ids, cluster, allreduce, allgather, nodes",
                         [([4, 5, 6, 7], "two_nodes_relayed", 6, 2, (1, 1)), ([2, 3, 4, 5], "two_nodes", 3, 1, (1, 0)),
                          ([4, 5, 6, 7], "two_nodes", 0, 0, (1, 1))],
                         ids=["A+B relayed", "main+A", "A+B direct"])
def test_collective_bytes_between_nodes(request, ids, cluster, allreduce, allgather, nodes):
    """The bytes a collective over 2 ranks on each of 2 nodes moves, in tensor sizes N (counted,
    so independent of the machine's load): an all-reduce sends each rank's range to each rank of
    the other node (N in all) and each reduced range once to the other node (N/2 each way), an
    all-gather each shard once to the other node. The main node counts what passes through it:
    between the main node and a worker node every byte (one hop); between two worker nodes every
    byte twice (two hops) when they relay through it (DTORCH_DIRECT_DATA=0), none when they send
    each other directly. Each worker node counts its own, whatever the route (MainNode.nodes()):
    a node in the mesh sends and receives 1.5 N for the all-reduce (its ranks' ranges for the
    other node's ranks, N, and its reduced ranges once, N/2) and N/2 for the all-gather."""
    request.getfixturevalue(cluster)
    g = dtorch.Graph()
    if cluster == "two_nodes" and ids[0] >= 4:
        _direct_links_up(g)
    relayed = _C._cluster_info()["relayed"]
    mesh = dtorch.DeviceMesh("cpu", ids)
    t = _randn(64, 256, seed=41)
    n = t.numel() * t.element_size()
    p = genuine_partial(t, mesh, [Partial()], seed=2, graph=g)
    x = dtorch.from_torch(t, mesh, [Shard(0)], graph=g)
    g.sync()
    own = node_data_bytes()
    moved, y = moved_between_nodes(g, lambda: p.redistribute(placements=[Replicate()]))
    assert moved == allreduce * n, (moved, n)
    assert all(torch.equal(v, _fold(local_values(p))) for v in local_values(y))
    delta = [(s - s0, r - r0) for (s, r), (s0, r0) in zip(node_data_bytes(), own)]
    assert delta == [(3 * n // 2 * k, 3 * n // 2 * k) for k in nodes], (delta, n)
    own = node_data_bytes()
    moved, z = moved_between_nodes(g, lambda: x.redistribute(placements=[Replicate()]))
    assert moved == allgather * n, (moved, n)
    _check(z, t)
    delta = [(s - s0, r - r0) for (s, r), (s0, r0) in zip(node_data_bytes(), own)]
    assert delta == [(n // 2 * k, n // 2 * k) for k in nodes], (delta, n)
    assert (_C._cluster_info()["relayed"] > relayed) == (cluster == "two_nodes_relayed")


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather"])
def test_node_killed_mid_collective(two_nodes, kind):
    """Worker node B stopped (SIGSTOP) while a collective over 2 ranks on each of the three nodes
    is in flight (the main node's and A's ranks sent their first messages and wait for B's), then
    SIGKILLed: the read raises naming B within the loss bound, never hangs, and A and the main
    node go on, a mesh spanning the two of them too."""
    node_b = MainNode.nodes()[1]
    g = dtorch.Graph()
    t = torch.randint(-5, 6, (6, 4), generator=torch.Generator().manual_seed(9)).float()
    x = _on_three_nodes(kind, t, 3, g)
    _check(x.redistribute(placements=[Replicate()]), t)  # the mesh works before
    two_nodes[1].send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    f = (x * 2).redistribute(placements=[Replicate()]).to_torch_async()
    assert f.wait_for(300) is False  # in flight: B's parts cannot come
    two_nodes[1].send_signal(signal.SIGKILL)
    assert f.wait_for(int((2 * HB + 5.0) * 1000)) is True, "the read still waits"
    took = time.monotonic() - t0
    with pytest.raises(RuntimeError) as e:
        f.get()
    msg = str(e.value)
    assert "worker node 1" in msg and str(node_b["pid"]) in msg, msg
    assert took < 2 * HB + 2.5, took
    assert MainNode.nodes()[0]["state"] == "alive" and MainNode.nodes()[1]["state"] == "lost"
    t1 = time.monotonic()
    both = dtorch.DeviceMesh("cpu", [0, 1, 4, 5])
    _check(genuine_partial(t, both, [Partial()], seed=4, graph=g).redistribute(placements=[Replicate()]), t)
    _check(dtorch.from_torch(t, both, [Shard(0)], graph=g).redistribute(placements=[Replicate()]), t)
    assert time.monotonic() - t1 < 30
