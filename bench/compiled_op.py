"""dtorch.compiled_op's fused ops, eager (the default) and through torch.compile (opt-in), against
plain torch eager and plain torch.compile on the same inputs, on a 1-device CPU mesh, in one process.

Per op a loop of `steps` calls, each on the previous call's result (y = op(y, ...)), then one read;
the figure is wall time per call, the best of --repeat interleaved turns; ratios are against torch
eager. Compilation happens in the warm-up turn (not timed): each compiled form is built once per
shape/dtype and cached. Shapes (--tokens T, --dim D): rotary on [1, 4, T, D/4] with [T, D/4]
tables (interleaved pairs, Flux's form), the SwiGLU gate on [T, D] with a [2D, D] weight, adaLN
modulation on [1, T, D] with [1, 1, D] scale/shift.

Then the SD3 transformer (``dtorch.applications.sd3``, a small random diffusers config: --sd3-layers
blocks, 4 heads x 32, latents 2x4x(--sd3-size)^2, 16 text tokens): one forward, diffusers eager
against dtorch with fusion off (diffusers' op sequence, bit-identical) and on
(``execute_config=ExecuteConfig(compile_fused_ops=True)``: every adaLN modulation one compiled
``layer_norm_mul_add`` kernel); best of --repeat, ratios against diffusers. ``--sd3-only`` skips
the per-op rows, ``--no-sd3`` the transformer row.

    /work/main/.venv/bin/python bench/compiled_op.py
    /work/main/.venv/bin/python bench/compiled_op.py --tokens 4096 --dim 512 --steps 20
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

import torch

import dtorch
from dtorch.compiled_op import _layer_norm_mul_add, _rotary_interleaved, _silu_linear_chunk
from local_map import best_of


def cases(tokens: int, dim: int):
    """(name, torch function, dtorch op, first input, the other inputs)."""
    hd = dim // 4
    ang = torch.randn(tokens, hd)
    co = dtorch.compiled_op
    return [
        ("apply_rotary_emb", _rotary_interleaved, co.apply_rotary_emb, torch.randn(1, 4, tokens, hd),
         [ang.cos(), ang.sin()]),
        ("silu_linear_chunk", _silu_linear_chunk, co.silu_linear_chunk, torch.randn(tokens, dim),
         [torch.randn(2 * dim, dim) / dim ** 0.5]),
        ("layer_norm_mul_add", _layer_norm_mul_add, co.layer_norm_mul_add, torch.randn(1, tokens, dim),
         [0.1 * torch.randn(1, 1, dim), 0.1 * torch.randn(1, 1, dim)]),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sd3-layers", type=int, default=2)
    p.add_argument("--sd3-size", type=int, default=32, help="latent height = width (tokens: (size / 2)^2)")
    p.add_argument("--sd3-only", action="store_true")
    p.add_argument("--no-sd3", action="store_true")
    args = p.parse_args(argv)
    print(f"# bench/compiled_op.py: {platform.node()}, {torch.get_num_threads()} torch threads, torch "
          f"{torch.__version__}, tokens {args.tokens}, dim {args.dim}, {args.steps} steps, best of {args.repeat}")
    mesh = dtorch.DeviceMesh("cpu", [0])
    on = dtorch.ExecuteConfig(compile_fused_ops=True)
    if not args.sd3_only:
        ops(args, mesh, on)
    if not args.no_sd3:
        sd3(args, mesh, on)
    return 0


def ops(args, mesh, on) -> None:
    print(f"{'op':20s} {'torch ms':>9s} {'torch.compile':>14s} {'dtorch eager':>13s} {'dtorch compiled':>16s}"
          f"   (ratios: time / torch eager)")
    for name, fn, op, x0, rest in cases(args.tokens, args.dim):
        tc = torch.compile(fn, dynamic=False, fullgraph=True)
        drest = [dtorch.from_torch(t, mesh) for t in rest]
        dx0 = dtorch.from_torch(x0, mesh)

        def run_torch(f=fn):
            y = x0
            for _ in range(args.steps):
                y = f(y, *rest)
            return y

        def run_dtorch(cfg, op=op):
            y = dx0
            for _ in range(args.steps):
                y = op(y, *drest, execute_config=cfg)
            return y.to_torch()

        fns = [run_torch, lambda: run_torch(tc), lambda: run_dtorch(None), lambda: run_dtorch(on)]
        t0 = time.perf_counter()
        outs = [f() for f in fns]  # warm-up: compiles
        warm = time.perf_counter() - t0
        assert torch.equal(outs[0], outs[2]), f"{name}: dtorch eager is not bit-identical to torch"
        diff = (outs[1] - outs[3]).abs().max().item()
        b = best_of(fns, args.repeat)
        print(f"{name:20s} {1e3 * b[0] / args.steps:9.3f} {b[1] / b[0]:14.2f} {b[2] / b[0]:13.2f} {b[3] / b[0]:16.2f}"
              f"   (warm-up with compiles {warm:.0f} s; |torch.compile - dtorch compiled| {diff:.1e})")


def sd3(args, mesh, on) -> None:
    """The SD3 transformer's forward: diffusers eager, dtorch fusion off, dtorch fusion on."""
    import tempfile

    from diffusers import SD3Transformer2DModel as Ref

    from dtorch.applications.sd3 import SD3Transformer2DModel

    size = args.sd3_size
    cfg = dict(sample_size=size, patch_size=2, in_channels=4, out_channels=4, num_layers=args.sd3_layers,
               attention_head_dim=32, num_attention_heads=4, joint_attention_dim=64, caption_projection_dim=128,
               pooled_projection_dim=64, pos_embed_max_size=size)
    g = torch.Generator().manual_seed(0)
    ref = Ref(**cfg).eval()
    with torch.no_grad():
        for prm in ref.parameters():
            prm.copy_(torch.randn(prm.shape, generator=g) * 0.1)
    x, c = torch.randn(2, 4, size, size, generator=g), torch.randn(2, 16, 64, generator=g)
    pooled, t = torch.randn(2, 64, generator=g), torch.tensor([981.5, 3.25])
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        model = SD3Transformer2DModel.from_pretrained(tmp, device_mesh=mesh)

    def run_ref():
        with torch.no_grad():
            return ref(x, c, pooled, t).sample

    fns = [run_ref, lambda: model(x, c, pooled, t).to_torch(),
           lambda: model(x, c, pooled, t, execute_config=on).to_torch()]
    t0 = time.perf_counter()
    outs = [f() for f in fns]  # warm-up: compiles the adaLN kernel for the image and the text tokens
    warm = time.perf_counter() - t0
    assert torch.equal(outs[0], outs[1]), "sd3: dtorch with fusion off is not bit-identical to diffusers"
    diff = (outs[0] - outs[2]).abs().max().item()
    assert torch.allclose(outs[0], outs[2], rtol=1e-4, atol=1e-4), f"sd3: fusion on differs by {diff}"
    b = best_of(fns, args.repeat)
    print(f"{'sd3 transformer':20s} {'diffusers ms':>12s} {'fusion off':>11s} {'fusion on':>10s} {'on / off':>9s}"
          f"   (ratios: time / diffusers eager; {args.sd3_layers} blocks, {(size // 2) ** 2} image + 16 text tokens)")
    print(f"{'sd3 transformer':20s} {1e3 * b[0]:12.1f} {b[1] / b[0]:11.2f} {b[2] / b[0]:10.2f} {b[2] / b[1]:9.2f}"
          f"   (warm-up with compiles {warm:.0f} s; |diffusers - fusion on| {diff:.1e})")


if __name__ == "__main__":
    sys.exit(main())
