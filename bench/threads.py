"""CPU time of each dtorch thread role per logical op, as devices are added.

A loop of tiny float32 adds (`a = a + b`, 1 element per device) on a Replicate mesh of 1, 2, 4 and 8
CPU devices, timed by the CPU time each thread spent (/proc/self/task/*/schedstat: the kernel's
per-thread run time, which another process's load does not inflate the way it does wall time).
Threads are told apart by the names dtorch gives them: the client (the calling thread), the
controller (dt-controller) and the workers (dt-cpu<N>, their OpenMP helpers included). Eager torch's
own loop is timed the same way beside it (the calling thread's CPU time).

    .venv/bin/python bench/threads.py                 # 20,000 ops, meshes of 1, 2, 4, 8 devices
    .venv/bin/python bench/threads.py --n 5000 --devices 1 8

Reported per logical op (one `a + b`, whatever the mesh): the client's, the controller's and all
workers' CPU nanoseconds, and the controller's growth over the one-device mesh.
"""
from __future__ import annotations

import argparse
import os
import platform

import torch

import dtorch
from dtorch import DeviceMesh, Replicate


def thread_cpu_ns():
    """{tid: (name, cpu ns)} of every thread of this process."""
    out = {}
    base = "/proc/self/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue  # the thread ended while we looked
        out[int(tid)] = (name, ns)
    return out


def role(name: str, tid: int, me: int) -> str:
    if tid == me:
        return "client"
    if name.startswith("dt-controller"):
        return "controller"
    if name.startswith("dt-cpu"):
        return "workers"
    return "other"


def by_role(before, after, me):
    roles = {"client": 0, "controller": 0, "workers": 0, "other": 0}
    for tid, (name, ns) in after.items():
        prev = before.get(tid, (name, 0))[1]
        roles[role(name, tid, me)] += ns - prev
    return roles


def dtorch_run(ndev: int, n: int):
    mesh = DeviceMesh("cpu", list(range(ndev)))
    a = dtorch.zeros(1, device_mesh=mesh, placements=[Replicate()])
    b = dtorch.ones(1, device_mesh=mesh, placements=[Replicate()])
    for _ in range(200):  # warm: streams started, pools filled
        a = a + b
    a.to_torch()
    me = threading_native_id()
    before = thread_cpu_ns()
    for _ in range(n):
        a = a + b
    a.to_torch()
    after = thread_cpu_ns()
    return by_role(before, after, me)


def threading_native_id() -> int:
    import threading

    return threading.get_native_id()


def torch_run(n: int) -> int:
    a = torch.zeros(1)
    b = torch.ones(1)
    for _ in range(200):
        a = a + b
    me = threading_native_id()
    t0 = thread_cpu_ns()[me][1]
    for _ in range(n):
        a = a + b
    return thread_cpu_ns()[me][1] - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per mesh; the least controller time is kept")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"threads: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"{args.n} tiny adds on a Replicate mesh; CPU ns per logical op, least of {args.repeat} runs")
    eager = min(torch_run(args.n) for _ in range(args.repeat)) / args.n
    print(f"eager torch (calling thread): {eager:8.0f} ns/op")
    first = None
    for ndev in args.devices:
        runs = [dtorch_run(ndev, args.n) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["controller"])
        ctl = best["controller"] / args.n
        first = first or ctl
        print(f"{ndev} device{'s' if ndev > 1 else ' '}: client {best['client'] / args.n:8.0f}  "
              f"controller {ctl:8.0f}  workers {best['workers'] / args.n:8.0f}  ns/op   "
              f"controller x{ctl / first:.2f} of 1 device")


if __name__ == "__main__":
    main()
