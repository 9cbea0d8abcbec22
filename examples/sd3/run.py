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
import os
import sys
import tempfile
import time

import numpy as np
import torch

import dtorch
from dtorch.applications.sd3 import StableDiffusion3Pipeline


def parse_mesh(text: str, device: str) -> dtorch.DeviceMesh:
    """``dp=2,tp=2`` -> a mesh of 4 devices with those dim names (sizes multiply)."""
    names, sizes = [], []
    for part in text.split(","):
        name, _, size = part.partition("=")
        if not name or not size.isdigit() or int(size) < 1:
            raise SystemExit(f"--mesh: expected name=size[,name=size...], got {text!r}")
        names.append(name.strip())
        sizes.append(int(size))
    return dtorch.init_device_mesh(device, tuple(sizes), mesh_dim_names=tuple(names))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


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

    tiny = args.model is None
    tmp = None
    path = args.model
    if tiny:
        from dtorch.applications.sd3.testing import make_tiny_pipeline

        tmp = tempfile.TemporaryDirectory()
        path = tmp.name
        make_tiny_pipeline(path, seed=0)
    steps = args.steps or (4 if tiny else 28)
    seq = args.max_sequence_length or (16 if tiny else 256)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    mesh = parse_mesh(args.mesh, args.device)
    print(f"mesh {mesh}; model {'tiny random' if tiny else path}; {steps} steps")

    t0 = time.perf_counter()
    pipe = StableDiffusion3Pipeline.from_pretrained(path, device_mesh=mesh, torch_dtype=dtype)
    print(f"loaded in {time.perf_counter() - t0:.1f} s")
    size = args.size or (32 if tiny else pipe.default_sample_size * pipe.vae_scale_factor)
    kw = dict(prompt=args.prompt, negative_prompt=args.negative_prompt, num_inference_steps=steps,
              guidance_scale=args.guidance, height=size, width=size, max_sequence_length=seq, seed=args.seed)
    t0 = time.perf_counter()
    image = pipe(**kw, output_type="np", progress=True).images
    print(f"generated {size}x{size} in {time.perf_counter() - t0:.1f} s")
    from PIL import Image

    Image.fromarray((image[0] * 255).round().astype("uint8")).save(args.out)
    print(f"wrote {os.path.abspath(args.out)}")
    if tiny and len(mesh.device_ids) > 1:
        single = StableDiffusion3Pipeline.from_pretrained(path, device_mesh=dtorch.DeviceMesh(args.device, [0]))
        ref = single(**kw, output_type="np").images
        print(f"PSNR against one device: {psnr(image, ref):.1f} dB")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
