"""Capture and replay (issue 14 item 1): the controller's CPU time per op on a decode-step-like loop
body, lowered every time (replay off) against replayed (replay on, after a first sighting).

The step is two small transformer layers at batch 1 (RMS norm, q/k/v projections, a gated mix in
place of attention, output projection, a SiLU MLP; 24 ops a layer, 48 a step, plus one read). On
two devices the projections are column/row parallel and the row-parallel results are all-reduced
(a redistribute of a Partial to Replicate) three times a layer, so replayed collectives are in it.

  lower ns/op the controller's lowering step alone (lowering or replaying each node; CLOCK_MONOTONIC
              around it, dtorch.test.probes.lowering_ns), per node record submitted; best of
              --repeat runs. Modes: off (replay off), first (every node a first sighting: the
              templates are dropped before each step, so it is lowered and captured), replay
              (replayed from warm templates)
  ctl ns/op   CPU time of the graph's controller thread (CLOCK_THREAD_CPUTIME_ID, read from outside
              it: dtorch.test.probes.controller_cpu_ns) over the timed steps, divided by the node
              records submitted (graph_stats()["submitted"]); best of --repeat runs. Each step is
              recorded with the controller held (probes.held_controller), so it takes the step in
              one round: the figure is its work on the nodes, not its waits for the client (this VM
              has no instruction counters: perf_event_open's instructions are "not supported")
  streaming   the same with the steps recorded as a program would, the controller taking what has
              been recorded whenever it wakes: its waits (a few sched_yield probes before it
              sleeps, wake-ups) are then most of its time, the same with replay on or off
  gain        first sighting (and off) / replay (goal >= 3)
  hits        nodes replayed per step (graph_stats()["replay_hits"])
  runs        of those, nodes the run found: the template that followed the previous node's last
              time matched, with no hash or table probe (graph_stats()["replay_run_hits"])
  wall ms     the whole step, recorded and read, streaming, best of --repeat

Every step's result is checked against eager torch (allclose; the 2-device all-reduce sums in rank
order). Machines are noisy: run it several times.

Replay is on by default (DTORCH_REPLAY=0 turns it off); the script switches it itself.

    /usr/bin/python3 bench/replay.py
    /usr/bin/python3 bench/replay.py --steps 200 --repeat 5
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import dtorch  # noqa: E402
import dtorch.nn.functional as F  # noqa: E402
from dtorch import DeviceMesh, Replicate, Shard  # noqa: E402
from dtorch.test.probes import controller_cpu_ns, graph_stats, held_controller, lowering_ns, replay  # noqa: E402

D, LAYERS = 64, 2


def weights(seed):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g) / s[0] ** 0.5  # noqa: E731
    return [dict(g1=torch.rand(D, generator=g) + 0.5, wq=mk(D, D), wk=mk(D, D), wv=mk(D, D), wo=mk(D, D),
                 g2=torch.rand(D, generator=g) + 0.5, w1=mk(D, 2 * D), w2=mk(2 * D, D)) for _ in range(LAYERS)]


def step(x, ws, reduce, F=F):
    """One decode step (24 ops a layer); `reduce` makes a row-parallel result Replicate; F is
    dtorch's or torch's functional module."""
    for w in ws:
        h = x * (x * x).mean(dim=-1, keepdim=True).add(1e-5).rsqrt() * w["g1"]
        q, k, v = h @ w["wq"], h @ w["wk"], h @ w["wv"]
        p = reduce((q * k).sum(dim=-1, keepdim=True)).sigmoid()
        x = x + reduce((p * v) @ w["wo"])
        h = x * (x * x).mean(dim=-1, keepdim=True).add(1e-5).rsqrt() * w["g2"]
        x = x + reduce(F.silu(h @ w["w1"]) @ w["w2"])
    return x


def torch_step(x, ws):
    return step(x, ws, lambda t: t, torch.nn.functional)


def dtorch_weights(ws, mesh):
    if mesh is None:
        return [{k: dtorch.from_torch(t) for k, t in w.items()} for w in ws]
    col, row, rep = [Shard(1)], [Shard(0)], [Replicate()]
    pl = dict(g1=rep, g2=rep, wq=col, wk=col, wv=col, w1=col, wo=row, w2=row)
    return [{k: dtorch.from_torch(t, mesh, pl[k]) for k, t in w.items()} for w in ws]


def run(mesh, steps, mode, ws, dws, xs, held):
    """Times `steps` steps; mode "off" (replay off), "first" (replay on, the templates dropped
    before each step: every node a first sighting, captured) or "replay" (replay on, warm)."""
    reduce = (lambda t: t) if mesh is None else (lambda t: t.redistribute(placements=[Replicate()]))
    place = (lambda t: dtorch.from_torch(t)) if mesh is None else (lambda t: dtorch.from_torch(t, mesh, [Replicate()]))
    dx = [place(x) for x in xs]
    dtorch.synchronize()

    def one(i):
        if not held:
            return step(dx[i % len(dx)], dws, reduce).to_torch()
        with held_controller():
            y = step(dx[i % len(dx)], dws, reduce)
        return y.to_torch()

    on = mode != "off"
    ns = cpu = nodes = hits = runs = 0
    wall = 0.0
    with replay(on):
        one(0)  # the first sighting (replay on) or a warm-up (off)
    for i in range(steps):
        if mode == "first":
            with replay(False):
                (dx[0] * 1.0).to_torch()  # a round with replay off drops the templates
        with replay(on):
            s0, c0, l0 = graph_stats(), controller_cpu_ns(), lowering_ns(True)
            t0 = time.perf_counter()
            got = one(i)
            wall += time.perf_counter() - t0
            l1, c1, s1 = lowering_ns(False), controller_cpu_ns(), graph_stats()
        ns += l1 - l0
        cpu += c1 - c0
        nodes += s1["submitted"] - s0["submitted"]
        hits += s1["replay_hits"] - s0["replay_hits"]
        runs += s1["replay_run_hits"] - s0["replay_run_hits"]
    want = torch_step(xs[(steps - 1) % len(xs)], ws)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        raise SystemExit(f"mismatch: max abs diff {(got - want).abs().max().item()}")
    return ns / nodes, cpu / nodes, hits / steps, wall / steps * 1e3, nodes / steps, runs / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ws = weights(0)
    xs = [torch.randn(1, D, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    print(f"# {platform.node()} {os.cpu_count()} cpus, torch {torch.__version__}, load {os.getloadavg()[0]:.1f}")
    print(f"{'devices':>7} {'mode':>6} {'nodes/step':>10} {'hits/step':>9} {'runs':>5} {'lower ns/op':>11} "
          f"{'ctl ns/op':>9} {'streaming':>9} {'wall ms':>8}")
    modes = ("off", "first", "replay")
    for mesh in (None, DeviceMesh("cpu", [0, 1])):
        dws = dtorch_weights(ws, mesh)
        best = {}
        for _ in range(args.repeat):
            for mode in modes:
                for held in (True, False):
                    r = run(mesh, args.steps, mode, ws, dws, xs, held)
                    b = best.get((mode, held))
                    best[mode, held] = r if b is None else tuple(min(x, y) for x, y in zip(b, r))
        for mode in modes:
            lns, cns, hits, _, nodes, runs = best[mode, True]
            _, sns, _, wall, _, _ = best[mode, False]
            print(f"{1 if mesh is None else 2:>7} {mode:>6} {nodes:>10.0f} {hits:>9.1f} {runs:>5.1f} {lns:>11.0f} "
                  f"{cns:>9.0f} {sns:>9.0f} {wall:>8.3f}")
        g = lambda a, k: best[a, True][k] / best["replay", True][k]  # noqa: E731
        print(f"{'':>7} replay gain: lowering step {g('first', 0):.2f}x vs first sighting, {g('off', 0):.2f}x "
              f"vs off; whole controller {g('first', 1):.2f}x, {g('off', 1):.2f}x")


if __name__ == "__main__":
    main()
