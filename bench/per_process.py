"""What a process per device costs: the same programs on ``Graph(GraphOption(per_device_per_process=True))``
(each CPU device's kernels in a local dtorch-node process, over ZeroMQ on loopback) and on an
ordinary graph (a worker thread per device), in one process, with eager torch for reference.

Two programs per mesh (1 and 2 devices, Replicate), each recording ``steps`` ops where every op
reads the previous result, then reading the last value; the figure is wall time per op:

  tiny        y = y * 1.0001 + 0.5 on --numel elements per device (the per-op overhead: for the
              processes, each round's kernels leave as a batch message and the node answers);
  matmul      y = (y @ w) * 0.5 on --dim x --dim blocks (compute-bound: the overhead amortised).

Figures are the best of --repeat turns, run interleaved; the ratios are processes / threads.

    /work/main/.venv/bin/python bench/per_process.py
"""
from __future__ import annotations

import argparse
import platform
import sys

import torch

import dtorch
from dtorch import DeviceMesh, GraphOption, Replicate
from local_map import best_of


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--numel", type=int, default=1024, help="elements per device (tiny)")
    p.add_argument("--dim", type=int, default=256, help="matrix side (matmul)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print(f"# bench/per_process.py: {platform.node()}, {torch.get_num_threads()} torch threads, numel {args.numel}, "
          f"dim {args.dim}, {args.steps} steps, best of {args.repeat}; torch {torch.__version__}")
    threads = dtorch.Graph()
    procs = dtorch.Graph(GraphOption(per_device_per_process=True, num_devices=2))
    a = torch.randn(args.numel)
    m = torch.randn(args.dim, args.dim) / args.dim ** 0.5
    for n in (1, 2):
        mesh = DeviceMesh("cpu", list(range(n)))

        def tiny(g):
            def run():
                y = dtorch.from_torch(a, mesh, [Replicate()], graph=g)
                for _ in range(args.steps):
                    y = y * 1.0001 + 0.5
                return y.to_torch()
            return run

        def matmul(g):
            def run():
                y = dtorch.from_torch(m, mesh, [Replicate()], graph=g)
                w = dtorch.from_torch(m, mesh, [Replicate()], graph=g)
                for _ in range(args.steps):
                    y = (y @ w) * 0.5
                return y.to_torch()
            return run

        def eager_tiny():
            y = a
            for _ in range(args.steps):
                y = y * 1.0001 + 0.5
            return y

        def eager_matmul():
            y = m
            for _ in range(args.steps):
                y = (y @ m) * 0.5
            return y

        for name, prog, eager, ops in (("tiny", tiny, eager_tiny, 2), ("matmul", matmul, eager_matmul, 2)):
            fns = [prog(threads), prog(procs), eager]
            assert torch.equal(fns[0](), fns[1]()), name  # same results either way
            tt, tp, te = best_of(fns, args.repeat)
            ns = 1e9 / (args.steps * ops)
            print(f"{n} device(s) {name:7s}: threads {tt * ns:9.0f} ns/op | processes {tp * ns:9.0f} ns/op "
                  f"({tp / tt:5.2f}x threads) | eager torch {te * ns:8.0f} ns/op")
    return 0


if __name__ == "__main__":
    sys.exit(main())
