"""Recovery after a worker node is lost (issue 32, item 3): ``MainNode.replace(lost, new)`` gives
the lost node's device ids a new home (a worker node registered since, or local devices); the
values that lived there are recomputed from their recorded producers, bit-identical to before,
where their inputs survive, and the rest fail at the read naming what to reload. On loopback;
every wait bounded, every child killed (the fixture)."""

import json
import os
import signal
import subprocess
import sys

import pytest

import torch

import dtorch
from dtorch import KernelError, MainNode, Replicate, Shard, _C
from dtorch.node import executable
from dtorch.test.test_util import local_values
from helpers import reap
from test_cluster import HB, TOKEN, _readline, cluster_at, netns_pair, wait_for  # noqa: F401 (netns_pair: a fixture)
from test_cluster_drain import _line

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")

HERE = "test_cluster_recover.py"


@pytest.fixture
def cluster(monkeypatch):
    yield from cluster_at(monkeypatch, HB)


def _kill(p, index):
    p.send_signal(signal.SIGKILL)
    assert wait_for(lambda: MainNode.nodes()[index]["state"] == "lost", 2 * HB + 10), MainNode.nodes()[index]


def _snapshot(values):
    return {k: (v.to_torch(), local_values(v), list(v.placements)) for k, v in values.items()}


def _same(v, snap, k):
    full, pieces, placements = snap
    assert list(v.placements) == placements, k
    got = local_values(v)  # every device's piece, replicas included
    assert len(got) == len(pieces) and all(torch.equal(a, b) for a, b in zip(pieces, got)), k
    assert v.to_torch().dtype == full.dtype and torch.equal(v.to_torch(), full), k


def _program(g, a):
    """Values on worker node `a..a+1` (and one spanning the main node's 1 and a+1): recomputable
    ones (made from the main node's values, by factories, and from those) and reload ones."""
    gen = torch.Generator().manual_seed(3)
    t = torch.randn(5, 6, generator=gen)
    src = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [0, 1]), [Shard(0)], graph=g)
    node = dtorch.DeviceMesh("cpu", [a, a + 1])
    v = {}
    v["x"] = src.redistribute(device_mesh=node, placements=[Shard(0)])  # 3 rows and 2
    v["h"] = v["x"] * 3  # every input of a recomputed value is held (a dropped one: see the test)
    v["y"] = v["h"].exp()
    v["r"] = v["x"].redistribute(placements=[Replicate()])
    v["b"] = v["x"].to(torch.bfloat16)
    v["b1"] = v["b"] * 2
    v["b2"] = v["b1"].sum(1)
    v["s"] = src.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [1, a + 1]), placements=[Shard(1)])
    v["ss"] = v["s"] * v["s"]
    v["s2"] = v["ss"].sum(1)  # a sum across the two nodes
    v["ar"] = dtorch.arange(7.0, device_mesh=node, placements=[Shard(0)], graph=g)  # uneven: 4 and 3
    v["f"] = v["ar"] * 0.5
    v["rt"] = v["r"].T
    v["mm"] = v["r"] @ v["rt"]
    return t, src, node, v


def test_replace_with_a_new_node_recomputes_and_marks_reloads(cluster):
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    t, src, node, v = _program(g, a)
    loaded, ll = dtorch.from_torch(t, node, [Shard(1)], graph=g), _line()  # host data: a reload value
    halfb, lh = dtorch.from_torch(t.to(torch.bfloat16), dtorch.DeviceMesh("cpu", [a]), [Replicate()], graph=g), _line()
    dep = loaded + v["r"]  # its input cannot be recomputed
    tmp = v["x"] + 1
    dropped_in = tmp * 2  # its input is dropped below
    del tmp
    local = src * 2
    before = _snapshot(v)
    local_before = local.to_torch()

    _kill(p, 0)
    q = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    b = MainNode.nodes()[1]["first_device_id"]
    assert b == a + 2

    with pytest.raises(ValueError, match=r"none of worker node 0's own"):
        dtorch.cluster.replace(0, [0, a])  # the lost node's own ids
    got = dtorch.cluster.replace(0, 1)
    assert got == {"recomputed": len(v), "lost": 4}
    for k, val in v.items():
        _same(val, before[k], k)
    assert v["x"].device_mesh.mesh.tolist() == [b, b + 1] and v["s"].device_mesh.mesh.tolist() == [1, b + 1]
    assert node.mesh.tolist() == [b, b + 1]  # the DeviceMesh made before: on the new home
    assert dtorch.DeviceMesh("cpu", [a + 1, a]).mesh.tolist() == [b + 1, b]  # and one made after
    info = MainNode.nodes()[0]
    assert info["state"] == "replaced" and info["replaced_by"] == 1 and MainNode.nodes()[1]["state"] == "alive"

    for val, shape, dtype, line in ((loaded, [5, 6], torch.float32, ll), (halfb, [5, 6], torch.bfloat16, lh)):
        with pytest.raises(KernelError) as e:
            val.to_torch()
        msg = str(e.value)
        assert f"shape {shape}, {dtype}, made at " in msg and f"{HERE}:{line}" in msg, msg
        assert "reload it" in msg and "worker node 0" in msg and "loaded from host data" in msg, msg
    with pytest.raises(KernelError, match=r"an input of its producer \(binary\) was lost too.*reload it"):
        dep.to_torch()
    with pytest.raises(KernelError, match="no longer held by any dtorch.Tensor"):
        dropped_in.to_torch()

    # the runtime goes on: new work on the new home, on the old ids, and locally
    assert torch.equal(local.to_torch(), local_before)
    assert torch.equal((v["y"] + v["x"]).to_torch(), before["y"][0] + before["x"][0])
    again = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [a, a + 1]), [Shard(1)], graph=g)  # reloaded
    assert again.device_mesh.mesh.tolist() == [b, b + 1] and torch.equal((again * 2).to_torch(), t * 2)
    assert torch.equal((again + v["r"]).to_torch(), t + before["r"][0])
    assert q.poll() is None


def test_replace_onto_local_devices_and_bad_arguments(cluster):
    p = cluster("--cpu-devices=2")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    a = MainNode.nodes()[0]["first_device_id"]
    g = dtorch.Graph()
    gen = torch.Generator().manual_seed(11)
    u = torch.randn(3, 4, generator=gen).to(torch.bfloat16)
    src = dtorch.from_torch(u, dtorch.DeviceMesh("cpu", [0]), [Replicate()], graph=g)
    node = dtorch.DeviceMesh("cpu", [a, a + 1])
    x = src.redistribute(device_mesh=node, placements=[Shard(1)])
    xx = x * x
    y = xx.sum(0)  # over the unsharded dim: still Shard(0) of the result
    span = dtorch.from_torch(u, dtorch.DeviceMesh("cpu", [1, a + 1]), [Shard(0)], graph=g)  # a reload value
    before = _snapshot({"x": x, "xx": xx, "y": y})

    with pytest.raises(ValueError, match="worker node 0 is alive, not lost"):
        MainNode.replace(0, [0, 1])
    _kill(p, 0)
    small = cluster("--cpu-devices=1")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    for bad, err, match in ((5, ValueError, "worker node 5 does not exist"),
                            ("0", TypeError, "lost must be a worker node's index")):
        with pytest.raises(err, match=match):
            MainNode.replace(bad, [0, 1])
    for bad, err, match in (
            (1, ValueError, "worker node 1 has 1 cpu devices, worker node 0 had 2"),
            (0, ValueError, "worker node 0, is lost, not alive"),
            (7, ValueError, "worker node 7 does not exist"),
            ([0], ValueError, "to has 1 cpu device ids but worker node 0 has 2"),
            ([0, 0], ValueError, "must name 2 distinct cpu devices"),
            ([0, 99], ValueError, "device 99 does not exist"),
            (["x", 1], TypeError, "must hold int device ids")):
        with pytest.raises(err, match=match):
            MainNode.replace(0, bad)
    with pytest.raises(ValueError, match="duplicate device ids"):  # span would be on [1, 1]
        MainNode.replace(0, [0, 1])
    # nothing changed: the node is still lost, the values still where they were, meshes unmoved
    assert MainNode.nodes()[0]["state"] == "lost" and node.mesh.tolist() == [a, a + 1]
    assert x.device_mesh.mesh.tolist() == [a, a + 1] and span.device_mesh.mesh.tolist() == [1, a + 1]
    assert dtorch.DeviceMesh("cpu", [a]).mesh.tolist() == [a]

    got = MainNode.replace(MainNode.nodes()[0], [1, 0])  # the order swapped: a -> 1, a + 1 -> 0
    assert got == {"recomputed": 3, "lost": 1}
    assert x.device_mesh.mesh.tolist() == [1, 0] and y.device_mesh.mesh.tolist() == [1, 0]
    _same(x, before["x"], "x")
    _same(xx, before["xx"], "xx")
    _same(y, before["y"], "y")
    assert node.mesh.tolist() == [1, 0]
    assert MainNode.nodes()[0]["replaced_by"] == {"cpu": [1, 0]}
    with pytest.raises(ValueError, match="worker node 0 is replaced, not lost"):
        MainNode.replace(0, [0, 1])
    assert torch.equal((x * 2).to_torch(), before["x"][0] * 2)
    with pytest.raises(KernelError, match=r"shape \[3, 4\], torch.bfloat16.*reload it"):
        span.to_torch()
    assert small.poll() is None


# Made at import, before any cluster: ids 2 and 3 are this process's own CPU devices (in the tests'
# clusters they are the first worker node's, the main node offering 2).
EARLY = dtorch.DeviceMesh("cpu", [2, 3])


def test_meshes_made_before_the_cluster_get_their_ids_back_at_shutdown(monkeypatch):
    """replace() moves every DeviceMesh on the lost ids in place, one made before the cluster
    included; once the cluster is shut down its ids are the process's own devices again, so the
    mesh is as it was (it used to stay moved, and a later program's mesh pointed elsewhere)."""
    t = torch.arange(12.0).reshape(4, 3)
    start = cluster_at(monkeypatch, HB)
    cluster = next(start)
    try:
        p = cluster("--cpu-devices=2")
        MainNode.wait_cluster_ready(1, timeout_second=60)
        assert MainNode.nodes()[0]["first_device_id"] == 2
        _kill(p, 0)
        MainNode.replace(0, [1, 0])
        assert EARLY.mesh.tolist() == [1, 0]  # on the new home while the cluster lasts
    finally:
        start.close()  # the fixture's end: MainNode.shutdown()
    assert EARLY.mesh.tolist() == [2, 3] and EARLY.device_ids == (2, 3)
    x = dtorch.from_torch(t, EARLY, [Shard(0)])
    assert [v.shape for v in local_values(x)] == [(2, 3), (2, 3)]
    assert torch.equal((x * 2).to_torch(), t * 2)
    assert dtorch.DeviceMesh("cpu", [2, 3]).mesh.tolist() == [2, 3]  # no redirect left either


def test_llama_example_recovers_a_killed_node():
    """examples/llama/run.py --nodes 2 --spawn-nodes --kill-node-after 3: the tiny random Llama on
    dp2 x tp2 x pp2 over two worker nodes; worker node 0 SIGKILLed after 3 of 8 tokens, a node
    started in its place, replace(), the model loaded again, generation continued: the 8 tokens
    equal the single-device run's (the script compares them: an uninterrupted generate on one
    device)."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    here = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    env.pop("DTORCH_CLUSTER_TOKEN", None)
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "llama", "run.py"), "--nodes", "2",
                        "--spawn-nodes", "--max-new-tokens", "8", "--kill-node-after", "3", "--node-timeout", "120"],
                       env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "after 3 tokens: SIGKILL worker node 0" in r.stdout
    assert re.search(r"read failed after 3 tokens: .*worker node 0", r.stdout), r.stdout
    assert re.search(r"worker node 2 replaces worker node 0: \d+ values recomputed, \d+ to reload; "
                     r"mesh now \[8, 9, 10, 11, 4, 5, 6, 7\]", r.stdout), r.stdout
    assert "mesh {'dp': 2, 'tp': 2, 'pp': 2}: 8 new tokens" in r.stdout
    assert "matches single-device: True" in r.stdout, r.stdout
    pids = [int(m) for m in re.findall(r"pid (\d+)\)", r.stdout)]
    for pid in pids:  # every node it started is gone (the killed one reaped too)
        assert not os.path.exists(f"/proc/{pid}"), pid


_NETNS_MAIN = """
import json, os, sys, time
import torch
import dtorch
from dtorch import MainNode, DeviceMesh, Shard
MainNode.set_address('10.231.7.1:0', cpu_devices=2, heartbeat_second=float(sys.argv[2]))
open(sys.argv[1], 'w').write(MainNode.get_address())
MainNode.wait_cluster_ready(2, timeout_second=60)
a, b = (n['first_device_id'] for n in MainNode.nodes())
g = dtorch.Graph()
t = torch.arange(-12, 12, dtype=torch.float32).reshape(6, 4)
src = dtorch.from_torch(t, DeviceMesh('cpu', [0, 1]), [Shard(0)], graph=g)
x = dtorch.from_torch(t, DeviceMesh('cpu', [a, a + 1]), [Shard(0)], graph=g) * 3   # node 0's
MainNode.remove(0, to=[1, 0])                                                       # drained here
print(json.dumps({'x': x.to_torch().tolist(), 'x_mesh': x.device_mesh.mesh.tolist()}), flush=True)
y = src.redistribute(device_mesh=DeviceMesh('cpu', [b, b + 1]), placements=[Shard(0)])  # node 1's
w = y * 2
z = w.sum(0)
before = z.to_torch().tolist()
print(json.dumps({'kill': MainNode.nodes()[1]['pid']}), flush=True)
deadline = time.monotonic() + 60
while MainNode.nodes()[1]['state'] != 'lost' and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({'lost': MainNode.nodes()[1]['state']}), flush=True)
MainNode.wait_cluster_ready(1, timeout_second=60)                                   # the replacement
got = dtorch.cluster.replace(1, MainNode.nodes()[-1])
print(json.dumps({'got': got, 'z': z.to_torch().tolist(), 'before': before, 'z_mesh': z.device_mesh.mesh.tolist(),
                  'c': MainNode.nodes()[-1]['first_device_id'], 'b': b}), flush=True)
MainNode.shutdown()
"""


@pytest.fixture
def namespaces(request):
    """test_cluster.py's two network namespaces (skipped where they cannot be made)."""
    return request.getfixturevalue("netns_pair")


def test_drain_and_replace_in_two_network_namespaces(namespaces, tmp_path):
    """Item 4's across-hosts check: the main node in one network namespace, its worker nodes in
    another (a veth pair between them): remove(0, to=[1, 0]) drains node 0's value to the main node,
    then node 1 is SIGKILLed, a replacement joins from the other namespace and replace() recomputes
    node 1's values there, equal to before."""
    ns_main, ns_node = namespaces
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN)
    addr_file = tmp_path / "addr"
    main = subprocess.Popen(["ip", "netns", "exec", ns_main, sys.executable, "-c", _NETNS_MAIN, str(addr_file), str(HB)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [main]
    try:
        assert wait_for(lambda: addr_file.exists() and addr_file.read_text(), 60), "no address"
        address = addr_file.read_text()

        def node():
            p = subprocess.Popen(["ip", "netns", "exec", ns_node, executable(), f"--main-node-address={address}",
                                  "--cpu-devices=2", "--quiet"], env=env, stderr=subprocess.PIPE, text=True)
            procs.append(p)
            return p

        node(), node()
        t = torch.arange(-12, 12, dtype=torch.float32).reshape(6, 4)
        drained = json.loads(_readline(main))
        assert drained["x_mesh"] == [1, 0] and torch.equal(torch.tensor(drained["x"]), t * 3), drained
        victim = json.loads(_readline(main))["kill"]
        os.kill(victim, signal.SIGKILL)
        assert json.loads(_readline(main)) == {"lost": "lost"}
        node()
        done = json.loads(_readline(main))
        assert done["got"] == {"recomputed": 3, "lost": 0}, done
        assert done["z"] == done["before"] == (t * 2).sum(0).tolist(), done
        assert done["z_mesh"] == [done["c"], done["c"] + 1] and done["c"] != done["b"], done
        assert main.wait(timeout=60) == 0, main.stderr.read()
    finally:
        reap(procs)
