"""A tiny mixture of experts (Mixtral-shaped: 8 experts, top 2): dtorch.applications' MixtralForCausalLM
against transformers eager in one process, the same weights (a random transformers model saved and
loaded). transformers runs its default experts implementation (grouped_mm where torch has it).

  M1  forward of a [2, 64] batch, `--iters` times, each result read: total time ratio.
  M2  client time of that loop: the time until dtorch's forward returns over torch's whole forward.
  M3  decoding: greedy generate of 32 new tokens from a [2, 8] prompt, the time per new token (a
      decode step with the KV cache): ratio, and whether the tokens are equal.
  M4  peak memory of one forward of an [8, 256] batch above the resident memory before it (VmHWM,
      reset through /proc/self/clear_refs, as bench/llama.py L5), each side in a fresh process:
      dtorch / torch.

`--mesh ep2` (or `ep2,tp2`, ...) runs dtorch on that mesh of CPU devices instead of one device (the
experts split over ep: two all-to-alls per layer). `--check` is the GPU check of tools/gpu_check.sh:
a forward and greedy decoding on `--mesh` (default ep4,tp2) of `--device` (cuda: one GPU as the mesh's
logical devices, DTORCH_DTENSOR_IN_SAME_DEVICE=1), compared with transformers on that device; it
prints "moe check:" lines and exits 1 when they differ.

    .venv/bin/python bench/moe.py
    .venv/bin/python bench/moe.py --mesh ep2 --iters 20
    .venv/bin/python bench/moe.py --check --device cpu
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import torch

import dtorch
from dtorch.applications import AutoModelForCausalLM
from llama import forward_pair, generate_pair, peak, print_forward, print_memory


def hf_model(args):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(hidden_size=args.hidden, intermediate_size=args.hidden * 3 // 2,
                                     num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                                     vocab_size=args.vocab, num_local_experts=8, num_experts_per_tok=2,
                                     initializer_range=0.2)
    return transformers.MixtralForCausalLM(cfg).eval()


def device_mesh(spec, device):
    """``"ep4,tp2"`` -> a (4, 2) mesh named ("ep", "tp") of ``device``; "" -> one device."""
    if not spec:
        return dtorch.DeviceMesh(device, [0])
    names = tuple(p.rstrip("0123456789") for p in spec.split(","))
    shape = tuple(int(p[len(n):]) for p, n in zip(spec.split(","), names))
    return dtorch.init_device_mesh(device, shape, mesh_dim_names=names)


def mem_main(args) -> int:
    from transformers import MixtralForCausalLM as HF

    big = torch.randint(0, args.vocab, (args.mem_batch, args.mem_seq), generator=torch.Generator().manual_seed(2))
    if args._mem == "torch":
        ref = HF.from_pretrained(args._dir).eval()

        def fwd(x):
            with torch.no_grad():
                float(ref(x).logits[0, 0, 0])
    else:
        model = AutoModelForCausalLM.from_pretrained(args._dir, device_mesh=device_mesh(args.mesh, "cpu"))

        def fwd(x):
            float(model(x)[0, 0, 0].item())
    fwd(big[:1, :4])  # libraries initialised, weights in place
    print(peak(lambda: fwd(big)))
    return 0


def mem_child(folder, which, args):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_mem", which, "--_dir", folder,
                          "--mem-batch", str(args.mem_batch), "--mem-seq", str(args.mem_seq), "--vocab",
                          str(args.vocab), "--mesh", args.mesh], check=True, capture_output=True, text=True).stdout
    return int(out.split()[-1])


def check(args) -> int:
    """The GPU check: a forward allclose and greedy tokens equal to transformers on ``args.device``."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("moe check: NOT RUN: transformers is not installed (the reference)")
        return 1
    ref = hf_model(args).to(args.device)
    mesh = device_mesh(args.mesh or "ep4,tp2", args.device)
    ok = True
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d, device_mesh=mesh)
        ids = torch.randint(0, args.vocab, (2, 8), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            want = ref(ids.to(args.device)).logits.cpu()
        got = model(ids).to_torch().cpu()
        diff = (got - want).abs().max().item()
        ok &= diff < 1e-3
        print(f"moe check: forward on {args.device} mesh {tuple(mesh.shape)} {mesh.dim_names}: max |diff| {diff:.2e}")
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=8, eos_token_id=[])
        t = time.perf_counter() - t0
        with torch.no_grad():
            want = ref.generate(ids.to(args.device), max_new_tokens=8, do_sample=False, eos_token_id=None,
                                pad_token_id=0).cpu()
        same = torch.equal(out.cpu(), want)
        ok &= same
        print(f"moe check: 8 decode steps {t * 1e3 / 8:.1f} ms each, tokens equal to transformers: {same}")
    print(f"moe check: {'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--mesh", default="", help="dtorch's mesh of CPU devices, e.g. ep2,tp2 (default: one device)")
    ap.add_argument("--mem-batch", type=int, default=8)
    ap.add_argument("--mem-seq", type=int, default=256)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--_mem", help=argparse.SUPPRESS)
    ap.add_argument("--_dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._mem:
        return mem_main(args)
    if args.check:
        return check(args)
    print(f"moe: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; Mixtral hidden "
          f"{args.hidden}, {args.layers} layers, 8 experts top 2, vocab {args.vocab}; dtorch mesh "
          f"{args.mesh or 'one device'}; best of {args.repeat}, interleaved")
    ref = hf_model(args)
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d, device_mesh=device_mesh(args.mesh, "cpu"))
        ids = torch.randint(0, args.vocab, (2, 64), generator=torch.Generator().manual_seed(1))
        tt, dt, dc = forward_pair(ref, model, ids, args.iters, args.repeat)
        print_forward(("M1", "M2"), tt, dt, dc, args.iters)
        gt, gd, _, same = generate_pair(ref, model, ids[:, :8], args.new, args.repeat)
        print(f"M3 decode step     : torch {gt / args.new * 1e3:7.2f} ms  dtorch {gd / args.new * 1e3:7.2f} ms  "
              f"ratio {gd / gt:5.2f}  (greedy, {args.new} tokens; tokens equal: {same})")
        pt, pd = (mem_child(d, which, args) for which in ("torch", "dtorch"))
    print_memory("M4", pt, pd, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
