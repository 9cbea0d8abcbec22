"""Blocked elementwise chains (issue 14 item 2): a chain of 8 elementwise ops on a 64 MiB float32
tensor, dtorch (one CPU device) against eager PyTorch in one process.

  time    the chain on an existing input, until its result is computed: best of --repeat runs,
          interleaved with torch's and with dtorch's with the chain pass off (DTORCH_CHAINS=0's
          switch, dtorch.test.probes.chains(False)); goal: dtorch / torch <= 0.5.
  memory  bench/pipeline.py's P4/P5 measure: peak resident memory of x = rand(...) followed by
          the chain inside a function, above the resident memory at the start; goal <= 0.55.
  fused   how many of the chain's nodes ran inside chain kernels (graph_stats()["nodes_fused"]):
          the controller fuses what one of its rounds takes, so this shows the pass did apply.

Both chains of bench/pipeline.py run: "arith" (* 2, + 1, - 0.5, * 3, neg, / 7, + 2, * 0.25) and
"mixed" (exp, sin, abs, sqrt, * 3, + 1, tanh, - 0.5). Machines are noisy: run it several times.

    /usr/bin/python3 bench/chain.py
    /usr/bin/python3 bench/chain.py --repeat 7 --mib 64
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import dtorch  # noqa: E402
from dtorch.test.probes import chains, graph_stats  # noqa: E402
from pipeline import arith_ops as arith, chain as arith_chain, mixed_chain, mixed_ops as mixed, p4  # noqa: E402


def time_torch(fn, x):
    t0 = time.perf_counter()
    y = fn(x)
    t = time.perf_counter() - t0
    return t, y


def time_dtorch(fn, x, on):
    dtorch.synchronize()
    with chains(on):
        before = graph_stats()["nodes_fused"]
        t0 = time.perf_counter()
        y = fn(x)
        dtorch.synchronize()
        t = time.perf_counter() - t0
        return t, y, graph_stats()["nodes_fused"] - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    numel = args.mib * (1 << 20) // 4
    print(f"chain targets: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{torch.get_num_threads()} torch threads, {args.mib} MiB float32; best of {args.repeat}, interleaved")
    xt = torch.rand(numel)
    xd = dtorch.from_torch(xt)
    for name, fn in (("arith", arith), ("mixed", mixed)):
        tt, ton, toff, nf = [], [], [], 0
        for _ in range(args.repeat):
            t, yt = time_torch(fn, xt)
            tt.append(t)
            t, yd, nf = time_dtorch(fn, xd, True)
            ton.append(t)
            assert torch.equal(yd.to_torch(), yt), "chain result differs from eager torch"
            del yd
            t, yd, _ = time_dtorch(fn, xd, False)
            toff.append(t)
            del yd, yt
        a, b, c = min(tt), min(ton), min(toff)
        print(f"{name} time   : torch {a * 1e3:7.1f} ms  dtorch {b * 1e3:7.1f} ms  ratio {b / a:5.2f}  "
              f"(goal <= 0.5)  chains off {c * 1e3:7.1f} ms ({c / a:4.2f})  fused {nf}/8")
    for name, fn in (("arith", arith_chain), ("mixed", mixed_chain)):
        tp, dp, own = p4(numel, fn)
        print(f"{name} memory : torch {tp / 2**20:7.1f} MiB  dtorch {dp / 2**20:7.1f} MiB  ratio {dp / tp:5.2f}  "
              f"(goal <= 0.55; dtorch's own accounting: {own / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
