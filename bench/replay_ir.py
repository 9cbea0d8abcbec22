"""Capture and replay (issue 14 item 1): the controller thread's instructions per op, replayed against
first sighting, counted by callgrind on bench/replay.py's step (its goal: >= 3x fewer on replay).

Wall time on a shared machine moves 2x between runs; instruction counts much less, but not
nothing: the controller's wait for work spins a bounded number of `sched_yield` probes before it
sleeps, and more of them run on a loaded machine (replay 758 quiet, 844 beside the test suite, on
the same build), so run it on a quiet machine. Each figure is the
difference of two runs under `valgrind --tool=callgrind --toggle-collect=dt__controller_main` (only
the controller thread's instructions are counted), one with `--steps` steps and one without them,
divided by the node records the steps submitted (graph_stats()["submitted"]), so Python's start,
the imports, the weights and the warm-up step cancel out. Each step is recorded with the controller
held (probes.held_controller): it takes the step in one round, as bench/replay.py's `ctl ns/op`.

  off     replay off: every node lowered
  first   replay on, the templates dropped before each step (a round with replay off, as
          bench/replay.py's `first`): every node a first sighting, lowered and captured. The
          dropping round is not counted: the run without steps has the same rounds, and
          dt__replay_clear (freeing the templates) is excluded with a second --toggle-collect
  replay  replay on, warm templates
  gain    first / replay (goal >= 3)

    /usr/bin/python3 bench/replay_ir.py                   # 1 and 2 devices, 40 steps: ~10 minutes
    /usr/bin/python3 bench/replay_ir.py --devices 1 --steps 20 --modes first replay

valgrind must be on PATH; the runs are serial (each one a valgrind process).
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def inner(devices: int, mode: str, steps: int, body: bool) -> None:
    """Runs in the valgrind process: the warm-up step, then `steps` steps (or, without `body`, only
    what surrounds them), and prints the node records the steps submitted."""
    import torch

    sys.path.insert(0, HERE)
    import replay as bench  # bench/replay.py

    import dtorch
    from dtorch import DeviceMesh, Replicate
    from dtorch.test.probes import graph_stats, held_controller, replay

    torch.set_num_threads(1)
    mesh = None if devices == 1 else DeviceMesh("cpu", list(range(devices)))
    ws = bench.weights(0)
    dws = bench.dtorch_weights(ws, mesh)
    xs = [torch.randn(1, bench.D, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    reduce = (lambda t: t) if mesh is None else (lambda t: t.redistribute(placements=[Replicate()]))
    place = (lambda t: dtorch.from_torch(t)) if mesh is None else (lambda t: dtorch.from_torch(t, mesh, [Replicate()]))
    dx = [place(x) for x in xs]
    on = mode != "off"

    def one(i):
        with held_controller():
            y = bench.step(dx[i % len(dx)], dws, reduce)
        return y.to_torch()

    dtorch.synchronize()
    with replay(on):
        one(0)  # the first sighting (replay on) or a warm-up (off)
    nodes = 0
    for i in range(steps):
        if mode == "first":
            with replay(False):
                (dx[0] * 1.0).to_torch()  # a round with replay off drops the templates
        if body:
            with replay(on):
                s0 = graph_stats()["submitted"]
                one(i)
                nodes += graph_stats()["submitted"] - s0
    dtorch.synchronize()
    print(f"nodes {nodes}", flush=True)


def total_ir(out: str) -> int:
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise SystemExit(f"no totals in {out}")


def measure(devices: int, mode: str, steps: int, body: bool, tmp: str) -> tuple:
    out = os.path.join(tmp, f"cg.{devices}.{mode}.{int(body)}")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=dt__controller_main",
           "--toggle-collect=dt__replay_clear", sys.executable, os.path.abspath(__file__), "--inner",
           str(devices), mode, str(steps), str(int(body))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr[-4000:]}")
    nodes = int(next(line for line in r.stdout.splitlines() if line.startswith("nodes ")).split()[1])
    ir = sum(total_ir(p) for p in glob.glob(out + "*"))
    return ir, nodes


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--inner":
        inner(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1")
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--modes", nargs="+", default=["off", "first", "replay"])
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not on PATH")
    print(f"# {args.steps} steps, controller thread Ir per node record (callgrind), load {os.getloadavg()[0]:.1f}")
    print(f"{'devices':>7} {'mode':>6} {'nodes/step':>10} {'Ir/op':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for devices in args.devices:
            per = {}
            for mode in args.modes:
                ir1, nodes = measure(devices, mode, args.steps, True, tmp)
                ir0, _ = measure(devices, mode, args.steps, False, tmp)
                per[mode] = (ir1 - ir0) / nodes
                print(f"{devices:>7} {mode:>6} {nodes / args.steps:>10.1f} {per[mode]:>8.0f}", flush=True)
            if "first" in per and "replay" in per:
                print(f"{'':>7} gain: {per['first'] / per['replay']:.2f}x replay vs first sighting"
                      + (f", {per['off'] / per['replay']:.2f}x vs off" if "off" in per else ""), flush=True)


if __name__ == "__main__":
    main()
