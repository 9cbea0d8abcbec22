"""The cost of a Python kernel on a worker: dtorch.local_map(fn) against the built-in op that
computes the same thing, on Replicate meshes of 1 and 4 CPU devices, with eager torch's time for
reference, in one process.

A loop records `steps` ops, each reading the previous one's result (y = f(y)), then reads the
last value; the figure is wall time per op. Three contenders per mesh:

  builtin     y = y * 1.0001 + 0.5 as two dtorch ops (the work the kernels do is the same as the
              user kernel's);
  local_map   y = lm(y), lm = dtorch.local_map(lambda t: t * 1.0001 + 0.5, ...) with out_meta (no
              meta-tensor run on the client: what the runtime costs, not the shape inference), and
              the same with the meta run (the default);
  torch       the same lambda on the whole tensor, eagerly.

A user kernel costs its worker the GIL (PyGILState_Ensure, a Python call, from_dlpack/to_dlpack)
and, while the client thread runs Python (recording the next ops), the worker waits for the GIL
until the client releases it: at the interpreter's switch interval (5 ms) at worst, or at the
client's next blocking wait. Small ops therefore show the GIL's hand-over cost; the --numel flag
makes the kernels bigger to see it amortised. Figures are the best of --repeat turns, run
interleaved.

    /work/main/.venv/bin/python bench/local_map.py
    /work/main/.venv/bin/python bench/local_map.py --numel 1048576 --steps 200
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

import torch

import dtorch
from dtorch import DeviceMesh, Replicate


def affine(t):
    return t * 1.0001 + 0.5


def best_of(fns, repeat):
    bests = [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            bests[i] = dt if bests[i] is None else min(bests[i], dt)
    return bests


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--numel", type=int, default=1024, help="elements per device")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--devices", type=int, nargs="+", default=[1, 4])
    args = p.parse_args(argv)
    print(f"# bench/local_map.py: {platform.node()}, {torch.get_num_threads()} torch threads, numel {args.numel}, "
          f"{args.steps} steps, best of {args.repeat}; python {sys.version.split()[0]}, torch {torch.__version__}")
    a = torch.randn(args.numel)
    for n in args.devices:
        mesh = DeviceMesh("cpu", list(range(n)))
        x = dtorch.from_torch(a, mesh, [Replicate()])
        meta = torch.empty(args.numel, device="meta")
        lm = dtorch.local_map(affine, [Replicate()], out_meta=meta)
        lm_meta = dtorch.local_map(affine, [Replicate()])

        def builtin():
            y = x
            for _ in range(args.steps):
                y = y * 1.0001 + 0.5
            return y.to_torch()

        def user():
            y = x
            for _ in range(args.steps):
                y = lm(y)
            return y.to_torch()

        def user_meta():
            y = x
            for _ in range(args.steps):
                y = lm_meta(y)
            return y.to_torch()

        def eager():
            y = a
            for _ in range(args.steps):
                y = affine(y)
            return y

        ref = eager()
        for fn in (builtin, user, user_meta):
            assert torch.allclose(fn(), ref, rtol=1e-5, atol=1e-5), fn.__name__
        tb, tu, tm, te = best_of([builtin, user, user_meta, eager], args.repeat)
        ns = 1e9 / args.steps
        print(f"{n} device(s): builtin {tb * ns:9.0f} ns/op | local_map {tu * ns:9.0f} ns/op ({tu / tb:5.2f}x builtin) "
              f"| local_map + meta run {tm * ns:9.0f} ns/op ({tm / tb:5.2f}x) | eager torch {te * ns:8.0f} ns/op "
              f"(local_map {tu / te:5.2f}x eager)")
    dtorch.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
