"""Communication/compute overlap: a 2-device tensor-parallel MLP, collectives on the communication
stream (the default) against collectives on the compute stream (DTORCH_OVERLAP=0), and the
controller's schedule (the default) against program order (DTORCH_SCHEDULE=0), in one process, with
eager torch's time for reference.

The model: 4 layers, each a column-parallel Linear (weight Shard(1)) -> GELU -> row-parallel Linear
(weight Shard(0), giving a Partial) -> redistribute to Replicate (an all-reduce), run on two
independent micro-batches written in two ways:

  interleaved  by hand, layer by layer: micro-batch B's layer-i compute follows A's layer-i
               all-reduce in the program, so it can run while that all-reduce is in flight;
  sequential   all of A's layers, then all of B's, as a user would write it: in program order A's
               layer-2 compute waits for A's layer-1 all-reduce before B's compute can start, and
               only the schedule (docs/decisions.md, "Overlap by schedule") lowers B's compute
               ahead of it.

With DTORCH_OVERLAP=0 every all-reduce queues behind the compute on the same stream and there is
no overlap to schedule for. The peak of dtorch's own memory accounting (dtorch.memory_stats) is
printed per contender: the schedule makes values earlier, and must not grow it much.

The graphs live in this process: the switches are read when a graph is created, so each graph is
created with its variables set. Figures are the best of --repeat turns, run interleaved so a shared
machine's slow spells hit every contender alike.

    /usr/bin/python3 bench/overlap.py
    /usr/bin/python3 bench/overlap.py --hidden 1024 --batch 64 --steps 10 --repeat 5
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

import dtorch
import dtorch.nn.functional as F
from dtorch.test.probes import graph_stats
from dtorch import DeviceMesh, Replicate, Shard

LAYERS = 4


def interleaved(fns, repeat):
    """Best of `repeat` for each function, running them in turns."""
    bests = [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            r = fn()
            bests[i] = r if bests[i] is None else min(bests[i], r)
    return bests


def make_graph(overlap: bool, schedule: bool = True) -> dtorch.Graph:
    env = {"DTORCH_OVERLAP": "1" if overlap else "0", "DTORCH_SCHEDULE": "1" if schedule else "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return dtorch.Graph()
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def weights(hidden, ffn, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(hidden, ffn, generator=gen) / hidden**0.5,
             torch.randn(ffn, hidden, generator=gen) / ffn**0.5) for _ in range(LAYERS)]


def torch_step(xs, ws):
    for w1, w2 in ws:
        xs = [torch.nn.functional.gelu(x @ w1) @ w2 for x in xs]
    return xs


def dtorch_setup(graph, mesh, xs, ws):
    dws = [(dtorch.from_torch(w1, mesh, [Shard(1)], graph=graph),
            dtorch.from_torch(w2, mesh, [Shard(0)], graph=graph)) for w1, w2 in ws]
    dxs = [dtorch.from_torch(x, mesh, [Replicate()], graph=graph) for x in xs]
    return dxs, dws


def layer(x, w1, w2):
    return (F.gelu(x @ w1) @ w2).redistribute(placements=[Replicate()])


def interleaved_step(xs, ws):
    for w1, w2 in ws:
        # Layer by layer, micro-batch by micro-batch: B's compute follows A's all-reduce in the
        # program, and depends only on B's own previous layer.
        xs = [layer(x, w1, w2) for x in xs]
    return xs


def sequential_step(xs, ws):
    out = []
    for x in xs:
        # All of one micro-batch's layers, then the next one's.
        for w1, w2 in ws:
            x = layer(x, w1, w2)
        out.append(x)
    return out


STEPS = {"interleaved": interleaved_step, "sequential": sequential_step}


def run_torch(xs, ws, steps):
    t0 = time.perf_counter()
    # Each step feeds the next, so every step's work is read (a step whose result were dropped
    # unread would be eliminated by dtorch's dead-node pass and cost nothing).
    out = xs
    for _ in range(steps):
        out = torch_step(out, ws)
    _ = [o.sum().item() for o in out]
    return time.perf_counter() - t0


def run_dtorch(graph, step, xs, ws, steps):
    graph.sync()
    t0 = time.perf_counter()
    out = xs
    for _ in range(steps):
        out = step(out, ws)
    _ = [o.to_torch() for o in out]
    return time.perf_counter() - t0


def peak_and_reorders(graph, mesh, step, xs, ws, steps):
    """dtorch's own peak bytes on cpu:0 over one run (process-wide accounting: run alone), and the
    nodes the schedule lowered ahead of their turn per step."""
    graph.sync()
    dtorch.reset_peak_memory_stats()
    r0 = graph_stats(graph)["nodes_reordered"]
    run_dtorch(graph, step, xs, ws, steps)
    return dtorch.memory_stats(mesh)["cpu:0"]["peak"], (graph_stats(graph)["nodes_reordered"] - r0) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64, help="rows per micro-batch (two micro-batches)")
    ap.add_argument("--steps", type=int, default=10, help="forward passes per timed run")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"overlap: 2-device TP MLP, {LAYERS} layers, hidden {args.hidden}, ffn {args.ffn}, "
          f"2 micro-batches of {args.batch}, {args.steps} steps; python {platform.python_version()}, "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs; best of {args.repeat}, interleaved")
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(args.batch, args.hidden, generator=gen) for _ in range(2)]
    ws = weights(args.hidden, args.ffn)
    mesh = DeviceMesh("cpu", [0, 1])
    names = ["schedule on", "schedule off", "overlap off"]
    graphs = [make_graph(True, True), make_graph(True, False), make_graph(False)]
    setups = [dtorch_setup(g, mesh, xs, ws) for g in graphs]
    # Warm-up, and a check that every contender gives torch's values (to float32 rounding: the
    # row-parallel sum adds the two halves in another order than one matmul does).
    ref = torch_step(xs, ws)
    for step in STEPS.values():
        for dx, dw in setups:
            for a, b in zip(step(dx, dw), ref):
                torch.testing.assert_close(a.to_torch(), b, rtol=1e-4, atol=1e-4)

    fns = [lambda: run_torch(xs, ws, args.steps)]
    for step in STEPS.values():
        for g, (dx, dw) in zip(graphs, setups):
            fns.append(lambda g=g, dx=dx, dw=dw, step=step: run_dtorch(g, step, dx, dw, args.steps))
    times = interleaved(fns, args.repeat)
    t_torch, times = times[0], times[1:]
    per = 1e3 / args.steps
    print(f"torch eager                    : {t_torch * per:8.2f} ms/step")
    for m, (mode, step) in enumerate(STEPS.items()):
        ts = times[3 * m:3 * m + 3]
        stats = [peak_and_reorders(g, mesh, step, dx, dw, args.steps) for g, (dx, dw) in zip(graphs, setups)]
        for name, t, (pk, ro) in zip(names, ts, stats):
            print(f"dtorch {mode:11s} {name:12s} : {t * per:8.2f} ms/step  ratio to torch {t / t_torch:5.2f}"
                  f"  peak {pk / 2**20:6.2f} MiB  reordered {ro:5.1f}/step")
        print(f"{mode:11s} schedule on / off  : {ts[0] / ts[1]:5.2f}  (below 1: the schedule helps)")
        print(f"{mode:11s} overlap on / off   : {ts[0] / ts[2]:5.2f}  (below 1: the communication stream's "
              f"overlap helps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
