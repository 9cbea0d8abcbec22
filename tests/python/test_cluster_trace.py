"""One time axis for the whole cluster (issue 32, item 4, its first part): the main node estimates
each worker node's clock offset from the heartbeats (NTP's four readings, the exchange of the
smallest round trip kept), and ``MainNode.nodes()`` gives it with its round trip. A node whose
clock reads ahead (``dtorch-node --debug-clock-skew-ms``, as another host's would) must be found
that far ahead, within half the round trip: an exact bound, not a timing. On loopback."""

import time

import pytest

from dtorch import MainNode, Shard, _C
from test_cluster import HB, cluster_at

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")


@pytest.fixture
def cluster(monkeypatch):
    yield from cluster_at(monkeypatch, HB)


def test_clock_offsets_from_heartbeats(cluster):
    skew_ms = 3000
    cluster("--cpu-devices=1")
    cluster("--cpu-devices=1", f"--debug-clock-skew-ms={skew_ms}")
    MainNode.wait_cluster_ready(2, timeout_second=60)
    deadline = time.monotonic() + 30  # a few heartbeat exchanges (every half interval)
    while time.monotonic() < deadline and any(n["clock_rtt_ns"] < 0 for n in MainNode.nodes()):
        time.sleep(0.05)
    nodes = sorted(MainNode.nodes(), key=lambda n: n["index"])
    assert all(n["clock_rtt_ns"] >= 0 for n in nodes), nodes
    by_skew = {}
    for n in nodes:  # which node is which: the registration order is not the start order
        by_skew[0 if abs(n["clock_offset_ns"]) < abs(n["clock_offset_ns"] - skew_ms * 10**6) else skew_ms] = n
    assert set(by_skew) == {0, skew_ms}, nodes
    for skew, n in by_skew.items():
        # The true offset (the skew: the same host's clock) lies within half the round trip (+1 ns rounding).
        assert abs(n["clock_offset_ns"] - skew * 10**6) <= n["clock_rtt_ns"] // 2 + 1, n


def _wait_clock(n=1):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(x["clock_rtt_ns"] < 0 for x in MainNode.nodes()[:n]):
        time.sleep(0.05)
    assert all(x["clock_rtt_ns"] >= 0 for x in MainNode.nodes()[:n]), MainNode.nodes()


def test_trace_holds_both_nodes_kernels(cluster, tmp_path):
    """A two-node program (the main node's devices 0, 1 and a worker node's, whose clock reads 3 s
    ahead) traced on the main node: the file holds both nodes' kernels, each with its op and the
    line of this file that made it, the worker node's as a process of its own, every kernel on one
    time axis: within the with, as this process's clock read it before and after (the worker
    node's shifted by its estimated offset, right within half the round trip)."""
    import json

    import torch

    import dtorch

    skew_ms = 3000
    cluster("--cpu-devices=2", f"--debug-clock-skew-ms={skew_ms}")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    _wait_clock()
    f = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    t = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "trace.json"
    before = time.monotonic_ns()
    with dtorch.profiler.trace(path) as tr:
        line_a = _line() + 1
        a = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(0)], graph=g).exp()
        line_b = _line() + 1
        b = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [f, f + 1]), [Shard(0)], graph=g).tanh()
        assert torch.equal(a.to_torch(), t.exp()) and torch.equal(b.to_torch(), t.tanh())
    after = time.monotonic_ns()
    data = json.loads(path.read_text())
    node = data["otherData"]["worker_nodes"][0]
    assert node["index"] == 0 and node["clock_rtt_ns"] >= 0
    assert abs(node["clock_offset_ns"] - skew_ms * 10**6) <= node["clock_rtt_ns"] // 2 + 1  # (the records moved by an offset at least as good)
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "process_name"}
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    here = f"{__file__}:"
    main = [k for k in kernels if names[k["pid"]].startswith("dtorch graph") and k["name"] == "exp"]
    worker = [k for k in kernels if names[k["pid"]].startswith("worker node 0 (host ")]
    assert {k["args"]["device"] for k in main} == {"cpu:0", "cpu:1"}, kernels
    assert {k["args"]["device"] for k in worker if k["name"] == "tanh"} == {f"cpu:{f}", f"cpu:{f + 1}"}, kernels
    assert all(k["args"]["site"] == f"{here}{line_a}" for k in main)
    assert all(k["args"]["site"] == f"{here}{line_b}" for k in worker if k["name"] == "tanh")
    origin, slack = data["otherData"]["time_origin_ns"], node["clock_rtt_ns"] // 2 + 1000  # + ts rounding
    assert origin == tr.origin_ns
    for k in main + worker:
        begin, end = origin + k["ts"] * 1000, origin + (k["ts"] + k["dur"]) * 1000
        assert before - slack <= begin <= end <= after + slack, (k, before, after)


def _line():
    import inspect

    return inspect.currentframe().f_back.f_lineno
