"""Removing and replacing worker nodes on loopback: how long ``MainNode.remove(node, to=)`` and
``MainNode.replace(lost, new)`` take for N MiB of values (docs/cluster.md, "Removing a node while
the program runs", "Replacing a lost node").

This process is the main node (2 CPU devices); for each size in --sizes it starts worker nodes
(``dtorch-node``, 2 CPU devices each) on 127.0.0.1 and measures, each the best of --repeat runs:

  (a) drain: a value of N MiB made on worker node A's 2 devices (Shard(0), ``from_torch`` then
      ``* 1``), ``remove(A, to=[0, 1])``: the copy to the main node's devices, the rebind and the
      stop; against reading the same value back (``to_torch``), the same bytes crossing the same
      connection: the ratio remove / read;
  (b) replace: a value of N MiB copied from the main node's devices to node B's (``redistribute``)
      and doubled there (``* 2``), node B SIGKILLed, a node C started, and, once B is lost and C
      registered, ``replace(B, C)``: the recompute of both values on C plus a sync; against doing
      that copy and multiply afresh on C: the ratio replace / recompute by hand. The time until the
      loss is seen (two heartbeat intervals) is not in it.

    .venv/bin/python bench/cluster_recover.py                   # 4, 16 and 64 MiB
    .venv/bin/python bench/cluster_recover.py --sizes 1,8 --repeat 1
"""
from __future__ import annotations

import argparse
import os
import platform
import secrets
import signal
import subprocess
import sys
import time

import torch

import dtorch
from dtorch import MainNode, Shard
from dtorch.node import executable


def start_node() -> subprocess.Popen:
    return subprocess.Popen([executable(), f"--main-node-address={MainNode.get_address()}", "--cpu-devices=2",
                             "--quiet"])


def join(procs: list) -> dict:
    """Starts a worker node, waits for it to be alive; its nodes() entry."""
    before = len(MainNode.nodes())
    procs.append(start_node())
    deadline = time.monotonic() + 60
    while len(MainNode.nodes()) == before or MainNode.nodes()[-1]["state"] != "alive":
        if time.monotonic() > deadline:
            raise SystemExit("a worker node did not register within 60 s")
        time.sleep(0.02)
    return MainNode.nodes()[-1]


def value(mib: int) -> torch.Tensor:
    return torch.randn(mib * (1 << 20) // 4 // 256, 256, generator=torch.Generator().manual_seed(mib))


def drain_once(mib: int, procs: list) -> tuple:
    node = join(procs)
    a = node["first_device_id"]
    g = dtorch.Graph()
    x = dtorch.from_torch(value(mib), dtorch.DeviceMesh("cpu", [a, a + 1]), [Shard(0)], graph=g) * 1
    g.sync()
    t0 = time.perf_counter()
    x.to_torch()
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    MainNode.remove(node["index"], to=[0, 1])
    removed = time.perf_counter() - t0
    procs[-1].wait(timeout=60)
    return removed, read


def replace_once(mib: int, procs: list) -> tuple:
    node = join(procs)
    b = node["first_device_id"]
    g = dtorch.Graph()
    src = dtorch.from_torch(value(mib), dtorch.DeviceMesh("cpu", [0, 1]), [Shard(0)], graph=g)
    y = src.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [b, b + 1]), placements=[Shard(0)])
    z = y * 2
    g.sync()
    os.kill(node["pid"], signal.SIGKILL)
    procs[-1].wait(timeout=60)
    deadline = time.monotonic() + 60
    while MainNode.nodes()[node["index"]]["state"] != "lost":
        if time.monotonic() > deadline:
            raise SystemExit("the killed node was not seen lost within 60 s")
        time.sleep(0.02)
    new = join(procs)
    t0 = time.perf_counter()
    got = MainNode.replace(node["index"], new["index"])
    g.sync()
    replaced = time.perf_counter() - t0
    assert got == {"recomputed": 2, "lost": 0}, got
    c = new["first_device_id"]
    t0 = time.perf_counter()
    y2 = src.redistribute(device_mesh=dtorch.DeviceMesh("cpu", [c, c + 1]), placements=[Shard(0)])
    z2 = y2 * 2
    g.sync()
    fresh = time.perf_counter() - t0
    assert torch.equal(z.to_torch(), z2.to_torch())
    del y, z, y2, z2
    # the new node leaves, so the next size starts from an empty cluster
    MainNode.remove(new["index"], to=[0, 1])
    procs[-1].wait(timeout=60)
    return replaced, fresh


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4,16,64", help="MiB, comma-separated (default 4,16,64)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("DTORCH_CLUSTER_TOKEN", secrets.token_hex(16))
    MainNode.set_address("127.0.0.1:0", cpu_devices=2, heartbeat_second=0.5)
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}; best of {args.repeat}")
    print(f"{'MiB':>5} {'remove(to=) ms':>15} {'read ms':>9} {'ratio':>6} {'replace ms':>11} {'by hand ms':>11} "
          f"{'ratio':>6}")
    procs: list = []
    try:
        for mib in (int(s) for s in args.sizes.split(",")):
            d = [drain_once(mib, procs) for _ in range(args.repeat)]
            r = [replace_once(mib, procs) for _ in range(args.repeat)]
            rm, rd = min(x[0] for x in d), min(x[1] for x in d)
            rp, fr = min(x[0] for x in r), min(x[1] for x in r)
            print(f"{mib:>5} {rm * 1e3:>15.1f} {rd * 1e3:>9.1f} {rm / rd:>6.2f} {rp * 1e3:>11.1f} {fr * 1e3:>11.1f} "
                  f"{rp / fr:>6.2f}", flush=True)
    finally:
        MainNode.shutdown()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
