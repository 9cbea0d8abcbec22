"""Worker nodes on loopback: per-op overhead and bandwidth (docs/decisions.md, "Worker nodes:
formation, tokens, heartbeats").

This process is the main node; it starts 2 worker-node processes (``dtorch-node``, 2 CPU devices
each) on 127.0.0.1 and measures:

  (a) per-op overhead: a loop of --n tiny adds (4x4 float32, ``a = a + b``, then one read) on a
      2-device mesh of worker node 0 against the same loop on the main node's own 2 devices:
      microseconds per op, each the best of --repeat runs, and the ratio remote / local;
  (b) bandwidth, for each size in --sizes: a plain ZeroMQ send of N bytes between two processes
      (pyzmq, REQ/REP on loopback, one 1-byte reply per message; also with CURVE, which dtorch's
      connections use) against dtorch moving the same bytes: a host value to a node
      (``from_torch`` on a 1-device mesh of node 0, then a sync), a node's value read back
      (``to_torch``), a copy from a mesh on node 0 to a mesh on node 1 (``redistribute``), and an
      all-reduce and an all-gather on a mesh spanning both nodes: one rank on each ([n0, n1]) and
      two on each ([n0, n0+1, n1, n1+1]). Lines the runtime does not support yet (it raises a
      RuntimeError) print "skipped" with the reason. Ratios are dtorch / ZeroMQ time (1.0: as fast
      as a plain send). The spanning lines also print the bytes one collective moved through the
      main node (``_cluster_info()``'s DATA bytes it sent plus received), load-independent, and
      that as a multiple of the tensor's N bytes, and the bytes the worker nodes sent (each counts
      its own, whatever the route). Worker nodes send each other data directly, past
      the main node, so by default these are the few messages relayed before a link is up (none
      once it is); with --relay the worker nodes run with DTORCH_DIRECT_DATA=0, every message
      passes through the main node and the bytes are all the collective moved, each counted on
      both of its hops (into and out of the main node);
  (c) compute on a node: --n/10 steps of ``x = tanh(x @ w)`` (64x256 by 256x256) on one device of
      worker node 0 against the main node's device 0, each after a 16 MiB value went there and back
      (the copies of a node's serving thread and of the main node's cluster thread): microseconds per
      step and the ratio. A service thread's idle OpenMP team would make every parallel region of
      the device's worker wait for sleeping threads (docs/decisions.md, "Service threads").

    .venv/bin/python bench/cluster.py                 # 2000 ops, 1 MiB and 16 MiB
    .venv/bin/python bench/cluster.py --n 500 --sizes 1M
    .venv/bin/python bench/cluster.py --relay         # worker-to-worker data through the main node
"""
from __future__ import annotations

import argparse
import os
import platform
import secrets
import subprocess
import sys
import time
from typing import Callable, List, Optional

import torch

import dtorch
from dtorch import MainNode, Partial, Replicate, Shard
from dtorch.node import executable

try:
    import zmq
except ImportError:  # pyzmq is in requirements.txt; without it the baseline lines are skipped
    zmq = None


COPY_WAIT_S = 20  # a node-to-node copy that has not completed by then is taken as unsupported


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


# ------------------------------------------------------------------ (a) per-op overhead

def op_loop(mesh: "dtorch.DeviceMesh", n: int) -> float:
    """Seconds for n adds of 4x4 tensors on `mesh` plus the final read (a fresh graph)."""
    g = dtorch.Graph()
    a = dtorch.zeros(4, 4, device_mesh=mesh, placements=[Shard(0)], graph=g)
    b = dtorch.ones(4, 4, device_mesh=mesh, placements=[Shard(0)], graph=g)
    g.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        a = a + b
    v = a.to_torch()
    t1 = time.perf_counter()
    if not torch.equal(v, torch.full((4, 4), float(n))):
        raise AssertionError(f"op loop: expected all {n}, got {v}")
    return t1 - t0


def compute_loop(mesh: "dtorch.DeviceMesh", n: int) -> float:
    """Seconds per step of n steps of x = tanh(x @ w) (64x256 by 256x256 float32, intra-op threads
    as eager torch) on a one-device mesh, after a 16 MiB host value was shipped there and read
    back (the copies a node's serving thread and the main node's cluster thread make)."""
    g = dtorch.Graph()
    gen = torch.Generator().manual_seed(0)
    big = dtorch.from_torch(torch.randn(1 << 22, generator=gen), mesh, [Replicate()], graph=g)
    big.to_torch()
    w = dtorch.from_torch(torch.randn(256, 256, generator=gen) / 16, mesh, [Replicate()], graph=g)
    x = dtorch.from_torch(torch.randn(64, 256, generator=gen), mesh, [Replicate()], graph=g)
    g.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        x = (x @ w).tanh()
    x.to_torch()
    return (time.perf_counter() - t0) / n


def eager_loop(n: int) -> float:
    """compute_loop's steps in eager torch on this thread: seconds per step."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(256, 256, generator=gen) / 16
    x = torch.randn(64, 256, generator=gen)
    t0 = time.perf_counter()
    for _ in range(n):
        x = (x @ w).tanh()
    return (time.perf_counter() - t0) / n


# ------------------------------------------------------------------ (b) bandwidth

ZMQ_SERVER = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.REP)
if sys.argv[1] == "curve":
    s.curve_server = True
    s.curve_secretkey = sys.argv[2].encode()
print(s.bind_to_random_port("tcp://127.0.0.1"), flush=True)
while True:
    m = s.recv(copy=False)
    s.send(b"k")
    if len(m) == 4 and m.bytes == b"stop":
        break
"""


def zmq_round_trip(nbytes: int, repeat: int, curve: bool) -> Optional[float]:
    """Best seconds for one N-byte message to another process and its 1-byte reply."""
    if zmq is None:
        return None
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.rcvtimeo = 60_000  # bounded: a lost reply raises zmq.Again
    s.linger = 0
    args = ["plain", ""]
    if curve:
        spub, ssec = zmq.curve_keypair()
        cpub, csec = zmq.curve_keypair()
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = spub, cpub, csec
        args = ["curve", ssec.decode()]
    srv = subprocess.Popen([sys.executable, "-c", ZMQ_SERVER, *args], stdout=subprocess.PIPE, text=True)
    addr = f"tcp://127.0.0.1:{int(srv.stdout.readline())}"
    try:
        s.connect(addr)
        payload = os.urandom(nbytes)
        s.send(b"warm")
        s.recv()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            s.send(payload, copy=False)
            s.recv()
            times.append(time.perf_counter() - t0)
        s.send(b"stop")
        s.recv()
        srv.wait(timeout=30)
        return min(times)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait(timeout=30)
        s.close(0)
        ctx.term()


def timed(setup: Callable[[], Callable[[], None]], repeat: int) -> float:
    """Best seconds of the step `setup()` returns (setup itself untimed, once per repeat)."""
    out = []
    for _ in range(repeat):
        step = setup()
        t0 = time.perf_counter()
        step()
        out.append(time.perf_counter() - t0)
    return min(out)


def unsupported(e: RuntimeError) -> bool:
    s = str(e)
    return "not supported yet" in s or "spanning nodes" in s


def copies_work(a0: int, b0: int) -> Optional[str]:
    """None when a copy between the two worker nodes completes (checked once, on 16 floats), else
    why not. Before cross-node copies exist such a copy never completes (the receiving node waits
    for a sender in another process) and blocks those nodes' streams for good, so it is tried once,
    last, with a bounded wait."""
    g = dtorch.Graph()
    t = torch.arange(16.0)
    x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [a0]), [Replicate()], graph=g)
    try:
        f = x.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [b0]), placements=[Replicate()]).to_torch_async()
        if not f.wait_for(COPY_WAIT_S * 1000):
            return (f"no answer within {COPY_WAIT_S} s: copies between worker nodes are not supported yet "
                    "(the nodes are killed at the end)")
        if not torch.equal(f.get(), t):
            raise AssertionError("node 0 -> node 1 copy: wrong value")
    except RuntimeError as e:
        if not unsupported(e):
            raise
        return str(e).split("\n")[0][:110]
    return None


def copy_time(nbytes: int, repeat: int, a0: int, b0: int) -> float:
    """Best seconds of a copy of `nbytes` from a mesh on node 0 to a mesh on node 1 (then a sync)."""
    t = torch.randn(nbytes // 4)
    g = dtorch.Graph()
    on_b = dtorch.DeviceMesh("cpu", [b0])

    def setup():
        src = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", [a0]), [Replicate()], graph=g)
        g.sync()

        def step():
            # kept alive across the sync: a value nothing holds is dropped before it is computed
            y = src.redistribute(device_mesh=on_b, placements=[Replicate()])
            g.sync()
            del y
        return step

    return timed(setup, repeat)


def wire_bytes() -> int:
    """DATA payload bytes the main node sent plus received so far (what passed through it)."""
    info = dtorch._C._cluster_info()
    return int(info.get("data_bytes_sent", 0)) + int(info.get("data_bytes_received", 0))


def nodes_sent() -> int:
    """Data bytes the worker nodes sent to other nodes so far (each counts its own, whatever the
    route; exact after a sync)."""
    return sum(int(n["data_bytes_sent"]) for n in MainNode.nodes())


def dtorch_lines(nbytes: int, repeat: int, a0: int, b0: int) -> List[tuple]:
    """(name, seconds or None, reason, wire bytes or None) for each dtorch transfer of `nbytes`
    but node-to-node copies."""
    numel = nbytes // 4
    t = torch.randn(numel)
    on_a = dtorch.DeviceMesh("cpu", [a0])
    g = dtorch.Graph()
    lines = []

    def to_node():
        def step():
            y = dtorch.from_torch(t, on_a, [Replicate()], graph=g)
            g.sync()
            del y
        g.sync()
        return step

    lines.append(("host -> node (from_torch + sync)", timed(to_node, repeat), "", None))

    def from_node():
        x = dtorch.from_torch(t, on_a, [Replicate()], graph=g)
        g.sync()
        return lambda: x.to_torch()

    x = dtorch.from_torch(t, on_a, [Replicate()], graph=g)
    if not torch.equal(x.to_torch(), t):
        raise AssertionError("node read: wrong value")
    lines.append(("node -> host (to_torch)", timed(from_node, repeat), "", None))

    def attempt(name: str, check: Callable[[], None], setup: Callable[[], Callable[[], None]]):
        try:
            w0, n0 = wire_bytes(), nodes_sent()
            check()
            moved = (wire_bytes() - w0, nodes_sent() - n0)
        except RuntimeError as e:
            if not unsupported(e):
                raise
            lines.append((name, None, str(e).split("\n")[0][:110], None))
            return
        lines.append((name, timed(setup, repeat), "", moved))

    def collective(ids: List[int], placement) -> tuple:
        """(check, setup) for the redistribute of `t` from `placement` to Replicate on mesh `ids`:
        an all-reduce from Partial, an all-gather from Shard(0)."""
        def check():
            x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", ids), [placement], graph=g)
            g.sync()
            y = x.redistribute(placements=[Replicate()])
            g.sync()  # the bytes are counted once the collective ran, before the read
            if not torch.equal(y.to_torch(), t):
                raise AssertionError(f"{placement} -> Replicate on {ids}: wrong value")

        def setup():
            x = dtorch.from_torch(t, dtorch.DeviceMesh("cpu", ids), [placement], graph=g)
            g.sync()

            def step():
                y = x.redistribute(placements=[Replicate()])
                g.sync()
                del y
            return step
        return check, setup

    for label, ids in (("1 rank on each node", [a0, b0]), ("2 ranks on each node", [a0, a0 + 1, b0, b0 + 1])):
        attempt(f"all-reduce, {label}", *collective(ids, Partial()))
        attempt(f"all-gather, {label}", *collective(ids, Shard(0)))
    return lines


def parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="tiny adds per loop (default 2000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the best is shown (default 5)")
    ap.add_argument("--sizes", default="1M,16M", help="bytes per transfer, comma-separated (default 1M,16M)")
    ap.add_argument("--relay", action="store_true",
                    help="worker nodes without direct links (DTORCH_DIRECT_DATA=0): all data via the main node")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]

    token = secrets.token_hex(32)
    os.environ["DTORCH_CLUSTER_TOKEN"] = token
    if args.relay:
        os.environ["DTORCH_DIRECT_DATA"] = "0"  # read by the worker nodes, which inherit it
    MainNode.set_address("127.0.0.1:0", cpu_devices=2)
    nodes = []
    try:
        for _ in range(2):
            nodes.append(subprocess.Popen([executable(), f"--main-node-address={MainNode.get_address()}",
                                           "--cpu-devices=2", "--quiet", "--connect-timeout=60"]))
        MainNode.wait_cluster_ready(2, timeout_second=60)
        info = MainNode.nodes()
        a0, b0 = info[0]["first_device_id"], info[1]["first_device_id"]
        print(f"dtorch cluster bench: main node + 2 worker nodes on loopback "
              f"({'relayed through the main node' if args.relay else 'direct worker-to-worker links'}); "
              f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
              f"pyzmq {zmq.__version__ if zmq else 'absent'}")

        local = dtorch.DeviceMesh("cpu", [0, 1])
        remote = dtorch.DeviceMesh("cpu", [a0, a0 + 1])
        op_loop(local, 200), op_loop(remote, 200)  # warm-up
        tl = best(lambda: op_loop(local, args.n), args.repeat)
        tr = best(lambda: op_loop(remote, args.n), args.repeat)
        print(f"\n(a) {args.n} adds of 4x4 float32 + one read, 2-device meshes, best of {args.repeat}")
        print(f"    local mesh [0, 1]:                {tl / args.n * 1e6:8.2f} us/op")
        print(f"    worker node 0's mesh [{a0}, {a0 + 1}]:     {tr / args.n * 1e6:8.2f} us/op")
        print(f"    ratio remote / local:             {tr / tl:8.2f}")

        compute_loop(dtorch.DeviceMesh("cpu", [0]), 20), compute_loop(dtorch.DeviceMesh("cpu", [a0]), 20)
        cl = best(lambda: compute_loop(dtorch.DeviceMesh("cpu", [0]), args.n // 10), args.repeat)
        cr = best(lambda: compute_loop(dtorch.DeviceMesh("cpu", [a0]), args.n // 10), args.repeat)
        print(f"\n(c) {args.n // 10} steps of tanh(x @ w), 64x256 @ 256x256, one device, after a 16 MiB "
              f"value went there and back, best of {args.repeat}")
        ce = best(lambda: eager_loop(args.n // 10), args.repeat)
        print(f"    eager torch, this process:        {ce * 1e6:8.1f} us/step")
        print(f"    local device 0:                   {cl * 1e6:8.1f} us/step")
        print(f"    worker node 0's device {a0}:         {cr * 1e6:8.1f} us/step")
        print(f"    ratio remote / local:             {cr / cl:8.2f}")

        results = []
        for nbytes in sizes:
            base = zmq_round_trip(nbytes, args.repeat, curve=False)
            curve = zmq_round_trip(nbytes, args.repeat, curve=True)
            results.append((nbytes, base, curve, dtorch_lines(nbytes, args.repeat, a0, b0)))
        copy_why = copies_work(a0, b0)  # last: it may leave both nodes blocked
        for nbytes, _, _, lines in results:
            lines.append(("node 0 -> node 1 (redistribute)",
                          copy_time(nbytes, args.repeat, a0, b0) if copy_why is None else None, copy_why, None))
        for nbytes, base, curve, lines in results:
            print(f"\n(b) {nbytes / (1 << 20):g} MiB, best of {args.repeat}")
            for name, sec in (("ZeroMQ send, plain", base), ("ZeroMQ send, CURVE", curve)):
                if sec is None:
                    print(f"    {name:36s} skipped (no pyzmq)")
                else:
                    print(f"    {name:36s} {sec * 1e3:9.2f} ms {nbytes / sec / 1e9:7.2f} GB/s")
            for name, sec, why, moved in lines:
                if sec is None:
                    print(f"    {name:36s} skipped: {why}")
                    continue
                ratio = f"x{sec / base:6.2f} plain" if base else ""
                ratio += f", x{sec / curve:6.2f} CURVE" if curve else ""
                wire = (f"; {moved[0]} B via the main node ({moved[0] / nbytes:.2f} N), worker nodes sent "
                        f"{moved[1]} B ({moved[1] / nbytes:.2f} N)" if moved is not None else "")
                print(f"    {name:36s} {sec * 1e3:9.2f} ms {nbytes / sec / 1e9:7.2f} GB/s  {ratio}{wire}")
    finally:
        MainNode.shutdown()
        for p in nodes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a node blocked in a copy it cannot finish
                p.kill()
                p.wait(timeout=30)
        os._exit(0)  # a graph blocked on such a node must not hold the exit


if __name__ == "__main__":
    main()
