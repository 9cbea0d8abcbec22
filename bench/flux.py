"""Flux against diffusers eager, in one process: the tiny pipeline on CPU meshes, the caches, and a
FLUX.1-shaped transformer on a GPU.

``--mode pipeline`` (default): the tiny random Flux folder (``dtorch.applications.flux.testing``),
same prompt, seed and steps on both sides, to a float image:

  total   time of one whole call, dtorch (one CPU device) / diffusers;
  client  dtorch's time until ``async_call`` returns (everything recorded) / diffusers' total;
  memory  the process's peak resident memory above the call's start (VmHWM), dtorch / diffusers;
  mesh    with ``--mesh L1 L2 ...`` (e.g. ``tp=2`` ``ulysess_cp=2`` ``dp=2,tp=2``): dtorch's time per
          step on each layout (true CFG on, so dp carries the CFG pair) and the PSNR against diffusers;
  cache   with ``--cache fbcache=0.9 teacache=60``: steps skipped, time / uncached dtorch, PSNR
          against the uncached image.

``--mode transformer``: a FLUX.1-dev-shaped transformer (19 double, 38 single blocks, 24 heads x
128; ``--blocks D S`` fewer) with the same random weights on both sides, bf16, packed latents of a
``--size`` image (1024: 4096 tokens) and 512 text tokens, ``--steps`` Euler steps; lines start with
``flux``: time (goal <= 0.9), client, memory (goal <= 0.97), diff (allclose or exit 1).

    .venv/bin/python bench/flux.py
    .venv/bin/python bench/flux.py --mesh tp=2 ulysess_cp=2 ring_cp=2 dp=2,tp=2 --cache fbcache=0.9 teacache=60
    python3 bench/flux.py --mode transformer --device cuda                 # tools/gpu_check.sh's flux step
    .venv/bin/python bench/flux.py --mode transformer --device cpu --tiny  # its rehearsal on the host
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import torch

import dtorch
from dtorch.applications._diffusion import parse_mesh, psnr
from dtorch.applications.flux import FluxPipeline, FluxTransformer2DModel
from dtorch.applications.flux.pipeline import image_ids
from dtorch.applications.sd3._common import load_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sd3_medium import _StateDict, peak  # noqa: E402  (the same peak-memory and state-dict helpers)

FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))
TINY = dict(FLUX_DEV, num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
            joint_attention_dim=64, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))


# ---------------------------------------------------------------- the tiny pipeline


def _torch_call(ref, kw):
    t0 = time.perf_counter()
    with torch.no_grad():
        img = ref(**kw, generator=torch.Generator().manual_seed(0), output_type="np").images
    return time.perf_counter() - t0, img


def _dtorch_call(pipe, kw):
    dtorch.synchronize()
    t0 = time.perf_counter()
    pending = pipe.async_call(**kw, seed=0, output_type="np")
    t1 = time.perf_counter()
    img = pending.get().images
    return t1 - t0, time.perf_counter() - t0, img


def pipeline_bench(args) -> int:
    from dtorch.applications.flux.testing import make_tiny_pipeline

    print(f"flux tiny pipeline: python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} "
          f"CPUs, {platform.machine()}; {args.steps} steps at {args.size}x{args.size}, best of {args.repeat}")
    with tempfile.TemporaryDirectory() as path:
        ref = make_tiny_pipeline(path, seed=0)
        ref.set_progress_bar_config(disable=True)
        pipe = FluxPipeline.from_pretrained(path, device_mesh=dtorch.DeviceMesh("cpu", [0]))
        kw = dict(prompt="a photo of a cat", num_inference_steps=args.steps, height=args.size, width=args.size,
                  guidance_scale=3.5, max_sequence_length=16)
        _torch_call(ref, kw), _dtorch_call(pipe, kw)  # warm-up
        best_t = best_c = best_d = float("inf")
        for _ in range(args.repeat):
            t, want = _torch_call(ref, kw)
            c, d, got = _dtorch_call(pipe, kw)
            best_t, best_c, best_d = min(best_t, t), min(best_c, c), min(best_d, d)
        for name, mine in (("total ", best_d), ("client", best_c)):
            print(f"{name} : diffusers {best_t * 1e3:8.1f} ms   dtorch {mine * 1e3:8.1f} ms   ratio {mine / best_t:5.2f}")
        pt = min(peak(lambda: _torch_call(ref, kw), "cpu") for _ in range(3))
        pd = min(peak(lambda: _dtorch_call(pipe, kw), "cpu") for _ in range(3))
        print(f"memory : diffusers {pt / 2**20:8.1f} MiB  dtorch {pd / 2**20:8.1f} MiB  ratio {pd / max(pt, 1):5.2f}")
        print(f"image  : max |dtorch - diffusers| = {float(abs(got - want).max()):.2e}")
        cfg_kw = dict(kw, negative_prompt="blurry", true_cfg_scale=2.0)
        if args.mesh:
            print(f"mesh   : true CFG, {args.steps} steps, each layout interleaved with diffusers")
            for layout in ["dp=1"] + list(args.mesh):
                p = FluxPipeline.from_pretrained(path, device_mesh=parse_mesh(layout))
                _dtorch_call(p, cfg_kw)
                best, best_ref, img, want_cfg = float("inf"), float("inf"), None, None
                for _ in range(args.repeat):
                    t_ref, want_cfg = _torch_call(ref, cfg_kw)
                    _, d, img = _dtorch_call(p, cfg_kw)
                    best, best_ref = min(best, d), min(best_ref, t_ref)
                print(f"mesh   : {layout:20s} diffusers {best_ref / args.steps * 1e3:8.1f} ms/step  dtorch "
                      f"{best / args.steps * 1e3:8.1f} ms/step  ratio {best / best_ref:5.2f}  PSNR vs diffusers "
                      f"{psnr(img, want_cfg):6.1f} dB")
        for spec in args.cache or ():
            name, _, value = spec.partition("=")
            key = {"fbcache": "first_block_cache_threshold", "teacache": "teacache_threshold"}[name]
            ckw = dict(kw, num_inference_steps=args.cache_steps)
            plain_t = cached_t = float("inf")
            for _ in range(args.repeat):
                _, t, plain = _dtorch_call(pipe, ckw)
                _, c, cached = _dtorch_call(pipe, dict(ckw, **{key: float(value)}))
                plain_t, cached_t = min(plain_t, t), min(cached_t, c)
            st = pipe.last_cache_stats
            print(f"cache  : {spec:16s} {st['skipped']}/{st['steps']} steps skipped, time / uncached "
                  f"{cached_t / plain_t:5.2f}, PSNR vs uncached {psnr(cached, plain):6.1f} dB; the client waited "
                  f"{st['waited'] / st['steps'] * 1e3:.1f} ms/step for the decisions")
    return 0


# ---------------------------------------------------------------- a FLUX.1-shaped transformer


def build(args) -> Dict[str, Any]:
    from diffusers import FluxTransformer2DModel as Ref
    from diffusers.utils import logging

    logging.set_verbosity_error()
    cfg = dict(TINY if args.tiny else FLUX_DEV)
    if args.blocks:
        cfg.update(num_layers=args.blocks[0], num_single_layers=args.blocks[1])
    dtype = torch.float32 if args.tiny else torch.bfloat16
    dev = args.device
    torch.manual_seed(0)
    with torch.device(dev):
        ref = Ref(**cfg)
    ref = ref.to(dtype).eval()
    mesh = dtorch.DeviceMesh(dev, [0])
    model = FluxTransformer2DModel(cfg, device_mesh=mesh)
    load_module(model, _StateDict(ref.state_dict()))
    side = (args.size or (64 if args.tiny else 1024)) // 16  # packed tokens per side (VAE 8, 2x2 patches)
    text = 16 if args.tiny else 512
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, side * side, cfg["in_channels"], generator=g).to(dtype)
    ctx = torch.randn(1, text, cfg["joint_attention_dim"], generator=g).to(dtype)
    pooled = torch.randn(1, cfg["pooled_projection_dim"], generator=g).to(dtype)
    img, txt = image_ids(side, side, dtype), torch.zeros(text, 3, dtype=dtype)
    sig = [1.0 - i / args.steps for i in range(args.steps)] + [0.0]
    ts = [torch.full((1,), s, dtype=dtype) for s in sig[:-1]]
    guidance = torch.full((1,), 3.5, dtype=torch.float32)
    dts = [sig[i + 1] - sig[i] for i in range(args.steps)]
    t_in = [x.to(dev), ctx.to(dev), pooled.to(dev), [t.to(dev) for t in ts], guidance.to(dev)]
    d_in = [dtorch.from_torch(x.to(dev), mesh), dtorch.from_torch(ctx.to(dev), mesh),
            dtorch.from_torch(pooled.to(dev), mesh), [dtorch.from_torch(t.to(dev), mesh) for t in ts],
            dtorch.from_torch(guidance.to(dev), mesh)]
    return dict(cfg=cfg, dtype=dtype, ref=ref, model=model, t_in=t_in, d_in=d_in, dts=dts, img=img.to(dev),
                txt=txt.to(dev), img_host=img, txt_host=txt, tokens=(side * side, text))


def _denoise(fwd, x, ts, dts, dtype):
    for t, dt in zip(ts, dts):
        v = fwd(x, t)
        x = (x.float() + dt * v.float()).to(dtype)
    return x


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def run_torch(b, dev):
    x, ctx, pooled, ts, g = b["t_in"]
    ref = b["ref"]

    def fwd(h, t):
        return ref(hidden_states=h, encoder_hidden_states=ctx, pooled_projections=pooled, timestep=t,
                   img_ids=b["img"], txt_ids=b["txt"], guidance=g, return_dict=False)[0]

    _sync(dev)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = _denoise(fwd, x, ts, b["dts"], b["dtype"])
    _sync(dev)
    return time.perf_counter() - t0, out


def run_dtorch(b, dev):
    x, ctx, pooled, ts, g = b["d_in"]
    model = b["model"]

    def fwd(h, t):
        return model(h, ctx, pooled, t, b["img_host"], b["txt_host"], guidance=g)

    dtorch.synchronize()
    t0 = time.perf_counter()
    out = _denoise(fwd, x, ts, b["dts"], b["dtype"])
    t1 = time.perf_counter()
    got = out.to_torch()
    _sync(dev)
    return t1 - t0, time.perf_counter() - t0, got


def transformer_bench(args) -> int:
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("flux: no GPU (torch.cuda.is_available() is False); --device cpu --tiny runs on the host",
              file=sys.stderr)
        return 2
    t_build = time.perf_counter()
    b = build(args)
    cfg = b["cfg"]
    gpu = f", {torch.cuda.get_device_name(0)}" if dev == "cuda" else ""
    print(f"flux setup : python {platform.python_version()}, torch {torch.__version__}{gpu}; "
          f"{cfg['num_layers']}+{cfg['num_single_layers']} blocks, {cfg['num_attention_heads']}x"
          f"{cfg['attention_head_dim']}, {str(b['dtype'])[6:]}, {b['tokens'][0]}+{b['tokens'][1]} tokens, "
          f"{args.steps} steps, best of {args.repeat}; built in {time.perf_counter() - t_build:.1f}s")
    run_torch(b, dev), run_dtorch(b, dev)  # warm-up
    best_t = best_c = best_d = float("inf")
    for _ in range(args.repeat):
        t, want = run_torch(b, dev)
        c, d, got = run_dtorch(b, dev)
        best_t, best_c, best_d = min(best_t, t), min(best_c, c), min(best_d, d)
    pt = peak(lambda: run_torch(b, dev), dev)
    pd = peak(lambda: run_dtorch(b, dev), dev)
    got, want = got.to(want.device).float(), want.float()
    diff = float((got - want).abs().max())
    tol = 1e-4 if b["dtype"] == torch.float32 else 3e-2
    close = bool(torch.isfinite(got).all()) and torch.allclose(got, want, rtol=tol, atol=tol)
    print(f"flux time  : torch {best_t * 1e3:9.1f} ms  dtorch {best_d * 1e3:9.1f} ms  ratio {best_d / best_t:5.2f}  "
          f"(goal <= 0.9)")
    print(f"flux client: torch {best_t * 1e3:9.1f} ms  dtorch {best_c * 1e3:9.1f} ms  ratio {best_c / best_t:5.2f}")
    print(f"flux memory: torch {pt / 2**20:9.1f} MiB dtorch {pd / 2**20:9.1f} MiB ratio {pd / max(pt, 1):5.2f}  "
          f"(goal <= 0.97)")
    print(f"flux diff  : max |dtorch - torch| = {diff:.3e}; allclose(rtol=atol={tol:g}) {close}")
    return 0 if close else 1


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("pipeline", "transformer"), default="pipeline")
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (pipeline 4, transformer 4)")
    ap.add_argument("--size", type=int, default=None, help="image height = width (pipeline 32, transformer 1024)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mesh", nargs="*", default=None, help="pipeline: layouts to time, e.g. tp=2 dp=2,tp=2")
    ap.add_argument("--cache", nargs="*", default=None, help="pipeline: fbcache=T teacache=T runs")
    ap.add_argument("--cache-steps", type=int, default=12, help="pipeline: steps of the cache runs")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="transformer: where it runs")
    ap.add_argument("--tiny", action="store_true", help="transformer: 2+2 blocks, 2 heads x 16, float32")
    ap.add_argument("--blocks", type=int, nargs=2, default=None, metavar=("DOUBLE", "SINGLE"))
    args = ap.parse_args(argv)
    args.steps = args.steps or 4
    if args.steps < 1 or args.repeat < 1:
        ap.error("--steps and --repeat must be at least 1")
    if args.mode == "transformer":
        return transformer_bench(args)
    args.size = args.size or 32
    return pipeline_bench(args)


if __name__ == "__main__":
    sys.exit(main())
