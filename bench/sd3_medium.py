"""An SD3-medium-shaped transformer, 4 denoising steps: dtorch (one-device mesh) against diffusers eager.

Issue 12 item 6's end-to-end figure. Both sides run diffusers' ``SD3Transformer2DModel`` config of
SD3 medium (24 layers, 24 heads x 64, joint_attention_dim 4096, pooled 2048, patch 2,
pos_embed_max_size 192) with the same random weights (seeded, diffusers' own initialisation, cast
to bf16): eager torch runs diffusers' module, dtorch its ``dtorch.applications.sd3`` transformer
loaded from that module's state dict. Input: latents 1x16x128x128 (a 1024x1024 image), 77+77 random
joint text tokens, random pooled projections; between the steps a flow-matching Euler step
(SD3's shift 3.0) in the same ops on both sides, in float32 as diffusers' scheduler does.

Figure lines (all start with ``sd3m``; tools/gpu_check.sh copies them into its summary):

  time    whole 4 steps, output read back: dtorch / torch          (goal <= 0.95)
  client  dtorch's time until the 4 steps are recorded (nothing waited for) / torch's whole time
                                                                    (goal <= 0.3)
  memory  peak allocation above the start of the run (weights excluded: both sides hold their
          own copy before it starts), dtorch / torch; cuda: torch.cuda.max_memory_allocated
          (dtorch allocates through the same c10 caching allocator), cpu: the process's VmHWM
                                                                    (goal <= 0.97)
  diff    max |dtorch - torch| of the final latents, and whether they are allclose (float32:
          rtol = atol = 1e-4; bf16: 3e-2); not allclose (or not finite) exits 1

    python3 bench/sd3_medium.py                       # cuda, SD3-medium shapes, bf16
    python3 bench/sd3_medium.py --tiny --device cpu   # 2 layers, 2 heads x 16, 32x32 latents, float32
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import sys
import time
from typing import Any, Dict, List, Optional

import torch

import dtorch
from dtorch.applications.sd3 import SD3Transformer2DModel
from dtorch.applications.sd3._common import load_module

MEDIUM = dict(sample_size=128, patch_size=2, in_channels=16, num_layers=24, attention_head_dim=64,
              num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536,
              pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=192)
TINY = dict(sample_size=32, patch_size=2, in_channels=16, num_layers=2, attention_head_dim=16, num_attention_heads=2,
            joint_attention_dim=64, caption_projection_dim=32, pooled_projection_dim=64, out_channels=16,
            pos_embed_max_size=24)
TEXT_TOKENS = 77 + 77  # CLIP + T5 tokens, the length of the original SD3 reference code
SHIFT = 3.0


class _StateDict:
    """A state dict read as ``load_module``'s checkpoint (keys, ``in``, ``get``)."""

    def __init__(self, sd: Dict[str, torch.Tensor]) -> None:
        self._sd = sd

    def keys(self):
        return self._sd.keys()

    def __contains__(self, key: str) -> bool:
        return key in self._sd

    def get(self, key: str) -> torch.Tensor:
        return self._sd[key]

    def close(self) -> None:
        pass


def sigmas(steps: int) -> List[float]:
    """Flow-matching sigmas: 1 - i / steps, shifted as SD3 does (shift 3.0), then 0 (the schedule's
    shape; diffusers' scheduler places its sigmas slightly differently, which this bench need not match)."""
    out = [1.0 - i / steps for i in range(steps)]
    return [SHIFT * s / (1 + (SHIFT - 1) * s) for s in out] + [0.0]


def denoise(model, x, ctx, pooled, timesteps, dts, dtype):
    """The steps: v = model(x, t); x = x + dt * v in float32 (diffusers' scheduler), back to ``dtype``.
    ``model`` is either side's; its output is a tuple for diffusers."""
    for t, dt in zip(timesteps, dts):
        v = model(x, ctx, pooled, t)
        if isinstance(v, tuple):
            v = v[0]
        x = (x.float() + dt * v.float()).to(dtype)
    return x


def _rss(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key)


def _settle(device: str) -> None:
    gc.collect()
    dtorch.synchronize()
    dtorch.empty_cache()
    if device == "cuda":
        torch.cuda.synchronize()
    else:
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def peak(fn, device: str) -> int:
    """Bytes allocated at the peak of ``fn()`` above what was allocated before it."""
    _settle(device)
    if device == "cuda":
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = _rss("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    fn()
    dtorch.synchronize()
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    return _rss("VmHWM") - base


def build(args) -> Dict[str, Any]:
    """Both models and both sides' inputs (already on their device / mesh)."""
    from diffusers import SD3Transformer2DModel as Ref
    from diffusers.utils import logging

    logging.set_verbosity_error()  # its warning on casting with to(): no module of this model is kept in float32
    cfg = TINY if args.tiny else MEDIUM
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, None: None}[getattr(args, "dtype", None)]
    dtype = dtype or (torch.float32 if args.tiny else torch.bfloat16)
    dev = args.device
    torch.manual_seed(args.seed)
    with torch.device(dev):  # initialised where it runs: 2 billion parameters are slow on the host
        ref = Ref(**cfg)
    ref = ref.to(dtype).eval()
    mesh = dtorch.DeviceMesh(dev, [0])
    model = SD3Transformer2DModel(cfg, device_mesh=mesh)
    load_module(model, _StateDict(ref.state_dict()))

    g = torch.Generator().manual_seed(args.seed + 1)
    size = cfg["sample_size"]
    x = torch.randn(1, cfg["in_channels"], size, size, generator=g).to(dtype)
    ctx = torch.randn(1, TEXT_TOKENS, cfg["joint_attention_dim"], generator=g).to(dtype)
    pooled = torch.randn(1, cfg["pooled_projection_dim"], generator=g).to(dtype)
    sig = sigmas(args.steps)
    ts = [torch.tensor([s * 1000.0], dtype=torch.float32) for s in sig[:-1]]
    dts = [sig[i + 1] - sig[i] for i in range(args.steps)]
    t_in = [x.to(dev), ctx.to(dev), pooled.to(dev), [t.to(dev) for t in ts]]
    d_in = [dtorch.from_torch(x.to(dev), mesh), dtorch.from_torch(ctx.to(dev), mesh),
            dtorch.from_torch(pooled.to(dev), mesh), [dtorch.from_torch(t.to(dev), mesh) for t in ts]]
    return dict(cfg=cfg, dtype=dtype, ref=ref, model=model, t_in=t_in, d_in=d_in, dts=dts)


def run_torch(b, dev: str):
    x, ctx, pooled, ts = b["t_in"]
    ref = b["ref"]

    def fwd(h, c, p, t):
        return ref(hidden_states=h, encoder_hidden_states=c, pooled_projections=p, timestep=t, return_dict=False)

    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = denoise(fwd, x, ctx, pooled, ts, b["dts"], b["dtype"])
    if dev == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def run_dtorch(b):
    x, ctx, pooled, ts = b["d_in"]
    dtorch.synchronize()
    t0 = time.perf_counter()
    out = denoise(b["model"], x, ctx, pooled, ts, b["dts"], b["dtype"])
    t1 = time.perf_counter()
    got = out.to_torch()
    if got.is_cuda:
        torch.cuda.synchronize()
    return t1 - t0, time.perf_counter() - t0, got


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="2 layers, 2 heads x 16, latents 1x16x32x32, float32")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                    help="default: bfloat16, float32 with --tiny")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each side (best of), after a warm-up")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.repeat < 1:
        ap.error("--steps and --repeat must be at least 1")
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("sd3m: no GPU (torch.cuda.is_available() is False); --device cpu runs on the host", file=sys.stderr)
        return 2
    gpu = f", {torch.cuda.get_device_name(0)}" if dev == "cuda" else ""
    t_build = time.perf_counter()
    b = build(args)
    cfg = b["cfg"]
    print(f"sd3m setup : python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"{platform.machine()}{gpu}; {'tiny' if args.tiny else 'SD3-medium'} ({cfg['num_layers']} layers, "
          f"{cfg['num_attention_heads']}x{cfg['attention_head_dim']}), {str(b['dtype'])[6:]}, latents "
          f"1x{cfg['in_channels']}x{cfg['sample_size']}x{cfg['sample_size']}, {TEXT_TOKENS} text tokens, "
          f"{args.steps} steps, best of {args.repeat}, interleaved; built in {time.perf_counter() - t_build:.1f}s")
    run_torch(b, dev), run_dtorch(b)  # warm-up (cuBLAS/cuDNN handles, the allocators' pools)
    best_t = best_c = best_d = float("inf")
    for _ in range(args.repeat):
        t, want = run_torch(b, dev)
        c, d, got = run_dtorch(b)
        best_t, best_c, best_d = min(best_t, t), min(best_c, c), min(best_d, d)
    pt = peak(lambda: run_torch(b, dev), dev)
    pd = peak(lambda: run_dtorch(b), dev)
    got, want = got.to(want.device).float(), want.float()
    diff = float((got - want).abs().max())
    tol = 1e-4 if b["dtype"] == torch.float32 else 3e-2
    close = bool(torch.isfinite(got).all()) and torch.allclose(got, want, rtol=tol, atol=tol)
    print(f"sd3m time  : torch {best_t * 1e3:9.1f} ms  dtorch {best_d * 1e3:9.1f} ms  ratio {best_d / best_t:5.2f}  "
          f"(goal <= 0.95)")
    print(f"sd3m client: torch {best_t * 1e3:9.1f} ms  dtorch {best_c * 1e3:9.1f} ms  ratio {best_c / best_t:5.2f}  "
          f"(goal <= 0.3)")
    print(f"sd3m memory: torch {pt / 2**20:9.1f} MiB dtorch {pd / 2**20:9.1f} MiB ratio {pd / max(pt, 1):5.2f}  "
          f"(goal <= 0.97; peak above the run's start, {'max_memory_allocated' if dev == 'cuda' else 'VmHWM'})")
    print(f"sd3m diff  : max |dtorch - torch| = {diff:.3e} (max |torch| = {float(want.abs().max()):.3e}); "
          f"allclose(rtol=atol={tol:g}) {close}")
    return 0 if close else 1


if __name__ == "__main__":
    sys.exit(main())
