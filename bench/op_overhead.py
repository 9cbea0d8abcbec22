"""Per-op overhead of dtorch against eager PyTorch, in the same process.

A loop of tiny float32 adds (`a = a + b`, 20,000 by default) runs in eager
PyTorch and in dtorch on:

  * a one-device CPU mesh (1-element tensors),
  * a two-device CPU mesh with Replicate() (1 element on each device),
  * a two-device CPU mesh with Shard(0) of a 2-element tensor (1 element each).

For dtorch it reports the *client* time (until the last op call returns: what
the Python thread pays to record the ops) and the *total* time (until the final
value has been read with to_torch(), so every kernel has run). Each figure is
the best of --repeat runs after a warm-up. Ratios are dtorch / torch.

    /usr/bin/python3 bench/op_overhead.py            # 20,000 ops
    /usr/bin/python3 bench/op_overhead.py --n 2000   # a quick look
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Callable, Tuple

import torch  # noqa: E402

import dtorch  # noqa: E402


def torch_loop(numel: int, n: int) -> float:
    """Seconds for n eager adds of `numel`-element float32 tensors."""
    a = torch.ones(numel, dtype=torch.float32)
    b = torch.ones(numel, dtype=torch.float32)
    t0 = time.perf_counter()
    for _ in range(n):
        a = a + b
    t1 = time.perf_counter()
    if a[0].item() != n + 1:
        raise AssertionError(f"torch: expected {n + 1}, got {a[0].item()}")
    return t1 - t0


def dtorch_loop(numel: int, mesh: "dtorch.DeviceMesh", placements: list, n: int) -> Tuple[float, float]:
    """(client seconds, total seconds) for n dtorch adds, total including the final read."""
    a = dtorch.ones(numel, dtype=torch.float32, device_mesh=mesh, placements=placements)
    b = dtorch.ones(numel, dtype=torch.float32, device_mesh=mesh, placements=placements)
    a.graph.sync()  # start from an idle graph: the factories have run
    t0 = time.perf_counter()
    for _ in range(n):
        a = a + b
    t1 = time.perf_counter()
    value = a.to_torch()
    t2 = time.perf_counter()
    if not torch.equal(value, torch.full((numel,), float(n + 1))):
        raise AssertionError(f"dtorch: expected all {n + 1}, got {value}")
    return t1 - t0, t2 - t0


def best(fn: Callable[[], object], repeat: int):
    """Runs fn `repeat` times and keeps the fastest run (element-wise for tuples)."""
    runs = [fn() for _ in range(repeat)]
    if isinstance(runs[0], tuple):
        return tuple(min(r[i] for r in runs) for i in range(len(runs[0])))
    return min(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="adds per loop (default 20000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure, best kept (default 3)")
    args = parser.parse_args()
    n = args.n

    mesh1 = dtorch.DeviceMesh("cpu", [0])
    mesh2 = dtorch.DeviceMesh("cpu", [0, 1])
    configs = [
        ("1 device", 1, mesh1, [dtorch.Replicate()]),
        ("2 devices, Replicate", 1, mesh2, [dtorch.Replicate()]),
        ("2 devices, Shard(0)", 2, mesh2, [dtorch.Shard(0)]),
    ]

    print(f"op_overhead: {n} x `a = a + b` (float32), best of {args.repeat}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, "
          f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, {platform.machine()}")

    # Warm up both runtimes (thread start-up, allocator, first-call caches).
    warm = max(n // 10, 100)
    for _, numel, mesh, placements in configs:
        torch_loop(numel, warm)
        dtorch_loop(numel, mesh, placements, warm)

    header = (f"{'mesh':<22} {'torch us/op':>11} {'dtorch client us/op':>19} {'dtorch total us/op':>18} "
              f"{'client/torch':>12} {'total/torch':>11}")
    print(header)
    print("-" * len(header))
    for name, numel, mesh, placements in configs:
        t_torch = best(lambda: torch_loop(numel, n), args.repeat)
        t_client, t_total = best(lambda: dtorch_loop(numel, mesh, placements, n), args.repeat)
        us = 1e6 / n
        print(f"{name:<22} {t_torch * us:>11.2f} {t_client * us:>19.2f} {t_total * us:>18.2f} "
              f"{t_client / t_torch:>12.2f} {t_total / t_torch:>11.2f}")
    print("(us/op columns: microseconds per add; ratios below 1 mean dtorch is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
