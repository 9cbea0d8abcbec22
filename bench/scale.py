"""Whether the single controller scales: each dtorch thread role's CPU time per logical op and per
decoded token as devices are added (issue 30's figures).

  S1  tiny ops: a loop of float32 adds (`a = a + b`, 1 element per device) on a Replicate mesh of 1, 2,
      4 and 8 CPU devices (bench/threads.py's loop): CPU ns per logical op of the client, the
      controller and all workers, and each role's growth over the one-device mesh.
  S2  greedy decode of a tiny Llama (dtorch.applications.llama) on a `tp` mesh of 1, 2, 4 and 8 CPU
      devices, and eager transformers on one device: CPU us per token of each role (the decode steps
      alone: a generate of --long new tokens minus one of --short, so prefill and start-up cancel),
      the wall time per token, and each role's growth over tp1. The tokens are checked equal to
      transformers' on every mesh.

CPU time comes from /proc/self/task/*/schedstat (bench/threads.py's reader: the kernel's per-thread
run time, which another process's load does not inflate the way it does wall time); threads are
told apart by the names dtorch gives them. Each figure is the least of --repeat runs (by controller
time). The environment is the caller's: DTORCH_REPLAY=0 measures without replay, DTORCH_BCAST=0 one record per
device (device-independent records are on by default).

    .venv/bin/python bench/scale.py
    .venv/bin/python bench/scale.py --n 5000 --devices 1 8 --tp 1 8
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import torch

import dtorch
from dtorch import DeviceMesh
from llama import hf_model
from threads import by_role, dtorch_run, thread_cpu_ns, threading_native_id

ROLES = ("client", "controller", "workers")


def growth(rows, key):
    first = rows[0][1][key] or 1
    return " ".join(f"x{r[key] / first:5.2f}" for _, r in rows)


def tiny_ops(args):
    print(f"S1 tiny adds on a Replicate mesh, {args.n} ops; CPU ns per logical op, least of {args.repeat} runs")
    rows = []
    for ndev in args.devices:
        runs = [dtorch_run(ndev, args.n) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["controller"])
        per = {k: best[k] / args.n for k in ROLES}
        rows.append((ndev, per))
        print(f"   {ndev} device{'s' if ndev > 1 else ' '}: " +
              "  ".join(f"{k} {per[k]:7.0f}" for k in ROLES) + "  ns/op")
    for k in ROLES:
        print(f"   {k:10s} growth over 1 device: {growth(rows, k)}")


def timed(fn, me):
    """(roles' CPU ns, wall s, result) of fn()."""
    b = thread_cpu_ns()
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    return by_role(b, thread_cpu_ns(), me), wall, out


def per_token(fn_long, fn_short, ntok, repeat, me):
    """Each role's CPU us and the wall us per decoded token: (long - short) / ntok, least of repeat."""
    best = None
    out = None
    for _ in range(repeat):
        rl, wl, out = timed(fn_long, me)
        rs, ws, _ = timed(fn_short, me)
        per = {k: (rl[k] - rs[k]) / ntok / 1e3 for k in ROLES}
        per["wall"] = (wl - ws) / ntok * 1e6
        if best is None or per["controller"] < best["controller"]:
            best = per
    return best, out


def decode(args):
    from dtorch.applications.llama import LlamaForCausalLM

    ntok = args.long - args.short
    print(f"S2 greedy decode of a tiny Llama (hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, "
          f"prompt [1, 8]): CPU us per token by role and wall us per token ({args.long} - {args.short} new tokens)")
    me = threading_native_id()
    ref = hf_model(args, heads=8, kv_heads=8)  # tp8 divides both
    prompt = torch.randint(0, args.vocab, (1, 8), generator=torch.Generator().manual_seed(1))

    def hf(n):
        with torch.no_grad():
            return ref.generate(prompt, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)

    hf(2)
    eager, want = per_token(lambda: hf(args.long), lambda: hf(args.short), ntok, args.repeat, me)
    print(f"   eager transformers: client {eager['client']:8.1f}  us/token CPU; wall {eager['wall']:8.1f} us/token")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        for tp in args.tp:
            mesh = DeviceMesh("cpu", list(range(tp)), mesh_dim_names=("tp",))
            model = LlamaForCausalLM.from_pretrained(d, device_mesh=mesh)

            def gen(n, model=model):
                return model.generate(prompt, max_new_tokens=n, eos_token_id=[])

            gen(2)
            per, got = per_token(lambda: gen(args.long), lambda: gen(args.short), ntok, args.repeat, me)
            same = torch.equal(got, want)
            rows.append((tp, per))
            print(f"   tp{tp}: " + "  ".join(f"{k} {per[k]:7.1f}" for k in ROLES) +
                  f"  us/token CPU; wall {per['wall']:8.1f} us/token ({per['wall'] / eager['wall']:.2f}x eager)"
                  f"  tokens equal: {same}")
            del model
            dtorch.synchronize()
    for k in ROLES + ("wall",):
        print(f"   {k:10s} growth over tp{rows[0][0]}: {growth(rows, k)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="tiny adds per mesh (S1)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--long", type=int, default=40)
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--only", choices=["ops", "decode"], help="run one part")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("DTORCH_")) or "defaults"
    print(f"scale: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; {env}")
    if args.only != "decode":
        tiny_ops(args)
    if args.only != "ops":
        decode(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
