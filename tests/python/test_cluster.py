"""Clusters on loopback (issue 13): this pytest process is the main node and worker nodes are
``dtorch-node`` processes (one through ``python -m dtorch.node``); as root, also a main node and a
worker node in two network namespaces joined by a veth pair. Every wait is bounded and every child
is killed in teardown. Heartbeats run every second (the default), so a node is lost 2.25 s after
its last heartbeat."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import dtorch
from dtorch import MainNode, _C
from dtorch.node import executable

pytestmark = pytest.mark.skipif(not _C._cluster_info()["available"], reason="built without ZeroMQ")

HB = 1.0  # heartbeat interval of these tests, seconds (the default: robust on a loaded 2-core machine)
TOKEN = "test-cluster-token-\u00e9"


@pytest.fixture
def cluster(monkeypatch):
    """A main node on a free loopback port with the test token; the worker nodes started through
    ``start`` are killed at the end whatever happened."""
    monkeypatch.setenv("DTORCH_CLUSTER_TOKEN", TOKEN)
    children = []

    def start(*args, token=TOKEN, module=False, env_token=True):
        env = dict(os.environ)
        env.pop("DTORCH_CLUSTER_TOKEN", None)
        if env_token and token is not None:
            env["DTORCH_CLUSTER_TOKEN"] = token
        cmd = [sys.executable, "-m", "dtorch.node"] if module else [executable()]
        cmd += [f"--main-node-address={MainNode.get_address()}", "--connect-timeout=60", *args]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        children.append(p)
        return p

    MainNode.set_address("127.0.0.1:0", cpu_devices=2, heartbeat_second=HB)
    try:
        yield start
    finally:
        MainNode.shutdown()
        for p in children:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)


def wait_exit(p, timeout=30):
    """The exit status and stderr of `p`; a failure showing its stderr when it runs past `timeout`."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=30)
        pytest.fail(f"{p.args} still ran after {timeout} s; its stderr: {err}")
    return p.returncode, err


def wait_for(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_cluster_ready_and_stop(cluster):
    host, port = MainNode.get_address().rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    a = cluster("--cpu-devices=2")
    b = cluster("--cpu-devices", "3", module=True)
    MainNode.wait_cluster_ready(2, timeout_second=60)
    assert MainNode.num_node_in_cluster() == 2
    nodes = MainNode.nodes()
    assert [n["index"] for n in nodes] == [0, 1]
    assert all(n["state"] == "alive" and n["address"] == "127.0.0.1" for n in nodes)
    assert sorted(n["pid"] for n in nodes) == sorted([a.pid, b.pid])
    # Global CPU ids are node-major: the main node's 2, then each node's in registration order.
    by_pid = {a.pid: 2, b.pid: 3}
    first = 2
    for n in nodes:
        assert n["cpu_devices"] == by_pid[n["pid"]]
        assert n["first_device_id"] == first
        first += n["cpu_devices"]
    assert _C._cluster_info()["cpu_devices"] == 7
    # The main node's own ids run here; a worker node's are refused until ops run there.
    dtorch.DeviceMesh("cpu", [0, 1])
    with pytest.raises(RuntimeError, match=f"CPU device 2 is device 0 of worker node 0 .*pid {nodes[0]['pid']}"):
        dtorch.DeviceMesh("cpu", [1, 2])
    with pytest.raises(ValueError, match="CPU device 7 does not exist"):
        dtorch.DeviceMesh("cpu", [7])
    time.sleep(3 * HB)  # heartbeats keep both alive past the loss bound
    assert [n["state"] for n in MainNode.nodes()] == ["alive", "alive"]
    MainNode.shutdown()
    for p in (a, b):
        rc, err = wait_exit(p)
        assert rc == 0, err
        assert "said stop" in err
    assert MainNode.get_address() is None and MainNode.num_node_in_cluster() == 0
    dtorch.DeviceMesh("cpu", [5])  # without a cluster, any id is a local virtual device again


def test_wait_times_out(cluster):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="0 of 1 worker nodes"):
        MainNode.wait_cluster_ready(1, timeout_second=0.3)
    assert 0.25 < time.monotonic() - t0 < 10
    MainNode.wait_cluster_ready(0, timeout_second=0)


def test_wrong_and_missing_token(cluster):
    bad = cluster(token="not-the-token")
    rc, err = wait_exit(bad)
    assert rc != 0
    assert "refused by the main node" in err and "token does not match" in err, err
    missing = cluster(env_token=False)
    rc, err = wait_exit(missing)
    assert rc != 0
    assert "no cluster token" in err, err
    # An explicit --token wins over the environment; a right one joins.
    good = cluster(f"--token={TOKEN}", token="wrong-in-env")
    MainNode.wait_cluster_ready(1, timeout_second=60)
    assert MainNode.num_node_in_cluster() == 1
    assert [n["pid"] for n in MainNode.nodes()] == [good.pid]


def test_node_killed_is_lost_and_others_go_on(cluster):
    a = cluster("--cpu-devices=1")
    b = cluster("--cpu-devices=1")
    MainNode.wait_cluster_ready(2, timeout_second=60)
    killed = MainNode.nodes()[0]
    victim = a if killed["pid"] == a.pid else b
    survivor = b if victim is a else a
    t0 = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    assert wait_for(lambda: MainNode.nodes()[killed["index"]]["state"] == "lost", 2.25 * HB + 2.0)
    took = time.monotonic() - t0
    assert took >= 1.5 * HB  # not before two intervals could pass
    err = MainNode.nodes()[killed["index"]]["error"]
    assert f"worker node {killed['index']}" in err and "127.0.0.1" in err and str(victim.pid) in err, err
    assert MainNode.num_node_in_cluster() == 1
    time.sleep(3 * HB)
    assert survivor.poll() is None and MainNode.nodes()[1 - killed["index"]]["state"] == "alive"
    # The main node still works: a computation on its own devices.
    mesh = dtorch.DeviceMesh("cpu", [0, 1])
    x = dtorch.arange(8, device_mesh=mesh, placements=[dtorch.Shard(0)])
    assert (x * 2).to_torch().tolist() == [2 * i for i in range(8)]


def test_node_exits_when_main_disappears(tmp_path):
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN)
    env.pop("DTORCH_MAIN_NODE_ADDRESS", None)  # set_address(None): loopback
    addr_file = tmp_path / "addr"
    main = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, dtorch\n"
        f"dtorch.MainNode.set_address(None, heartbeat_second={HB})\n"
        f"open({str(addr_file)!r}, 'w').write(dtorch.MainNode.get_address())\n"
        "dtorch.MainNode.wait_cluster_ready(1, timeout_second=60)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node = None
    try:
        assert wait_for(lambda: addr_file.exists() and addr_file.read_text(), 60), main.stderr
        node = subprocess.Popen([executable(), f"--main-node-address={addr_file.read_text()}"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert main.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        main.send_signal(signal.SIGKILL)
        rc, err = wait_exit(node, timeout=2.25 * HB + 10)
        assert rc == 0, err
        assert "is gone" in err
        assert time.monotonic() - t0 < 2.25 * HB + 5
    finally:
        for p in (main, node):
            if p is not None:
                if p.poll() is None:
                    p.kill()
                p.communicate(timeout=30)


def test_bad_arguments(cluster):
    with pytest.raises(ValueError, match="already the main node"):
        MainNode.set_address("127.0.0.1:0")
    for args in (["--cpu-devices=x"], ["--bogus"], ["--cuda-devices=0"]):
        p = cluster(*args)
        rc, err = wait_exit(p)
        assert rc == 2, (args, err)
    env = dict(os.environ)
    env.pop("DTORCH_MAIN_NODE_ADDRESS", None)
    p = subprocess.run([executable()], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and "--main-node-address" in p.stderr
    # Without the flag, DTORCH_MAIN_NODE_ADDRESS names the main node.
    env["DTORCH_MAIN_NODE_ADDRESS"] = MainNode.get_address()
    node = subprocess.Popen([executable(), "--connect-timeout=60"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        MainNode.wait_cluster_ready(1, timeout_second=60)
        assert [n["pid"] for n in MainNode.nodes()] == [node.pid]
    finally:
        node.kill()
        node.communicate(timeout=30)


def test_set_address_validation(monkeypatch):
    monkeypatch.delenv("DTORCH_CLUSTER_TOKEN", raising=False)
    with pytest.raises(ValueError, match="no cluster token"):
        MainNode.set_address("127.0.0.1:0")
    with pytest.raises(ValueError, match="HOST:PORT"):
        MainNode.set_address("localhost", token="t")
    with pytest.raises(ValueError, match="HOST:PORT"):
        MainNode.set_address("127.0.0.1:99999", token="t")
    with pytest.raises(TypeError):
        MainNode.set_address(5555)
    # No address: GlobalOption's (DTORCH_MAIN_NODE_ADDRESS) is the one used.
    monkeypatch.setattr(dtorch.GlobalOption, "main_node_address", "not-an-address")
    with pytest.raises(ValueError, match="not 'not-an-address'"):
        MainNode.set_address(token="t")
    with pytest.raises(RuntimeError, match="set_address"):
        MainNode.wait_cluster_ready(1, timeout_second=0)
    assert MainNode.get_address() is None and MainNode.num_node_in_cluster() == 0


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def netns_pair():
    """Two network namespaces joined by a veth pair, 10.231.7.1 (the main node's) and 10.231.7.2
    (the worker node's); only as root with iproute2. The host's own namespace is not touched."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    tag = str(os.getpid())
    ns_main, ns_node = f"dtmain{tag}", f"dtnode{tag}"
    va, vb = f"dtva{tag}"[:15], f"dtvb{tag}"[:15]
    try:
        if _ip("netns", "add", ns_main).returncode != 0:
            pytest.skip("cannot make network namespaces here")
        steps = [("netns", "add", ns_node),
                 ("-n", ns_main, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", ns_node),
                 ("-n", ns_main, "addr", "add", "10.231.7.1/24", "dev", va),
                 ("-n", ns_node, "addr", "add", "10.231.7.2/24", "dev", vb),
                 ("-n", ns_main, "link", "set", va, "up"), ("-n", ns_node, "link", "set", vb, "up"),
                 ("-n", ns_main, "link", "set", "lo", "up"), ("-n", ns_node, "link", "set", "lo", "up")]
        for s in steps:
            r = _ip(*s)
            assert r.returncode == 0, (s, r.stderr)
        yield ns_main, ns_node
    finally:
        _ip("netns", "del", ns_node)  # deleting a namespace deletes its end of the veth, and so the pair
        _ip("netns", "del", ns_main)


def test_two_network_namespaces(netns_pair, tmp_path):
    ns_main, ns_node = netns_pair
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=TOKEN)
    addr_file, go_file = tmp_path / "addr", tmp_path / "go"
    main = subprocess.Popen(["ip", "netns", "exec", ns_main, sys.executable, "-c", (
        "import json, os, time, dtorch\n"
        f"dtorch.MainNode.set_address('10.231.7.1:0', cpu_devices=1, heartbeat_second={HB})\n"
        f"open({str(addr_file)!r}, 'w').write(dtorch.MainNode.get_address())\n"
        "dtorch.MainNode.wait_cluster_ready(1, timeout_second=60)\n"
        "print(json.dumps(dtorch.MainNode.nodes()), flush=True)\n"
        f"while not os.path.exists({str(go_file)!r}): time.sleep(0.05)\n"
        "dtorch.MainNode.shutdown()\n")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [main]
    try:
        assert wait_for(lambda: addr_file.exists() and addr_file.read_text(), 60), main.stderr
        address = addr_file.read_text()
        assert address.startswith("10.231.7.1:")
        bad = subprocess.Popen(["ip", "netns", "exec", ns_node, executable(), f"--main-node-address={address}",
                                "--token=wrong"], env=env, stderr=subprocess.PIPE, text=True)
        procs.append(bad)
        rc, err = wait_exit(bad)
        assert rc == 1 and "token does not match" in err, err
        node = subprocess.Popen(["ip", "netns", "exec", ns_node, executable(), f"--main-node-address={address}",
                                 "--cpu-devices=2"], env=env, stderr=subprocess.PIPE, text=True)
        procs.append(node)
        import json
        nodes = json.loads(main.stdout.readline())
        assert len(nodes) == 1 and nodes[0]["address"] == "10.231.7.2" and nodes[0]["first_device_id"] == 1
        go_file.write_text("go")
        rc, err = wait_exit(node)
        assert rc == 0 and "said stop" in err, err
        assert main.wait(timeout=60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)
