"""One time axis for the whole cluster (issue 32, item 4, its first part): the main node estimates
each worker node's clock offset from the heartbeats (NTP's four readings, the exchange of the
smallest round trip kept), and ``MainNode.nodes()`` gives it with its round trip. A node whose
clock reads ahead (``dtorch-node --debug-clock-skew-ms``, as another host's would) must be found
that far ahead, within half the round trip: an exact bound, not a timing. On loopback."""

import time

import pytest

from dtorch import MainNode, _C
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
