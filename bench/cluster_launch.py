"""Launching and joining clusters on loopback (docs/cluster.md, "Launchers"): what
``dtorch.cluster.init()`` costs, and how soon a worker node started while a program runs can be used.

  (a) launch: --world processes started with torchrun's variables (by hand, as torchrun sets them),
      each running ``import dtorch; dtorch.cluster.init(cpu_devices=1)``; rank 0 prints when init()
      returned (every other rank joined). Printed: seconds from starting the processes to that
      return, against one process's ``import dtorch`` alone (what every rank pays before init() runs),
      best of --repeat, and the ratio;
  (b) join: this process is a main node running a loop of small ops (4x4 adds, each read) on its
      own device; a ``dtorch-node`` is started meanwhile. Printed: milliseconds from its start to
      its being alive (a process start included), then from alive to the first read of an op on a
      new mesh of its device (host value shipped, op run there, result back), against one such
      step of the loop on the main node's own device, best of --repeat, and the ratio;
  (c) trace: --n adds (4x4, ``a = a + b``, then one read) on a worker node's device, untraced and
      inside ``dtorch.profiler.trace(None)`` (the node records each kernel and sends the records
      with its answers; the main node merges them), microseconds per op, best of --repeat, the
      ratio, and the kernels of the worker node the trace holds.

    .venv/bin/python bench/cluster_launch.py
    .venv/bin/python bench/cluster_launch.py --world 4 --repeat 5
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import torch

import dtorch
from dtorch.node import executable

INIT = "import time, dtorch; dtorch.cluster.init(cpu_devices=1); print(time.time(), flush=True)"


def free_port() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p + 1))
                b.bind(("127.0.0.1", p + 2))
            return p
        except OSError:
            continue
    raise SystemExit("no three consecutive free ports")


def launch_once(world: int) -> float:
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    base.update({"WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                 "DTORCH_CLUSTER_TOKEN": "bench", "TORCHELASTIC_RUN_ID": "bench"})
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", INIT], env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, text=True) for r in range(world)]
    out, _ = procs[0].communicate(timeout=300)
    for p in procs[1:]:
        p.wait(timeout=60)
    return float(out.split()[-1]) - t0


def import_once() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import dtorch"], check=True, timeout=300)
    return time.perf_counter() - t0


def join_once(mesh_local: dtorch.DeviceMesh, index: int) -> tuple:
    x = dtorch.from_torch(torch.ones(4, 4), mesh_local, [dtorch.Replicate()])
    t0 = time.perf_counter()
    p = subprocess.Popen([executable(), f"--main-node-address={dtorch.MainNode.get_address()}", "--cpu-devices=1",
                          "--quiet"])
    while dtorch.MainNode.num_node_in_cluster() < 1:  # the program goes on meanwhile
        x = x + 1
        x.to_torch()
    joined = time.perf_counter()
    first = dtorch.MainNode.nodes()[index]["first_device_id"]
    y = dtorch.from_torch(torch.ones(4, 4), dtorch.DeviceMesh("cpu", [first]), [dtorch.Replicate()]) * 2
    y.to_torch()
    used = time.perf_counter() - joined
    t1 = time.perf_counter()
    z = dtorch.from_torch(torch.ones(4, 4), mesh_local, [dtorch.Replicate()]) * 2
    z.to_torch()
    local = time.perf_counter() - t1
    dtorch.MainNode.shutdown()
    p.wait(timeout=60)
    return joined - t0, used, local


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")

    launch = min(launch_once(args.world) for _ in range(args.repeat))
    imp = min(import_once() for _ in range(args.repeat))
    print(f"(a) launch of {args.world} ranks to init() returning on rank 0: {launch:.2f} s; "
          f"import dtorch alone {imp:.2f} s; ratio {launch / imp:.2f}")

    os.environ.setdefault("DTORCH_CLUSTER_TOKEN", "bench")
    joins, uses, locals_ = [], [], []
    for _ in range(args.repeat):
        dtorch.MainNode.set_address("127.0.0.1:0", cpu_devices=1)
        j, u, loc = join_once(dtorch.DeviceMesh("cpu", [0]), 0)
        joins.append(j)
        uses.append(u)
        locals_.append(loc)
    print(f"(b) a worker node started while a program runs: alive {min(joins) * 1e3:.0f} ms after its start; "
          f"then the first op on its device read {min(uses) * 1e3:.1f} ms later; the same op on the main node's "
          f"device {min(locals_) * 1e3:.1f} ms; ratio {min(uses) / min(locals_):.1f}")

    dtorch.MainNode.set_address("127.0.0.1:0", cpu_devices=1)
    p = subprocess.Popen([executable(), f"--main-node-address={dtorch.MainNode.get_address()}", "--cpu-devices=1",
                          "--quiet"])
    dtorch.MainNode.wait_cluster_ready(1, timeout_second=120)
    mesh = dtorch.DeviceMesh("cpu", [dtorch.MainNode.nodes()[0]["first_device_id"]])

    def loop() -> float:
        a = dtorch.from_torch(torch.zeros(4, 4), mesh, [dtorch.Replicate()])
        b = dtorch.from_torch(torch.ones(4, 4), mesh, [dtorch.Replicate()])
        a.to_torch()
        t0 = time.perf_counter()
        for _ in range(args.n):
            a = a + b
        a.to_torch()
        return (time.perf_counter() - t0) / args.n * 1e6

    loop()  # warm-up
    plain = min(loop() for _ in range(args.repeat))
    traced, kernels = [], 0
    for _ in range(args.repeat):
        with dtorch.profiler.trace(None) as tr:
            traced.append(loop())
        workers = {e["pid"] for e in tr.events
                   if e.get("name") == "process_name" and e["args"]["name"].startswith("worker node")}
        kernels = sum(1 for e in tr.events if e.get("cat") == "kernel" and e["pid"] in workers)
    print(f"(c) {args.n} adds on a worker node's device: {plain:.1f} us/op untraced, {min(traced):.1f} us/op traced; "
          f"ratio {min(traced) / plain:.2f}; the trace held {kernels} of the node's kernels")
    dtorch.MainNode.shutdown()
    p.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
