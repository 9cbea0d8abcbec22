"""Bandwidth of dtorch's in-process collectives against a plain memcpy, in one process.

On a two-device CPU mesh it times, for a float32 tensor of --mib MiB (64 by default):

  * all-gather   Shard(0)  -> Replicate()   each device ends with the full tensor
  * all-reduce   Partial() -> Replicate()   each device sums both parts
  * all-to-all   Shard(0)  -> Shard(1)

and a plain copy of the same bytes (`torch.Tensor.copy_` into a preallocated buffer, one thread:
memcpy speed). The figure for each collective is the best of --repeat runs (after one warm-up) of
`x.redistribute(...)` followed by `graph.sync()`, each dropping the previous result first; its "bandwidth" is the bytes one device ends up
holding (the full tensor for all-gather/all-reduce, its shard for all-to-all) divided by the time.
The ratio is collective bandwidth / memcpy bandwidth (higher is better; target >= 0.8 for
all-gather).

    /usr/bin/python3 bench/redistribute.py
    /usr/bin/python3 bench/redistribute.py --mib 16 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch  # noqa: E402

import dtorch  # noqa: E402
from dtorch import Partial, Replicate, Shard  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=64, help="tensor size in MiB (float32)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the best is kept")
    args = ap.parse_args()

    numel = args.mib * (1 << 20) // 4
    rows = 1024
    t = torch.randn(rows, numel // rows)
    nbytes = t.numel() * 4
    mesh = dtorch.DeviceMesh("cpu", [0, 1])
    graph = dtorch.Graph.default_graph()

    buf = torch.empty_like(t)
    t_copy = best(lambda: buf.copy_(t), args.repeat)
    bw_copy = nbytes / t_copy

    cases = [
        ("all-gather", [Shard(0)], [Replicate()], nbytes),
        ("all-reduce", [Partial()], [Replicate()], nbytes),
        ("all-to-all", [Shard(0)], [Shard(1)], nbytes // 2),
    ]
    print(f"redistribute: {args.mib} MiB float32 on DeviceMesh('cpu', [0, 1]), best of {args.repeat}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{platform.machine()}")
    print(f"{'collective':<12} {'ms':>9} {'GB/s':>8} {'memcpy GB/s':>12} {'ratio':>7}")
    print("-" * 52)
    print(f"{'memcpy':<12} {t_copy * 1e3:9.2f} {bw_copy / 1e9:8.2f} {bw_copy / 1e9:12.2f} {1.0:7.2f}")
    for name, src, dst, moved in cases:
        x = dtorch.from_torch(t, mesh, src)
        graph.sync()
        ys = []

        def run():
            # Drop the previous result first: the steady state of a program that
            # redistributes every step, whose buffers the allocator cache reuses.
            ys.clear()  # noqa: F821 - run() is called only before the `del` below
            ys.append(x.redistribute(placements=dst))  # noqa: F821
            graph.sync()

        run()  # warm-up

        seconds = best(run, args.repeat)
        got = ys[-1].to_torch()
        if not torch.allclose(got, t, rtol=1e-6, atol=1e-6):
            raise AssertionError(f"{name}: wrong result")
        del ys, got, x
        bw = moved / seconds
        print(f"{name:<12} {seconds * 1e3:9.2f} {bw / 1e9:8.2f} {bw_copy / 1e9:12.2f} {bw / bw_copy:7.2f}")
    print("(ratio = collective bandwidth / memcpy bandwidth; higher is better, target >= 0.8 for all-gather)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
