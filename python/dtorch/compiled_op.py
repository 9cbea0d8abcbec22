"""``dtorch.compiled_op``: the original DTorch's fused operators, run on each device's local pieces
by that device's worker through the ``local_map`` machinery (one USER node each).

- ``apply_rotary_emb(x, cos, sin, interleaved=True)``: rotary position embedding of a query or key.
- ``silu_linear_chunk(x, weight, bias=None)``: a SwiGLU gate, ``silu(a) * b`` with
  ``a, b = linear(x, weight, bias).chunk(2, -1)``.
- ``layer_norm_mul_add(x, scale, shift, weight=None, bias=None, eps=1e-6)``: adaLN modulation,
  ``layer_norm(x) * (1 + scale) + shift``.

By default each op runs, on the worker, the exact eager torch op sequence its docstring shows, so
its result is bit-identical to that torch code on the same local tensors. With
``execute_config=dtorch.ExecuteConfig(compile_fused_ops=True)`` (or the environment variable
``DTORCH_COMPILE_FUSED=1`` as the default) the same function goes through ``torch.compile``
(Inductor: C++/OpenMP code on CPU, Triton on CUDA) on the worker thread, compiled once per
(op, local shapes, dtypes, device) and cached in the process; its results are within the compiled
kernel's rounding of eager (allclose), not bit-identical (docs/decisions.md, "Compiled fused ops").

Placements (checked at the call, PlacementError otherwise; the output takes ``x``'s placements):
``x`` Replicate or Shard(d) on any dim but the last (the last is normalized, paired or contracted);
no Partial anywhere (none of the ops is linear). The operands that broadcast against ``x``
(``cos``/``sin``, ``scale``/``shift``, aligned right as broadcasting aligns them) follow ``x``: on a
mesh dim where ``x`` is Shard(d), one whose matching dim has x's size must be Shard on that dim,
one where it is 1 or missing Replicate; where ``x`` is Replicate, Replicate. ``weight`` and
``bias`` are Replicate.
"""

from __future__ import annotations

import os
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from . import _C
from ._local_map import _apply

__all__ = ["apply_rotary_emb", "silu_linear_chunk", "layer_norm_mul_add", "compiled_kernels"]


# ---- the eager definitions (what each op computes; the compiled path compiles these same functions)

def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    if interleaved:  # pairs (x0, x1), (x2, x3), ...: Flux / diffusers use_real_unbind_dim=-1
        re, im = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        rotated = torch.stack([-im, re], dim=-1).flatten(-2)
    else:  # halves (x[:d/2], x[d/2:]): Llama's rotate_half
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def _rotary_interleaved(x, cos, sin):
    return _rotary(x, cos, sin, True)


def _rotary_halves(x, cos, sin):
    return _rotary(x, cos, sin, False)


def _silu_linear_chunk(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    a, b = F.linear(x, weight, bias).chunk(2, dim=-1)
    return F.silu(a) * b


def _layer_norm_mul_add(x, scale, shift, weight=None, bias=None, eps=1e-6):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps) * (1 + scale) + shift


# ---- the compiled kernels' cache

_compiled: Dict[Tuple, Callable] = {}
_compiled_lock = threading.Lock()


def compiled_kernels() -> List[Tuple]:
    """The keys of the kernels compiled so far in this process: (op, local shapes, dtypes, device)."""
    with _compiled_lock:
        return list(_compiled)


def _own_code(fn: Callable) -> Callable:
    """``fn`` with a code object of its own. Dynamo keeps compiled entries on the code object and
    fails a call once one code object has been compiled for more than its recompile limit (8)
    different sets of shapes, however many ``torch.compile`` wrappers there are: a model with
    many adaLN shapes (image and text tokens, per mesh) passes that. One copy per cache key keeps
    each key's kernel alone on its code object."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)


def _kernel(fn: Callable, compiled: bool, extra: Tuple = ()) -> Callable:
    """What the worker runs on the local tensors: ``fn`` itself, or its torch.compile'd form for
    these shapes/dtypes (compiled on first use, on the worker that meets it first)."""
    if not compiled:
        return fn

    def run(*tensors):
        key = (fn.__name__, tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in tensors),
               tuple(t.dtype for t in tensors if isinstance(t, torch.Tensor)),
               str(tensors[0].device)) + extra
        k = _compiled.get(key)
        if k is not None:
            return k(*tensors)
        with _compiled_lock:  # the first call compiles: one worker at a time, the others then find it
            k = _compiled.get(key)
            if k is None:  # dynamic=False: one specialised kernel per key, never a recompile
                k = torch.compile(_own_code(fn), dynamic=False, fullgraph=True)
                out = k(*tensors)
                _compiled[key] = k
                return out
        return k(*tensors)

    run.__name__ = run.__qualname__ = fn.__name__
    return run


def _use_compile(execute_config: Any) -> bool:
    if execute_config is None:
        return os.environ.get("DTORCH_COMPILE_FUSED", "0") not in ("", "0")
    from .applications._cache import ExecuteConfig
    if not isinstance(execute_config, ExecuteConfig):
        raise TypeError(f"execute_config must be a dtorch.ExecuteConfig, got {type(execute_config).__name__}")
    return execute_config.compile_fused_ops


# ---- placements

def _check_x(name: str, x: Any) -> None:
    if not isinstance(x, _C.TensorBase):
        raise TypeError(f"{name}: x must be a dtorch tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise RuntimeError(f"{name}: x must have at least one dimension")
    for md, p in enumerate(x.placements):
        if p.is_partial():
            raise _C.PlacementError(f"{name}: x is Partial on mesh dim {md}; the op is not linear: "
                                    f"redistribute it to Replicate or Shard first")
        if p.is_shard() and p.dim == x.dim() - 1:
            raise _C.PlacementError(f"{name}: x is Shard({p.dim}) on mesh dim {md}, its last dim, which the op "
                                    f"reduces over; shard another dim or replicate it")


def _check_follow(name: str, arg: str, x: Any, t: Any) -> None:
    """``t`` (broadcast against x, aligned right) must follow x's shards (module docstring)."""
    if not isinstance(t, _C.TensorBase):
        raise TypeError(f"{name}: {arg} must be a dtorch tensor, got {type(t).__name__}")
    if t.device_mesh != x.device_mesh:
        raise _C.PlacementError(f"{name}: {arg} is on {t.device_mesh!r}, x on {x.device_mesh!r}")
    off = x.dim() - t.dim()
    if off < 0:
        raise RuntimeError(f"{name}: {arg} has {t.dim()} dims, more than x's {x.dim()}")
    for md, (px, pt) in enumerate(zip(x.placements, t.placements)):
        d = px.dim - off if px.is_shard() else -1
        follows = d >= 0 and t.shape[d] == x.shape[px.dim] and x.shape[px.dim] != 1
        want = f"Shard({d})" if follows else "Replicate()"
        ok = pt.is_shard(d) if follows else pt.is_replicate()
        if not ok:
            raise _C.PlacementError(f"{name}: {arg} is {pt} on mesh dim {md} where x is {px}: it must be {want}")


def _check_replicate(name: str, arg: str, x: Any, t: Any) -> None:
    if t is None:
        return
    if not isinstance(t, _C.TensorBase):
        raise TypeError(f"{name}: {arg} must be a dtorch tensor or None, got {type(t).__name__}")
    if t.device_mesh != x.device_mesh:
        raise _C.PlacementError(f"{name}: {arg} is on {t.device_mesh!r}, x on {x.device_mesh!r}")
    if not all(p.is_replicate() for p in t.placements):
        raise _C.PlacementError(f"{name}: {arg} must be Replicate on every mesh dim, it is {list(t.placements)}")


def _run(name: str, fn: Callable, compiled: bool, args: List[Any], out_shape: Tuple[int, ...],
         out_dtype: torch.dtype, x: Any) -> Any:
    out_meta = torch.empty(out_shape, dtype=out_dtype, device="meta")
    return _apply(name, _kernel(fn, compiled), list(x.placements), None, x.device_mesh, False, out_meta,
                  tuple(args), {}, {})


# ---- the ops

def apply_rotary_emb(x: Any, cos: Any, sin: Any, interleaved: bool = True, *, execute_config: Any = None) -> Any:
    """Rotary position embedding of ``x`` (a query or a key, ``[..., S, D]``, e.g. ``[B, H, S, D]``)
    with ``cos``/``sin`` of shape ``[S, D]`` (or anything broadcasting against x):
    ``(x.float() * cos + rotate(x).float() * sin).to(x.dtype)``, where ``rotate`` turns each pair
    ``(a, b)`` into ``(-b, a)``: with ``interleaved=True`` the pairs are adjacent elements (Flux,
    diffusers' ``apply_rotary_emb(use_real_unbind_dim=-1)``), with ``interleaved=False`` the two
    halves of the last dim (Llama's ``q * cos + rotate_half(q) * sin``, SD3.5's). Apply it to q and
    to k. ``cos``/``sin`` follow x's shards (a sequence-sharded x takes sequence-sharded tables).
    """
    name = "compiled_op.apply_rotary_emb"
    _check_x(name, x)
    _check_follow(name, "cos", x, cos)
    _check_follow(name, "sin", x, sin)
    if x.shape[-1] % 2:
        raise RuntimeError(f"{name}: x's last dim ({x.shape[-1]}) must be even")
    fn = _rotary_interleaved if interleaved else _rotary_halves
    return _run(name, fn, _use_compile(execute_config), [x, cos, sin], tuple(x.shape), x.dtype, x)


def silu_linear_chunk(x: Any, weight: Any, bias: Any = None, *, execute_config: Any = None) -> Any:
    """A SwiGLU gate: ``a, b = F.linear(x, weight, bias).chunk(2, -1); F.silu(a) * b`` (``weight``
    ``[2H, in]``, result ``[..., H]``). ``weight`` and ``bias`` Replicate."""
    name = "compiled_op.silu_linear_chunk"
    _check_x(name, x)
    if not isinstance(weight, _C.TensorBase):
        raise TypeError(f"{name}: weight must be a dtorch tensor, got {type(weight).__name__}")
    _check_replicate(name, "weight", x, weight)
    _check_replicate(name, "bias", x, bias)
    if weight.dim() != 2 or weight.shape[1] != x.shape[-1] or weight.shape[0] % 2:
        raise RuntimeError(f"{name}: weight must be [2H, {x.shape[-1]}], got {list(weight.shape)}")
    if bias is not None and list(bias.shape) != [weight.shape[0]]:
        raise RuntimeError(f"{name}: bias must be [{weight.shape[0]}], got {list(bias.shape)}")
    args = [x, weight] + ([bias] if bias is not None else [])
    return _run(name, _silu_linear_chunk, _use_compile(execute_config), args,
                tuple(x.shape[:-1]) + (weight.shape[0] // 2,), x.dtype, x)


def layer_norm_mul_add(x: Any, scale: Any, shift: Any, weight: Any = None, bias: Any = None, eps: float = 1e-6, *,
                       execute_config: Any = None) -> Any:
    """adaLN modulation (SD3's AdaLayerNormZero, Flux's): ``F.layer_norm(x, (D,), weight, bias, eps) *
    (1 + scale) + shift``, over x's last dim D; ``scale``/``shift`` broadcast against x (e.g.
    ``[B, 1, D]``) and follow its shards; ``weight``/``bias`` (``[D]``, None: no affine) Replicate."""
    name = "compiled_op.layer_norm_mul_add"
    _check_x(name, x)
    _check_follow(name, "scale", x, scale)
    _check_follow(name, "shift", x, shift)
    _check_replicate(name, "weight", x, weight)
    _check_replicate(name, "bias", x, bias)
    eps = float(eps)
    fn = _layer_norm_mul_add_eps(eps, weight is not None, bias is not None)
    args = [x, scale, shift] + [t for t in (weight, bias) if t is not None]
    return _run(name, fn, _use_compile(execute_config), args, tuple(x.shape), x.dtype, x)


_lnma_fns: Dict[Tuple, Callable] = {}


def _layer_norm_mul_add_eps(eps: float, has_weight: bool, has_bias: bool) -> Callable:
    """_layer_norm_mul_add with eps and the affine's presence fixed (one function object per choice,
    so the compiled cache keys on them through the name)."""
    key = (eps, has_weight, has_bias)
    fn = _lnma_fns.get(key)
    if fn is None:
        def fn(x, scale, shift, *affine):
            w = affine[0] if has_weight else None
            b = affine[-1] if has_bias else None
            return _layer_norm_mul_add(x, scale, shift, w, b, eps)

        fn.__name__ = fn.__qualname__ = f"_layer_norm_mul_add[eps={eps!r},w={has_weight},b={has_bias}]"
        _lnma_fns[key] = fn
    return fn
