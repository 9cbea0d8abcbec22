"""Llama text generation on a dtorch mesh, checked against one device.

By default a tiny random Llama (hidden 64, 4 heads, 2 kv heads, 3 layers, vocab 128) runs on 8
virtual CPU devices as dp=2 x tp=2 x pp=2, greedy-decodes from a prompt of token ids, and the same
model (dtorch's random values do not depend on the mesh) decodes on one device: the script prints
both and whether they match.

    .venv/bin/python examples/llama/run.py
    .venv/bin/python examples/llama/run.py --mesh dp=1,tp=2,pp=2 --max-new-tokens 16
    .venv/bin/python examples/llama/run.py --model /models/Llama-3.2-1B --mesh tp=2 --prompt "The capital of"
    .venv/bin/python examples/llama/run.py --model /models/llama --prompt-ids 1,450,7483 --sample --seed 0

``--model`` is a Hugging Face Llama folder (config.json and safetensors); ``--prompt`` needs a
tokenizer in that folder (transformers' AutoTokenizer). Mesh dims are any of dp, tp, pp, ulysess_cp
and ring_cp; ``--device cuda`` puts the mesh on GPUs.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import dtorch
from dtorch.applications.llama import LlamaConfig, LlamaForCausalLM

NAMES = ("dp", "tp", "pp", "ulysess_cp", "ring_cp")
TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, tie_word_embeddings=True, eos_token_id=None,
            initializer_range=0.2)  # wider than 0.02, so that the greedy tokens vary


def parse_mesh(text: str, device: str) -> dtorch.DeviceMesh:
    """``dp=2,tp=2,pp=2`` -> an init_device_mesh with those names and sizes."""
    names, sizes = [], []
    for part in text.split(","):
        name, _, size = part.partition("=")
        name = name.strip()
        if name not in NAMES or not size.strip().isdigit() or int(size) < 1:
            raise SystemExit(f"--mesh: expected NAME=SIZE with NAME one of {NAMES}, got {part!r}")
        names.append(name)
        sizes.append(int(size))
    return dtorch.init_device_mesh(device, tuple(sizes), mesh_dim_names=tuple(names))


def build(args: argparse.Namespace, mesh: dtorch.DeviceMesh) -> LlamaForCausalLM:
    if args.model:
        return LlamaForCausalLM.from_pretrained(args.model, device_mesh=mesh)
    dtorch.manual_seed(args.seed)
    return LlamaForCausalLM(LlamaConfig(**TINY), device_mesh=mesh)


def prompt_ids(args: argparse.Namespace, batch: int):
    tok = None
    if args.prompt is not None:
        if not args.model:
            raise SystemExit("--prompt needs --model with a tokenizer; use --prompt-ids for the random model")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.model)
        ids = tok(args.prompt, return_tensors="pt").input_ids
    else:
        ids = torch.tensor([[int(t) for t in args.prompt_ids.split(",")]])
    # Row i is the prompt rotated by i: the sequences dp shards differ.
    return torch.cat([ids.roll(i, dims=1) for i in range(batch)]), tok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a Hugging Face Llama folder (default: a tiny random model)")
    ap.add_argument("--mesh", default="dp=2,tp=2,pp=2", help="mesh dims and sizes (default dp=2,tp=2,pp=2)")
    ap.add_argument("--device", default="cpu", help="cpu (virtual devices) or cuda")
    ap.add_argument("--prompt", help="text (needs a tokenizer in --model)")
    ap.add_argument("--prompt-ids", default="3,17,99,5,64,1,9,8", help="comma-separated token ids")
    ap.add_argument("--batch", type=int, default=2, help="rows (the prompt rotated by 0, 1, ...; dp shards them)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--sample", action="store_true", help="sample (temperature 0.8, top-p 0.95) instead of greedy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="skip the single-device comparison")
    args = ap.parse_args()

    mesh = parse_mesh(args.mesh, args.device)
    ids, tok = prompt_ids(args, args.batch)
    kw = dict(do_sample=args.sample, temperature=0.8, top_p=0.95, seed=args.seed) if args.sample else {}

    model = build(args, mesh)
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=args.max_new_tokens, **kw)
    dt = time.perf_counter() - t0
    print(f"mesh {dict(zip(mesh.dim_names, mesh.shape))}: {out.shape[1] - ids.shape[1]} new tokens in {dt:.2f} s")
    for row in out.tolist():
        print("  ids:", row)
        if tok is not None:
            print("  text:", tok.decode(row, skip_special_tokens=True))
    if args.no_check:
        return 0
    one = build(args, dtorch.DeviceMesh(args.device if args.device != "cuda" else "cuda:0"))
    ref = one.generate(ids, max_new_tokens=args.max_new_tokens, **kw)
    same = torch.equal(out, ref)
    print(f"matches single-device: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
