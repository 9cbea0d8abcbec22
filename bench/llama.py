"""The tiny Llama forward and generate: dtorch.applications.llama against transformers eager, one CPU
device, one process, the same weights (a random transformers model saved and loaded).

  L1  forward of a [2, 64] batch, `--iters` times, each result read: total time ratio.
  L2  client time of that loop: the time until dtorch's forward returns (the values are read after
      the clock stops) over torch's whole forward.
  L3  greedy generate of 32 new tokens from a [2, 8] prompt: total time ratio.
  L4  client CPU time of that generate (time.thread_time of the calling thread: the time it spends
      recording and choosing tokens, not waiting) over torch's whole generate.
  L5  peak memory of one forward of an [8, 512] batch above the resident memory before it (VmHWM,
      reset through /proc/self/clear_refs, as bench/pipeline.py P4), each side in a fresh process
      after loading the weights and one small forward: dtorch / torch.

    .venv/bin/python bench/llama.py
    .venv/bin/python bench/llama.py --hidden 256 --layers 4 --iters 20
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import subprocess
import sys
import tempfile
import time

import torch

import dtorch
from dtorch.applications.llama import LlamaForCausalLM
from pipeline import _reset_hwm, _status, interleaved


def hf_model(args, heads=4, kv_heads=2):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=args.hidden, intermediate_size=args.hidden * 3 // 2,
                                   num_hidden_layers=args.layers, num_attention_heads=heads,
                                   num_key_value_heads=kv_heads,
                                   vocab_size=args.vocab, tie_word_embeddings=False, initializer_range=0.2)
    return transformers.LlamaForCausalLM(cfg).eval()


def fwd_torch(model, ids, iters):
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(iters):
            float(model(ids).logits[0, 0, 0])
    t = time.perf_counter() - t0
    return (t, t)


def fwd_dtorch(model, ids, iters):
    client = 0.0
    t0 = time.perf_counter()
    for _ in range(iters):
        c0 = time.perf_counter()
        y = model(ids)
        client += time.perf_counter() - c0
        float(y[0, 0, 0].item())
    return (time.perf_counter() - t0, client)


def gen_torch(model, ids, n):
    t0, c0 = time.perf_counter(), time.thread_time()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return (time.perf_counter() - t0, time.thread_time() - c0, out)


def gen_dtorch(model, ids, n):
    t0, c0 = time.perf_counter(), time.thread_time()
    out = model.generate(ids, max_new_tokens=n, eos_token_id=[])
    return (time.perf_counter() - t0, time.thread_time() - c0, out)


def forward_pair(ref, model, ids, iters, repeat):
    """(torch's total, dtorch's total, dtorch's client time) of ``iters`` forwards, best of ``repeat``."""
    fwd_torch(ref, ids, 2), fwd_dtorch(model, ids, 2)  # warm-up
    (tt, _), (dt, dc) = interleaved([lambda: fwd_torch(ref, ids, iters), lambda: fwd_dtorch(model, ids, iters)],
                                    repeat)
    return tt, dt, dc


def print_forward(tags, tt, dt, dc, iters):
    """The total and client lines of ``forward_pair``'s figures, per forward."""
    print(f"{tags[0]} forward total   : torch {tt / iters * 1e3:7.2f} ms  dtorch {dt / iters * 1e3:7.2f} ms  "
          f"ratio {dt / tt:5.2f}")
    print(f"{tags[1]} forward client  : torch {tt / iters * 1e3:7.2f} ms  dtorch {dc / iters * 1e3:7.2f} ms  "
          f"ratio {dc / tt:5.2f}")


def print_memory(tag, pt, pd, args):
    """The peak-memory line of the two fresh processes' figures."""
    print(f"{tag} peak memory     : torch {pt / 2**20:7.1f} MiB  dtorch {pd / 2**20:7.1f} MiB  ratio {pd / pt:5.2f}  "
          f"(forward of [{args.mem_batch}, {args.mem_seq}], each in a fresh process)")


def generate_pair(ref, model, prompt, n, repeat):
    """(torch's time, dtorch's time, dtorch's client CPU time, tokens equal) of greedy generate of n tokens."""
    outs = {}

    def run_t():
        t, c, outs["t"] = gen_torch(ref, prompt, n)
        return (t, c)

    def run_d():
        t, c, outs["d"] = gen_dtorch(model, prompt, n)
        return (t, c)

    run_t(), run_d()
    (gt, _), (gd, gc_) = interleaved([run_t, run_d], repeat)
    return gt, gd, gc_, torch.equal(outs["t"], outs["d"])


def peak(fn):
    gc.collect()
    dtorch.synchronize()
    dtorch.empty_cache()
    base = _status("VmRSS")
    _reset_hwm()
    fn()
    dtorch.synchronize()
    return _status("VmHWM") - base


def mem_child(folder, which, args):
    """The peak of one forward in a fresh process (so neither side reuses pages the other freed)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_mem", which, "--_dir", folder,
                          "--mem-batch", str(args.mem_batch), "--mem-seq", str(args.mem_seq)],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[-1])


def mem_main(args) -> int:
    from transformers import LlamaForCausalLM as HF

    g = torch.Generator().manual_seed(2)
    from dtorch.applications.llama import LlamaConfig

    vocab = LlamaConfig.from_json_file(args._dir).vocab_size
    big = torch.randint(0, vocab, (args.mem_batch, args.mem_seq), generator=g)
    small = big[:1, :4]
    if args._mem == "torch":
        ref = HF.from_pretrained(args._dir).eval()

        def fwd(x):
            with torch.no_grad():
                float(ref(x).logits[0, 0, 0])
    else:
        model = LlamaForCausalLM.from_pretrained(args._dir)

        def fwd(x):
            float(model(x)[0, 0, 0].item())
    fwd(small)  # libraries initialised, weights in place
    print(peak(lambda: fwd(big)))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mem-batch", type=int, default=8)
    ap.add_argument("--mem-seq", type=int, default=512)
    ap.add_argument("--_mem", help=argparse.SUPPRESS)
    ap.add_argument("--_dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._mem:
        return mem_main(args)
    print(f"llama: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs; hidden "
          f"{args.hidden}, {args.layers} layers, vocab {args.vocab}; best of {args.repeat}, interleaved")
    ref = hf_model(args)
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        model = LlamaForCausalLM.from_pretrained(d, device_mesh=dtorch.DeviceMesh("cpu", [0]))
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, args.vocab, (2, 64), generator=g)
        tt, dt, dc = forward_pair(ref, model, ids, args.iters, args.repeat)
        print_forward(("L1", "L2"), tt, dt, dc, args.iters)
        gt, gd, gc_, same = generate_pair(ref, model, ids[:, :8], 32, args.repeat)
        print(f"L3 generate total  : torch {gt * 1e3:7.1f} ms  dtorch {gd * 1e3:7.1f} ms  ratio {gd / gt:5.2f}  "
              f"(tokens equal: {same})")
        print(f"L4 generate client : torch {gt * 1e3:7.1f} ms  dtorch {gc_ * 1e3:7.1f} ms  ratio {gc_ / gt:5.2f}  "
              f"(CPU time of the calling thread)")

        pt, pd = (mem_child(d, which, args) for which in ("torch", "dtorch"))
    print_memory("L5", pt, pd, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
