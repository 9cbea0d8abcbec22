"""The controller's work per decoded token (bench/scale.py's S2) or per tiny add (S1), for counting its
instructions under callgrind.

Decode: loads bench/scale.py's tiny Llama on a 1-D tp mesh, decodes `--warm` tokens (default 24: the
record pools reach their steady state; with 2, as before 2026-12-07, blob groups still came fresh from
the slab and were counted with their first writes), then `n`, and prints the tokens. `--ops`: S1's
loop, `n` adds `a = a + b` on a Replicate mesh of `--tp` devices after a warm-up of 200. Run it twice
under callgrind with two `n` and divide the difference by theirs (docs/benchmarks.md):

    valgrind --tool=callgrind --toggle-collect=dt__controller_main \\
        python bench/decode_ctl.py --tp 8 --n 10      # and --n 2

`--count` does that itself (both runs, the controller's instructions per token or per op printed);
`--valgrind` names the valgrind binary.

`--samples` profiles natively instead (perf, from Debian's linux-perf, which this mode alone needs and
tools/setup.sh does not install; software `cpu-clock` sampling at `--freq` Hz: these VMs have no
hardware counters): the controller thread's user-space samples but its `sched_yield` waits,
as CPU us per token (or op) and its top functions. Natively a line another thread wrote last costs a
miss that callgrind does not count (docs/decisions.md, "A full pool list hands over its oldest batch by
one cut"), so the two can disagree; one run of a noisy machine is one sample, so alternate builds:

    python bench/decode_ctl.py --tp 8 --n 300 --samples
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import torch

import dtorch
from dtorch import DeviceMesh, Replicate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def decode(args):
    from llama import hf_model

    from dtorch.applications.llama import LlamaForCausalLM

    ref = hf_model(args, heads=8, kv_heads=8)
    prompt = torch.randint(0, args.vocab, (1, 8), generator=torch.Generator().manual_seed(1))
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        mesh = DeviceMesh("cpu", list(range(args.tp)), mesh_dim_names=("tp",))
        model = LlamaForCausalLM.from_pretrained(d, device_mesh=mesh)
        model.generate(prompt, max_new_tokens=args.warm, eos_token_id=[])
        print(model.generate(prompt, max_new_tokens=args.n, eos_token_id=[]).tolist())
        dtorch.synchronize()


def ops(args):
    mesh = DeviceMesh("cpu", list(range(args.tp)))
    a = dtorch.zeros(1, device_mesh=mesh, placements=[Replicate()])
    b = dtorch.ones(1, device_mesh=mesh, placements=[Replicate()])
    for _ in range(200):
        a = a + b
    a.to_torch()
    for _ in range(args.n):
        a = a + b
    print(a.to_torch().tolist())
    dtorch.synchronize()


def this_run(args, n):
    """The command line of this script's plain run of n, with the caller's other settings."""
    return [sys.executable, os.path.abspath(__file__), "--tp", str(args.tp), "--n", str(n), "--warm", str(args.warm),
            "--hidden", str(args.hidden), "--layers", str(args.layers), "--vocab",
            str(args.vocab)] + (["--ops"] if args.ops else [])


def instructions(args, n, out):
    cmd = [args.valgrind, "--tool=callgrind", "--toggle-collect=dt__controller_main",
           f"--callgrind-out-file={out}"] + this_run(args, n)
    run = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"Collected : (\d+)", run.stderr)
    if not m:
        raise SystemExit("callgrind printed no count:\n" + run.stderr[-2000:])
    return int(m.group(1))


def count(args):
    lo, hi = args.count
    with tempfile.TemporaryDirectory() as d:
        a = instructions(args, lo, os.path.join(d, "lo.out"))
        b = instructions(args, hi, os.path.join(d, "hi.out"))
    unit = "op" if args.ops else "token"
    print(f"{'S1 adds' if args.ops else 'decode'} tp{args.tp}: controller {(b - a) / (hi - lo):,.0f} "
          f"instructions per {unit} (n {lo} -> {hi}: {a:,} -> {b:,})")


def profile(args, n):
    """One run of n under `perf record`: the controller's user samples (but its sched_yield waits) by
    function, from `perf report`."""
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        cmd = [args.perf, "record", "-q", "-F", str(args.freq), "-e", "cpu-clock", "-o", data, "--"] + this_run(args, n)
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        rep = subprocess.run([args.perf, "report", "-i", data, "--comm", "dt-controller", "--no-children",
                              "--sort", "dso,sym", "--stdio", "-n"], capture_output=True, text=True, check=True)
    rows = {}
    for line in rep.stdout.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(\S+)", line)
        if m and m.group(3) != "k" and "yield" not in m.group(4):
            rows[m.group(4)] = rows.get(m.group(4), 0) + int(m.group(1))
    return rows


def samples(args):
    """Two runs (n 2 and --n), as --count: the difference per unit, and the longer run's top functions."""
    lo, hi = profile(args, 2), profile(args, args.n)
    total = sum(hi.values()) - sum(lo.values())
    unit = "op" if args.ops else "token"
    print(f"{'S1 adds' if args.ops else 'decode'} tp{args.tp}: controller {total / args.freq / (args.n - 2) * 1e6:,.1f} "
          f"CPU us per {unit} (user samples at {args.freq} Hz but its sched_yield waits, n 2 -> {args.n}: "
          f"{sum(lo.values())} -> {sum(hi.values())})")
    for sym, k in sorted(hi.items(), key=lambda x: -x[1])[:12]:
        print(f"  {100 * k / max(sum(hi.values()), 1):5.1f}%  {k:6d}  {sym}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--warm", type=int, default=24, help="tokens decoded before the counted ones")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--ops", action="store_true", help="S1's adds instead of decode")
    ap.add_argument("--count", type=int, nargs=2, metavar=("N1", "N2"),
                    help="run under callgrind with n = N1 and N2 and print the difference per unit")
    ap.add_argument("--valgrind", default="valgrind")
    ap.add_argument("--samples", action="store_true",
                    help="one run under perf: the controller's CPU time per unit and its top functions")
    ap.add_argument("--freq", type=int, default=20000, help="perf's sampling rate (--samples)")
    ap.add_argument("--perf", default="perf")
    args = ap.parse_args()
    if args.count:
        count(args)
    elif args.samples:
        samples(args)
    elif args.ops:
        ops(args)
    else:
        decode(args)


if __name__ == "__main__":
    main()
