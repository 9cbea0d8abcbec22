"""Flux.1 text-to-image with dtorch on a device mesh; writes a PNG.

By default it builds a tiny random Flux pipeline (diffusers' layout, random weights, FLUX.1-dev's
guidance embedding) in a temporary folder and runs it on 4 CPU devices (tp=2 splits the heads and
MLPs, ulysess_cp=2 the tokens), then checks the image against the same pipeline on one device. With
``--model`` it loads a local diffusers folder (FLUX.1-dev or FLUX.1-schnell) instead; ``--cache``
turns on First-Block-Cache or TeaCache.

    .venv/bin/python examples/flux/run.py                        # tiny random weights -> flux.png
    .venv/bin/python examples/flux/run.py --model ~/FLUX.1-schnell --prompt "a cat on the moon" \\
        --steps 4 --guidance 0 --mesh ulysess_cp=4 --device cuda --dtype bfloat16 --out cat.png
"""

from __future__ import annotations

import argparse
import sys

from dtorch.applications._diffusion import run_example
from dtorch.applications.flux import FluxPipeline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a local diffusers Flux folder (default: tiny random weights)")
    ap.add_argument("--prompt", default="a photo of a cat on the moon")
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (default 28; 4 for the tiny model)")
    ap.add_argument("--guidance", type=float, default=3.5, help="the embedded guidance (FLUX.1-dev)")
    ap.add_argument("--size", type=int, default=None, help="height = width in pixels (default: 1024; 32 tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mesh", default="tp=2,ulysess_cp=2", help="mesh dims, e.g. tp=2,ulysess_cp=2 or dp=2,tp=2")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: the files')")
    ap.add_argument("--max-sequence-length", type=int, default=None, help="T5 tokens (default 512; 16 tiny)")
    ap.add_argument("--cache", default=None, help="fbcache=THRESHOLD or teacache=THRESHOLD")
    ap.add_argument("--out", default="flux.png")
    args = ap.parse_args()
    from dtorch.applications.flux.testing import make_tiny_pipeline

    cache = {}
    if args.cache:
        name, _, value = args.cache.partition("=")
        key = {"fbcache": "first_block_cache_threshold", "teacache": "teacache_threshold"}.get(name)
        if key is None or not value:
            raise SystemExit(f"--cache: expected fbcache=THRESHOLD or teacache=THRESHOLD, got {args.cache!r}")
        cache[key] = float(value)

    def call_kw(pipe: FluxPipeline, size: int, steps: int, seq: int) -> dict:
        return dict(prompt=args.prompt, num_inference_steps=steps, guidance_scale=args.guidance, height=size,
                    width=size, max_sequence_length=seq, seed=args.seed, **cache)

    return run_example(FluxPipeline, args, make_tiny_pipeline, call_kw, 28, 512, lambda pipe: 1024)

if __name__ == "__main__":
    sys.exit(main())
