"""Stable Diffusion 3 text-to-image with dtorch on a device mesh; writes a PNG.

By default it builds a tiny random SD3 pipeline (diffusers' layout, random weights) in a temporary
folder and runs it on 4 CPU devices (dp=2 splits the CFG batch, tp=2 the heads and MLP), then
checks the image against the same pipeline on one device. With ``--model`` it loads a local
diffusers folder (e.g. stable-diffusion-3-medium-diffusers) instead.

    .venv/bin/python examples/sd3/run.py                       # tiny random weights -> sd3.png
    .venv/bin/python examples/sd3/run.py --model ~/sd3-medium --prompt "a cat on the moon" \\
        --steps 28 --mesh dp=2,tp=2 --dtype bfloat16 --out cat.png
"""

from __future__ import annotations

import argparse
import sys

from dtorch.applications._diffusion import run_example
from dtorch.applications.sd3 import StableDiffusion3Pipeline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a local diffusers SD3 folder (default: tiny random weights)")
    ap.add_argument("--prompt", default="a photo of a cat on the moon")
    ap.add_argument("--negative-prompt", default="")
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (default 28; 4 for the tiny model)")
    ap.add_argument("--guidance", type=float, default=7.0)
    ap.add_argument("--size", type=int, default=None, help="height = width in pixels (default: the model's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mesh", default="dp=2,tp=2", help="mesh dims, e.g. dp=2,tp=2 or dp=1,tp=4")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: the files')")
    ap.add_argument("--max-sequence-length", type=int, default=None, help="T5 tokens (default 256; 16 tiny)")
    ap.add_argument("--out", default="sd3.png")
    args = ap.parse_args()
    from dtorch.applications.sd3.testing import make_tiny_pipeline

    def call_kw(pipe: StableDiffusion3Pipeline, size: int, steps: int, seq: int) -> dict:
        return dict(prompt=args.prompt, negative_prompt=args.negative_prompt, num_inference_steps=steps,
                    guidance_scale=args.guidance, height=size, width=size, max_sequence_length=seq, seed=args.seed)

    return run_example(StableDiffusion3Pipeline, args, make_tiny_pipeline, call_kw, 28, 256,
                       lambda pipe: pipe.default_sample_size * pipe.vae_scale_factor)

if __name__ == "__main__":
    sys.exit(main())
