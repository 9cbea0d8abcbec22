"""CUDA graphs of repeated run slots (issue 30 item 3; docs/cuda.md, "CUDA graphs"): per-token time of
a tiny Llama's greedy decode with graphs on, off, and eager transformers, in one process.

  G1  one device: dtorch on DeviceMesh(device, [0]) with graphs off and on, eager transformers on
      the same device; us per token (a generate of --long new tokens minus one of --short, so prefill
      and start-up cancel; best of --repeat, the three interleaved), the ratios, the graph counters
      (slots captured, launched, run eagerly) and whether the tokens equal transformers' and the
      graphs-off run's. The issue's goal: graphs on >= 2x faster than eager transformers on a GPU.
  G2  the same on a tp mesh of --tp devices (on one GPU: DTORCH_DTENSOR_IN_SAME_DEVICE=1
      DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=8, set by tools/gpu_check.sh), graphs on and off.
  P3  with --p3prof: bench/pipeline.py's P3 (20 large adds and 20 matmuls on one device) under
      torch.profiler, dtorch's and eager torch's, printing each one's top kernels and copies by
      device time and the host-side phases: where the time of large ops on a CUDA mesh goes.

On the CPU (--device cpu, the smoke run of tests/python/test_bench_smoke.py) the graphs are the
backend's test emulation (DTORCH_GRAPH_EMULATE=1, set here before dtorch loads): its times say
nothing about CUDA graphs, only that the path runs and the tokens match.

    python3 bench/cuda_graph.py --device cuda
    python3 bench/cuda_graph.py --device cuda --p3prof
    python3 bench/cuda_graph.py --device cpu --long 6 --short 2 --repeat 1 --tp 2
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import torch  # noqa: E402

import dtorch  # noqa: E402
from dtorch import DeviceMesh  # noqa: E402
from dtorch.test.probes import cuda_graph, graph_stats  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import hf_model  # noqa: E402

KEYS = ("graph_captured", "graph_launched", "graph_eager")


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def per_token(fns, long, short, repeat, device):
    """For each (name, gen(n)) in fns: the least (gen(long) - gen(short)) / (long - short) in us over
    repeat turns, the contenders interleaved; and each one's last gen(long) result."""
    best, out = {}, {}
    for _ in range(repeat):
        for name, gen in fns:
            sync(device)
            t0 = time.perf_counter()
            out[name] = gen(long)
            sync(device)
            t1 = time.perf_counter()
            gen(short)
            sync(device)
            t2 = time.perf_counter()
            us = ((t1 - t0) - (t2 - t1)) / (long - short) * 1e6
            best[name] = min(best.get(name, us), us)
    return best, out


def counters(before):
    now = graph_stats()
    return " ".join(f"{k[6:]} {now[k] - before[k]}" for k in KEYS)


def decode(args, label, mesh, ref, prompt, model_dir):
    """Graphs off and on against eager transformers on one mesh; prints one block."""
    from dtorch.applications.llama import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, device_mesh=mesh)

    def hf(n):
        with torch.no_grad():
            return ref.generate(prompt.to(args.device), max_new_tokens=n, do_sample=False, eos_token_id=None,
                                pad_token_id=0).cpu()

    def gen(on):
        def run(n):
            with cuda_graph(on):
                return model.generate(prompt, max_new_tokens=n, eos_token_id=[]).cpu()
        return run

    for _, g in (("torch", hf), ("off", gen(False)), ("on", gen(True))):
        g(2)  # warm-up (and the graphs' first sightings)
    before = graph_stats()
    best, out = per_token([("torch", hf), ("off", gen(False)), ("on", gen(True))], args.long, args.short,
                          args.repeat, args.device)
    print(f"{label}: torch {best['torch']:9.1f} us/token  graphs off {best['off']:9.1f}  graphs on "
          f"{best['on']:9.1f}  (on/torch {best['on'] / best['torch']:.2f}, on/off {best['on'] / best['off']:.2f}; "
          f"goal on/torch <= 0.5 on a GPU)")
    print(f"{label}: {counters(before)}; tokens on == off: {torch.equal(out['on'], out['off'])}, "
          f"on == transformers: {torch.equal(out['on'], out['torch'])}")
    model = None  # its values go before the next mesh loads
    dtorch.synchronize()
    return torch.equal(out["on"], out["off"])


def p3_profile(args):
    """pipeline.py's P3 (one device) under torch.profiler, dtorch and eager torch."""
    import pipeline
    from torch.profiler import ProfilerActivity, profile

    pipeline.DEVICE = args.device
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    sort = "cpu_time_total"
    if args.device == "cuda":  # torch >= 2.4 names it device_time_total, cuda_time_total before
        from torch.autograd.profiler_util import FunctionEventAvg
        sort = "device_time_total" if hasattr(FunctionEventAvg, "device_time_total") else "cuda_time_total"
    for name, fn in (("torch", pipeline.p3_torch), ("dtorch", pipeline.p3_dtorch)):
        fn()  # warm-up
        (wall,) = fn()
        with profile(activities=acts) as prof:
            fn()
        print(f"P3 {name}: {wall * 1e3:.1f} ms unprofiled; top kernels and copies by {sort}:")
        print(prof.key_averages().table(sort_by=sort, row_limit=args.rows, max_name_column_width=60))
    # dtorch's own trace: the host time of each kernel on its worker (on CUDA: the launch, the input
    # waits and copies the shim makes) and of the controller's lowering, summed by name.
    with dtorch.profiler.trace(None) as t:
        pipeline.p3_dtorch()
    tot = {}
    for e in t.events:
        if "dur" in e:
            key = (e.get("cat", ""), e["name"])
            n, us = tot.get(key, (0, 0.0))
            tot[key] = (n + 1, us + e["dur"])
    print("P3 dtorch trace: host time by kind and name (us, count):")
    for (cat, name), (n, us) in sorted(tot.items(), key=lambda kv: -kv[1][1])[:args.rows]:
        print(f"   {cat:12s} {name:40s} {us:10.1f} us  x{n}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--long", type=int, default=48, help="new tokens of the long generate")
    ap.add_argument("--short", type=int, default=8, help="new tokens of the short one")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--tp", type=int, default=8, help="devices of G2 (0: skip it)")
    ap.add_argument("--p3prof", action="store_true", help="profile pipeline.py's P3 instead")
    ap.add_argument("--rows", type=int, default=15, help="rows of each profile table")
    args = ap.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("DTORCH_GRAPH_EMULATE", "1")  # read at the process's first capture
    gpu = f", {torch.cuda.get_device_name(0)}" if args.device == "cuda" else ""
    print(f"cuda_graph: python {platform.python_version()}, torch {torch.__version__}{gpu}; device {args.device}"
          f"{' (the CPU emulation of graphs: times say nothing about CUDA)' if args.device == 'cpu' else ''}")
    if args.p3prof:
        p3_profile(args)
        return 0
    ok = True
    ref = hf_model(args, heads=8, kv_heads=8).to(args.device)  # tp8 divides both
    prompt = torch.randint(0, args.vocab, (1, 8), generator=torch.Generator().manual_seed(1))
    with tempfile.TemporaryDirectory() as d:
        ref.cpu().save_pretrained(d)
        ref.to(args.device)
        ok &= decode(args, "G1 1 device", DeviceMesh(args.device, [0]), ref, prompt, d)
        if args.tp > 1:
            mesh = DeviceMesh(args.device, list(range(args.tp)), mesh_dim_names=("tp",))
            if dtorch.default_graph.satisfy(mesh):
                ok &= decode(args, f"G2 tp{args.tp}", mesh, ref, prompt, d)
            else:
                print(f"G2 tp{args.tp}: skipped (the graph cannot run a mesh of {args.tp} {args.device} devices)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
