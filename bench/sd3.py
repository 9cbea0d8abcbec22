"""The tiny SD3 pipeline: dtorch (one CPU device) against diffusers eager, in one process.

Both run the same tiny random diffusers folder (``dtorch.applications.sd3.testing``) with the same
prompt, seed and step count, to a float image (``output_type="np"``):

  total   time of one whole call, dtorch / diffusers;
  client  dtorch's time until ``async_call`` returns (the whole generation recorded, nothing waited
          for) / diffusers' total time (the original DTorch reports 0.36 on SD3);
  memory  the process's peak resident memory above the start of the call (VmHWM, reset through
          /proc/self/clear_refs; dtorch's buffer cache emptied and glibc's free pages trimmed
          first), dtorch / diffusers, at a larger image (--memory-size) so that it registers.

    .venv/bin/python bench/sd3.py
    .venv/bin/python bench/sd3.py --steps 8 --size 48 --repeat 5
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import sys
import tempfile
import time

import torch

import dtorch
from dtorch.applications.sd3 import StableDiffusion3Pipeline
from dtorch.applications.sd3.testing import make_tiny_pipeline


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key)


def _reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def run_torch(ref, kw):
    t0 = time.perf_counter()
    with torch.no_grad():
        img = ref(**kw, generator=torch.Generator().manual_seed(0), output_type="np").images
    return time.perf_counter() - t0, img


def run_dtorch(pipe, kw):
    dtorch.synchronize()
    t0 = time.perf_counter()
    pending = pipe.async_call(**kw, generator=torch.Generator().manual_seed(0), output_type="np")
    t1 = time.perf_counter()
    img = pending.get().images
    return t1 - t0, time.perf_counter() - t0, img


def peak(fn) -> int:
    gc.collect()
    dtorch.synchronize()
    dtorch.empty_cache()
    # Hand freed heap pages back to the kernel first: the tiny pipeline's buffers would otherwise be
    # served from pages an earlier run left resident, and neither side's peak would show.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    base = _status("VmRSS")
    _reset_hwm()
    fn()
    dtorch.synchronize()
    return _status("VmHWM") - base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--size", type=int, default=32, help="image height = width (the tiny VAE's scale factor is 1)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--memory-size", type=int, default=48, help="image size of the memory measurement")
    args = ap.parse_args()
    print(f"sd3 tiny pipeline: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{platform.machine()}; {args.steps} steps at {args.size}x{args.size}, best of {args.repeat}, interleaved")
    with tempfile.TemporaryDirectory() as path:
        ref = make_tiny_pipeline(path, seed=0)
        ref.set_progress_bar_config(disable=True)
        pipe = StableDiffusion3Pipeline.from_pretrained(path, device_mesh=dtorch.DeviceMesh("cpu", [0]))
        kw = dict(prompt="a photo of a cat", negative_prompt="blurry", num_inference_steps=args.steps,
                  height=args.size, width=args.size, guidance_scale=5.0, max_sequence_length=16)
        run_torch(ref, kw), run_dtorch(pipe, kw)  # warm-up
        best_t, best_c, best_d = float("inf"), float("inf"), float("inf")
        for _ in range(args.repeat):
            t, want = run_torch(ref, kw)
            c, d, got = run_dtorch(pipe, kw)
            best_t, best_c, best_d = min(best_t, t), min(best_c, c), min(best_d, d)
        diff = float(abs(got - want).max())
        print(f"total  : diffusers {best_t * 1e3:8.1f} ms   dtorch {best_d * 1e3:8.1f} ms   ratio {best_d / best_t:5.2f}")
        print(f"client : diffusers {best_t * 1e3:8.1f} ms   dtorch {best_c * 1e3:8.1f} ms   ratio {best_c / best_t:5.2f}")
        big = dict(kw, height=args.memory_size, width=args.memory_size)
        pt = min(peak(lambda: run_torch(ref, big)) for _ in range(3))
        pd = min(peak(lambda: run_dtorch(pipe, big)) for _ in range(3))
        print(f"memory : diffusers {pt / 2**20:8.1f} MiB  dtorch {pd / 2**20:8.1f} MiB  ratio {pd / max(pt, 1):5.2f}  "
              f"(at {args.memory_size}x{args.memory_size})")
        print(f"image max |dtorch - diffusers| = {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
