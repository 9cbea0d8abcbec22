"""The nn family: torch.nn.functional's operators on distributed tensors (``dtorch.nn.functional``,
which re-exports them with ``linear``) and torch's top-level forms of them (``dtorch.relu``,
``dtorch.softmax``, ``dtorch.batch_norm`` ..., and ``Tensor.softmax``/``log_softmax``), over the
private positional ``_C._nn_*`` functions (``python/_C/ops_nn.c``).

The family lives here, beside the other ``_ops_<family>.py`` modules, rather than in
``dtorch/nn/``: the Tensor class takes its ``softmax`` method from this module when it is built,
and importing anything under ``dtorch.nn`` first imports ``dtorch.nn``'s layers, which subclass
that class.

What each function computes and which placements it takes is ``dtorch.nn.functional``'s module
docstring and ``docs/operators.md``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from typing import List, Optional, Sequence, Tuple, Union

import torch

from . import _C, _ops_views

# torch.nn.functional's names (dtorch.nn.functional adds linear, the linear algebra family's); torch's
# top-level forms are in TORCH_FORMS, at the end.
__all__ = [
    "relu", "gelu", "silu", "leaky_relu", "elu", "sigmoid", "tanh",
    "softmax", "log_softmax",
    "layer_norm", "rms_norm", "group_norm", "batch_norm",
    "embedding", "conv2d", "interpolate", "pad", "dropout", "pixel_shuffle",
    "scaled_dot_product_attention",
]

_Tensor = _C.TensorBase

# torch's mode names for the codes of dt_interp_mode and dt_pad_mode (the values come from _C).
_INTERP_MODES = {"nearest": _C.INTERP_NEAREST, "nearest-exact": _C.INTERP_NEAREST_EXACT, "linear": _C.INTERP_LINEAR,
                 "bilinear": _C.INTERP_BILINEAR, "bicubic": _C.INTERP_BICUBIC, "trilinear": _C.INTERP_TRILINEAR}
_PAD_MODES = {"constant": _C.PAD_CONSTANT, "reflect": _C.PAD_REFLECT, "replicate": _C.PAD_REPLICATE,
              "circular": _C.PAD_CIRCULAR}


def _inplace(input, result, inplace: bool):
    """torch's ``inplace=True`` returns ``input`` holding the result: dtorch values are immutable, so
    ``input`` is rebound to the new value (every reference to that Python tensor sees it)."""
    return _C._rebind(input, result) if inplace else result


def _pair(v, name: str) -> Tuple[int, int]:
    if isinstance(v, bool):
        raise TypeError(f"conv2d(): argument '{name}' must be an int or a tuple of two ints, not bool")
    if isinstance(v, numbers.Integral):
        return (int(v), int(v))
    v = tuple(v)
    if len(v) == 1:
        return (int(v[0]), int(v[0]))
    if len(v) != 2:
        raise RuntimeError(f"conv2d(): expected {name} to be a single integer value or a list of 2 values, "
                           f"but got {len(v)} values")
    return (int(v[0]), int(v[1]))


# ---------------------------------------------------------------- activations


def relu(input, inplace: bool = False):
    """``max(input, 0)``; keeps every Shard, rejects Partial.

    >>> F.relu(dtorch.tensor([-1.0, 2.0]))   # tensor([0., 2.])
    """
    return _inplace(input, _C._nn_activation(input, _C.ACTIVATION_RELU, 0.0), inplace)


def gelu(input, approximate: str = "none"):
    """Gaussian error linear unit; ``approximate="tanh"`` for the tanh form.

    >>> F.gelu(x, approximate="tanh")
    """
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    kind = _C.ACTIVATION_GELU if approximate == "none" else _C.ACTIVATION_GELU_TANH
    return _C._nn_activation(input, kind, 0.0)


def silu(input, inplace: bool = False):
    """``input * sigmoid(input)``.

    >>> F.silu(x)
    """
    return _inplace(input, _C._nn_activation(input, _C.ACTIVATION_SILU, 0.0), inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """``max(input, 0) + negative_slope * min(input, 0)``.

    >>> F.leaky_relu(x, 0.2)
    """
    return _inplace(input, _C._nn_activation(input, _C.ACTIVATION_LEAKY_RELU, negative_slope), inplace)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """Exponential linear unit.

    >>> F.elu(x, alpha=0.5)
    """
    return _inplace(input, _C._nn_activation(input, _C.ACTIVATION_ELU, alpha), inplace)


def sigmoid(input):
    """Logistic sigmoid; integer inputs give the default float dtype, as in torch.

    >>> F.sigmoid(x)
    """
    return _C._nn_activation(input, _C.ACTIVATION_SIGMOID, 0.0)


def tanh(input):
    """Hyperbolic tangent; integer inputs give the default float dtype, as in torch.

    >>> F.tanh(x)
    """
    return _C._nn_activation(input, _C.ACTIVATION_TANH, 0.0)


# ---------------------------------------------------------------- softmax


def _softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=stacklevel,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim: Optional[int] = None, _stacklevel: int = 3, dtype: Optional[torch.dtype] = None):
    """Softmax over ``dim``; the softmax dim must not be sharded (other shards pass through).

    >>> F.softmax(x, dim=-1, dtype=torch.float64)
    """
    if not isinstance(input, _Tensor):
        raise TypeError(f"softmax(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    return _C._nn_softmax(input, dim, False, dtype)


def log_softmax(input, dim: Optional[int] = None, _stacklevel: int = 3, dtype: Optional[torch.dtype] = None):
    """Log of softmax over ``dim`` (computed as one ATen op, as torch does).

    >>> F.log_softmax(x, dim=1)
    """
    if not isinstance(input, _Tensor):
        raise TypeError(f"log_softmax(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    return _C._nn_softmax(input, dim, True, dtype)


# ---------------------------------------------------------------- normalisation


def _shape_arg(normalized_shape) -> List[int]:
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        return [int(normalized_shape)]
    return [int(s) for s in normalized_shape]


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Layer normalisation over the trailing ``normalized_shape`` dims (which must not be sharded).

    >>> F.layer_norm(x, (8,), w, b)
    """
    return _C._nn_layer_norm(input, _shape_arg(normalized_shape), weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps: Optional[float] = None):
    """``input * rsqrt(mean(input**2, normalized dims) + eps) * weight``, as torch 2.x computes it.

    ``eps=None`` is the epsilon of the computation dtype (float32 for half and bfloat16 inputs).

    >>> F.rms_norm(x, (8,), w, eps=1e-6)
    """
    return _C._nn_rms_norm(input, _shape_arg(normalized_shape), weight, eps)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Group normalisation of ``input`` [N, C, *]; only the batch dim may be sharded.

    >>> F.group_norm(x, 2, w, b)
    """
    return _C._nn_group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Batch normalisation with the running statistics (inference); any dim may be sharded.

    >>> F.batch_norm(x, mean, var, w, b)
    """
    if training:
        raise NotImplementedError("batch_norm(training=True) is not supported: dtorch is inference-only here; "
                                  "pass training=False to use the running statistics")
    return _C._nn_batch_norm(input, running_mean, running_var, weight, bias, momentum, eps)


# ---------------------------------------------------------------- lookups and convolutions


def embedding(input, weight, padding_idx: Optional[int] = None, max_norm: Optional[float] = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False):
    """Rows of ``weight`` [V, D] at ``input``; a vocab-sharded weight (``Shard(0)``) gives ``Partial()``.

    ``padding_idx`` only matters for gradients (there are none here) and is validated like torch.

    >>> F.embedding(ids, w)
    """
    if isinstance(weight, _Tensor) and weight.ndim == 2 and padding_idx is not None:
        if padding_idx > 0 and padding_idx >= weight.shape[0]:
            raise AssertionError("Padding_idx must be within num_embeddings")
        if padding_idx < 0 and padding_idx < -weight.shape[0]:
            raise AssertionError("Padding_idx must be within num_embeddings")
    if max_norm is not None:
        raise NotImplementedError("embedding(max_norm=...) renormalises the weight in place; not supported")
    return _C._nn_embedding(input, weight)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """2-D convolution; batch shards of ``input`` and output-channel shards of ``weight`` (``Shard(0)``).

    >>> F.conv2d(x, w, b, stride=2, padding=1)
    """
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise RuntimeError(f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}")
        mode = _C.CONV_PAD_VALID if padding == "valid" else _C.CONV_PAD_SAME
        pad = (0, 0)
    else:
        mode, pad = _C.CONV_PAD_EXPLICIT, _pair(padding, "padding")
    return _C._nn_conv2d(input, weight, bias, _pair(stride, "stride"), pad, _pair(dilation, "dilation"), groups, mode)


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners: Optional[bool] = None,
                recompute_scale_factor: Optional[bool] = None, antialias: bool = False):
    """Resize the spatial dims of ``input`` [N, C, *]; batch and channel shards pass through.

    Modes: nearest, nearest-exact, linear (3-D), bilinear, bicubic (4-D), trilinear (5-D).

    >>> F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    """
    if not isinstance(input, _Tensor):
        raise TypeError(f"interpolate(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | "
                "trilinear"
            )
    elif align_corners is None:
        align_corners = False
    if mode == "area":
        raise NotImplementedError("interpolate(mode='area') is not supported yet")
    if mode not in _INTERP_MODES:
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for the modes: nearest | "
            f"linear | bilinear | bicubic | trilinear | area | nearest-exact (got {mode})"
        )
    if antialias:
        raise NotImplementedError("interpolate(antialias=True) is not supported yet")
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scale_factors = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but got input with spatial "
                    f"dimensions of {list(input.shape[2:])} and output size of {size}. Please provide input tensor "
                    "in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format."
                )
            output_size = [int(s) for s in size]
        else:
            output_size = [int(size)] * dim
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, but got input with "
                    f"spatial dimensions of {list(input.shape[2:])} and scale_factor of shape {scale_factor}. "
                    "Please provide input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, "
                    "...,sK) format."
                )
            scale_factors = [float(s) for s in scale_factor]
        else:
            scale_factors = [float(scale_factor)] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if recompute_scale_factor:
        # As torch: the output size from the scales, then the scales are dropped.
        output_size = [int(math.floor(float(input.shape[i + 2]) * scale_factors[i])) for i in range(dim)]
        scale_factors = None
    align = -1 if align_corners is None else int(bool(align_corners))
    return _C._nn_interpolate(input, _INTERP_MODES[mode], output_size, scale_factors, align)


def pad(input, pad: Sequence[int], mode: str = "constant", value: Optional[float] = None):
    """Pad the last ``len(pad) // 2`` dims (last dim first); padded dims must not be sharded.

    >>> F.pad(x, (1, 1, 2, 0), value=0.5)
    """
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    return _C._nn_pad(input, [int(p) for p in pad], _PAD_MODES[mode], value)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)`` (identity unless training).

    The mask comes from dtorch's random stream (``dtorch.manual_seed``) for the global shape, so the
    values are the same on any mesh and placements; ``Partial()`` inputs keep ``Partial()``.

    >>> F.dropout(x, 0.1, training=True)
    """
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not isinstance(input, _Tensor):
        raise TypeError(f"dropout(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")
    if not training or p == 0.0 or input.numel() == 0:
        return input
    return _inplace(input, _C._nn_dropout(input, p, True), inplace)


def pixel_shuffle(input, upscale_factor: int):
    """Rearrange ``(*, C * r * r, H, W)`` into ``(*, C, H * r, W * r)`` with ``r = upscale_factor``.

    It only moves elements, so results are exact; batch dims (before the last three) may be
    ``Shard``, the last three may not, and ``Partial()`` inputs keep ``Partial()``.

    >>> F.pixel_shuffle(x, 2)
    """
    return _C._nn_pixel_shuffle(input, upscale_factor)


# ---------------------------------------------------------------- attention


@dataclasses.dataclass
class SdpaOption:
    """Which mesh dims ``scaled_dot_product_attention`` treats as context-parallel, by name.

    ``ulysess_cp_dim`` names the dim of Ulysses attention (all-to-all between heads and sequence),
    ``ring_cp_dim`` the dim of ring attention (sequence blocks with online-softmax merging); None,
    or a name the mesh lacks, turns that algorithm off. Also exported as ``dtorch.SdpaOption``.

    >>> opt = dtorch.SdpaOption(ulysess_cp_dim="cp", ring_cp_dim=None)
    >>> y = F.scaled_dot_product_attention(q, k, v, is_causal=True, sdpa_option=opt)
    """

    ulysess_cp_dim: Optional[str] = "ulysess_cp"
    ring_cp_dim: Optional[str] = "ring_cp"


def _gqa_repeat(query, key, value):
    """``key`` and ``value`` with their heads (dim -3) repeated to the query's, as torch's
    ``enable_gqa=True`` does (``repeat_interleave``: query head h reads kv head h // (Hq // Hkv))."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, _Tensor):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be a dtorch.Tensor, not "
                            f"{type(t).__name__}")
        if t.ndim < 3:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-t.ndim}, {t.ndim - 1}], but "
                             "got -3)")
    hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if hk == 0 or hv == 0 or hq % hk != 0 or hq % hv != 0:
        raise RuntimeError("Number of heads in key and value must divide the number of heads in query")
    if hk != hq:
        key = key.repeat_interleave(hq // hk, -3)
    if hv != hq:
        value = value.repeat_interleave(hq // hv, -3)
    return key, value


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False,
                                 sdpa_option: Optional[SdpaOption] = None):
    """``softmax(query @ key.transpose(-2, -1) * scale + mask) @ value``.

    ``enable_gqa=True`` (grouped-query attention, torch 2.5+) repeats the key and value heads to the
    query's (``repeat_interleave`` on dim -3, as torch). Shards of the batch and head dims pass
    through. ``sdpa_option`` (``SdpaOption``; default: the mesh dims named ``"ulysess_cp"`` and
    ``"ring_cp"``) names the context-parallel mesh dims. Inputs sharded on the sequence dim (-2)
    along the Ulysses dim run Ulysses attention (all-to-all to heads, local attention, all-to-all
    back; the heads must divide by the dim's size); along the ring dim they run ring attention
    (key/value blocks passed around the ring and merged by log-sum-exp, never gathered; causal
    blocks in a device's future skipped; no mask or dropout); along both, Ulysses outside and the
    ring inside. The output keeps the query's sequence shards. The embedding dim must not be sharded.

    >>> F.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> F.scaled_dot_product_attention(q, k_grouped, v_grouped, enable_gqa=True)
    """
    if sdpa_option is not None and not isinstance(sdpa_option, SdpaOption):
        raise TypeError(f"scaled_dot_product_attention(): sdpa_option must be a dtorch.SdpaOption, not "
                        f"{type(sdpa_option).__name__}")
    if enable_gqa:
        key, value = _gqa_repeat(query, key, value)
    if isinstance(query, _Tensor) and isinstance(key, _Tensor) and isinstance(value, _Tensor) and query.ndim >= 2:
        # Late: importing dtorch.nn imports its layers, which need the Tensor class that is built from
        # this module (see the module's docstring).
        from .nn import _context_parallel as cp

        option = sdpa_option if sdpa_option is not None else SdpaOption()
        ulysses_dim, ring_dim = cp.cp_dims(query, key, value, option)
        if ulysses_dim >= 0 or ring_dim >= 0:
            return cp.attention(query, key, value, attn_mask, dropout_p, is_causal, scale, ulysses_dim, ring_dim,
                                option)
    return _C._nn_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)


# ---------------------------------------------------------------- fused helpers (dtorch's own, private)


def _rotate_half(x):
    """``cat(-x2, x1)`` on the last dim, where ``x1, x2`` are its first and second halves."""
    half = x.shape[-1] // 2
    return _ops_views.cat([-x[..., half:], x[..., :half]], dim=-1)


def _apply_rotary_emb(x, cos, sin):
    """Rotary position embedding: ``x * cos + rotate_half(x) * sin``, where ``rotate_half(x)`` is
    ``cat(-x[..., d//2:], x[..., :d//2], dim=-1)`` (the halves layout of GPT-NeoX / Hugging Face
    Llama, not interleaved pairs). ``cos`` and ``sin`` broadcast against ``x`` (e.g. [S, D] against
    [B, H, S, D]). Equal (``torch.equal``) to that composition in torch; the last dim of ``x`` must
    not be sharded.

    >>> q = F._apply_rotary_emb(q, cos, sin)
    """
    return x * cos + _rotate_half(x) * sin


def _layer_norm_mul_add(x, normalized_shape, weight, bias, eps, scale, shift):
    """Adaptive layer norm (DiT / SD3 modulation): ``layer_norm(x, normalized_shape, weight, bias, eps)
    * (1 + scale) + shift``, evaluated in that order; equal to that composition in torch.

    >>> h = F._layer_norm_mul_add(x, (1536,), None, None, 1e-6, scale_msa, shift_msa)
    """
    return layer_norm(x, normalized_shape, weight, bias, eps) * (1 + scale) + shift


# (x.softmax and x.log_softmax are TORCH_FORMS' softmax/log_softmax: python/dtorch/_methods.py.)


# ---------------------------------------------------------------- pooling (2-D)
#
# max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d (and the *_with_indices forms) over
# the last two dims of [N, C, H, W] or [C, H, W]. Shards of the dims before H and W pass through (each
# device pools its own planes); H and W must be whole (a PlacementError names the redistribute()).
# Average pooling is linear: a Partial() input of a floating dtype gives a Partial() output. Each op
# is the ATen call torch.nn.functional makes, so one device gives torch's values bit for bit. The
# layers are in dtorch.nn.modules.pooling.

__all__ += [
    "max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
    "adaptive_max_pool2d_with_indices",
]


def _pool_input(op: str, input) -> None:
    if not isinstance(input, _Tensor):
        raise TypeError(f"{op}(): argument 'input' (position 1) must be a dtorch.Tensor, not {type(input).__name__}")


def _pool_ints(v, op: str, what: str, pos: int) -> List[int]:
    """An int or a sequence of ints, as torch's argument parser takes an ``int[2]`` (TypeError otherwise)."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return [int(v)]
    if isinstance(v, (list, tuple, torch.Size)):
        out = []
        for i, e in enumerate(v):
            if isinstance(e, bool) or not isinstance(e, numbers.Integral):
                raise TypeError(f"{op}(): argument '{what}' (position {pos}) must be tuple of ints, but found element "
                                f"of type {type(e).__name__} at pos {i}")
            out.append(int(e))
        return out
    raise TypeError(f"{op}(): argument '{what}' (position {pos}) must be tuple of ints, not {type(v).__name__}")


def _pool_pair(v: List[int], op: str, message: str) -> List[int]:
    """ATen's rule: one entry stands for both spatial dims, two are (H, W); else RuntimeError."""
    if len(v) == 1:
        return v * 2
    if len(v) == 2:
        return v
    raise RuntimeError(f"{op}: {message}")


def _window_args(op: str, kernel_size, stride, padding, dilation=None):
    """kernel_size, stride (None when omitted), padding, dilation as pairs, checked in ATen's order."""
    k = _pool_ints(kernel_size, op, "kernel_size", 2)
    s = [] if stride is None else _pool_ints(stride, op, "stride", 3)
    p = _pool_ints(padding, op, "padding", 4)
    d = None if dilation is None else _pool_ints(dilation, op, "dilation", 5)
    k = _pool_pair(k, op, "kernel_size must either be a single int, or a tuple of two ints")
    s = None if not s else _pool_pair(s, op, "stride must either be omitted, a single int, or a tuple of two ints")
    p = _pool_pair(p, op, "padding must either be a single int, or a tuple of two ints")
    if d is not None:
        d = _pool_pair(d, op, "dilation must be either a single int, or a tuple of two ints")
    return k, s, p, d


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """2-D max pooling of ``input`` [N, C, H, W] or [C, H, W]; ``return_indices=True`` also returns the int64
    index of each maximum in its H*W plane, as torch does.

    Batch and channel shards pass through; ``Partial()`` is rejected (the max of a sum is not the sum of maxima).

    >>> F.max_pool2d(x, 3, stride=2, padding=1)
    >>> y, idx = F.max_pool2d(x, 2, return_indices=True)
    """
    _pool_input("max_pool2d", input)
    k, s, p, d = _window_args("max_pool2d", kernel_size, stride, padding, dilation)
    return _C._nn_max_pool2d(input, k, s, p, d, bool(ceil_mode), bool(return_indices))


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
                            return_indices: bool = False):
    """``max_pool2d(..., return_indices=True)``: (values, indices).

    >>> y, idx = F.max_pool2d_with_indices(x, 2)
    """
    _pool_input("max_pool2d_with_indices", input)
    k, s, p, d = _window_args("max_pool2d_with_indices", kernel_size, stride, padding, dilation)
    return _C._nn_max_pool2d(input, k, s, p, d, bool(ceil_mode), True)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None):
    """2-D average pooling of ``input`` [N, C, H, W] or [C, H, W] (floating dtypes and int64, as torch).

    Batch and channel shards pass through; pooling is linear, so a ``Partial()`` input of a floating dtype gives
    a ``Partial()`` output (each part pooled; the parts add up to the pooled sum up to rounding).

    >>> F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
    """
    _pool_input("avg_pool2d", input)
    k, s, p, _ = _window_args("avg_pool2d", kernel_size, stride, padding)
    if divisor_override is not None and (isinstance(divisor_override, bool) or
                                         not isinstance(divisor_override, numbers.Integral)):
        raise TypeError(f"avg_pool2d(): argument 'divisor_override' (position 7) must be int, not "
                        f"{type(divisor_override).__name__}")
    div = None if divisor_override is None else int(divisor_override)
    return _C._nn_avg_pool2d(input, k, s, p, bool(ceil_mode), bool(count_include_pad), div)


def _adaptive_size(op: str, input, output_size) -> List[int]:
    """torch's ``_list_with_default``: None entries take the input's size; then an ``int[2]``."""
    if isinstance(output_size, numbers.Integral) and not isinstance(output_size, bool):
        return [int(output_size)] * 2
    if isinstance(output_size, bool):
        raise TypeError(f"{op}(): argument 'output_size' (position 2) must be tuple of ints, not bool")
    defaults = list(input.shape)
    if len(defaults) <= len(output_size):
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
    size = [v if v is not None else d for v, d in zip(output_size, defaults[-len(output_size):])]
    return _pool_ints(size, op, "output_size", 2)


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to ``output_size`` (an int or (H, W); None keeps the input's size) over the last two dims.

    An output of 1x1 is the mean over H and W (``GlobalAvgPool2d``). Batch and channel shards pass through;
    ``Partial()`` stays ``Partial()`` (pooling is linear).

    >>> F.adaptive_avg_pool2d(x, (1, 1))
    """
    _pool_input("adaptive_avg_pool2d", input)
    size = _adaptive_size("adaptive_avg_pool2d", input, output_size)
    if len(size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    return _C._nn_adaptive_pool2d(input, size, 0)


def _adaptive_max(op: str, input, output_size, return_indices: bool):
    _pool_input(op, input)
    size = _adaptive_size(op, input, output_size)
    if len(size) != 2:
        if input.ndim not in (3, 4):
            raise RuntimeError(f"adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: {list(input.shape)}")
        raise RuntimeError("adaptive_max_pool2d(): internal error: output_size.size() must be 2")
    return _C._nn_adaptive_pool2d(input, size, 2 if return_indices else 1)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Max pooling to ``output_size`` over the last two dims; ``return_indices=True`` also returns the int64
    indices. Batch and channel shards pass through; ``Partial()`` is rejected.

    >>> F.adaptive_max_pool2d(x, 1)
    """
    return _adaptive_max("adaptive_max_pool2d", input, output_size, return_indices)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices: bool = False):
    """``adaptive_max_pool2d(..., return_indices=True)``: (values, indices).

    >>> y, idx = F.adaptive_max_pool2d_with_indices(x, (2, 2))
    """
    return _adaptive_max("adaptive_max_pool2d_with_indices", input, output_size, True)


# ---------------------------------------------------------------- torch's top-level forms
#
# torch.relu, torch.softmax, torch.batch_norm ... with torch's top-level signatures (note the
# argument orders torch itself uses there: batch_norm(input, weight, bias, running_mean, running_var,
# training, momentum, eps, cudnn_enabled) and embedding(weight, indices)), computed by the functions
# above. They share names with torch.nn.functional's, so they are kept in TORCH_FORMS,
# {name: function}, which dtorch's namespace takes: dtorch.softmax is TORCH_FORMS["softmax"], and so
# is Tensor.softmax.
#
# >>> y = dtorch.softmax(dtorch.relu(x), dim=-1)
# >>> h = dtorch.layer_norm(x, (x.shape[-1],))

TORCH_FORMS = {}


def _torch_form(fn):
    """Registers ``_torch_<name>`` as torch's top-level form ``<name>`` in TORCH_FORMS."""
    name = fn.__name__[len("_torch_"):]
    fn.__name__ = fn.__qualname__ = name
    TORCH_FORMS[name] = fn
    return fn


def _check_input(name: str, input) -> None:
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be a dtorch.Tensor, not {type(input).__name__}")


@_torch_form
def _torch_relu(input):
    """``max(input, 0)`` (``torch.relu``)."""
    _check_input("relu", input)
    return relu(input)


@_torch_form
def _torch_relu_(input):
    """In place: ``input`` rebinds to ``relu(input)`` and is returned."""
    _check_input("relu_", input)
    return relu(input, inplace=True)


@_torch_form
def _torch_softmax(input, dim: int, dtype: Optional[torch.dtype] = None):
    """``torch.softmax(input, dim, dtype=None)`` (and ``Tensor.softmax``)."""
    if dim is not None and isinstance(input, _C.TensorBase):
        return _C._nn_softmax(input, dim, False, dtype)  # F.softmax with an explicit dim, one frame less
    _check_input("softmax", input)
    return softmax(input, dim=dim, dtype=dtype)


@_torch_form
def _torch_log_softmax(input, dim: int, dtype: Optional[torch.dtype] = None):
    """``torch.log_softmax(input, dim, dtype=None)`` (and ``Tensor.log_softmax``)."""
    if dim is not None and isinstance(input, _C.TensorBase):
        return _C._nn_softmax(input, dim, True, dtype)  # F.log_softmax with an explicit dim
    _check_input("log_softmax", input)
    return log_softmax(input, dim=dim, dtype=dtype)


@_torch_form
def _torch_batch_norm(input, weight=None, bias=None, running_mean=None, running_var=None, training: bool = False,
                      momentum: float = 0.1, eps: float = 1e-5, cudnn_enabled: bool = True):
    """``torch.batch_norm`` (torch's top-level order: weight and bias before the running statistics).

    >>> y = dtorch.batch_norm(x, w, b, mean, var, False, 0.1, 1e-5, True)
    """
    _check_input("batch_norm", input)
    if running_mean is None or running_var is None:
        raise NotImplementedError("batch_norm without running_mean/running_var normalises with batch statistics "
                                  "(training); dtorch is inference-only here")
    return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


@_torch_form
def _torch_conv2d(input, weight, bias=None, stride=1, padding: Union[int, Sequence[int], str] = 0, dilation=1,
                  groups: int = 1):
    """``torch.conv2d`` (the same as ``torch.nn.functional.conv2d``)."""
    _check_input("conv2d", input)
    return conv2d(input, weight, bias, stride, padding, dilation, groups)


@_torch_form
def _torch_dropout(input, p: float = 0.5, train: bool = True):
    """``torch.dropout(input, p, train)``."""
    _check_input("dropout", input)
    return dropout(input, p, training=train)


@_torch_form
def _torch_embedding(weight, indices, padding_idx: int = -1, scale_grad_by_freq: bool = False,
                     sparse: bool = False):
    """``torch.embedding(weight, indices)``: the rows of ``weight`` at ``indices``.

    torch's top level takes the weight first; called the ``nn.functional`` way (integer
    indices first, floating weight second) it is read that way too.
    """
    if isinstance(weight, _C.TensorBase) and isinstance(indices, _C.TensorBase):
        if not weight.is_floating_point() and indices.is_floating_point():
            weight, indices = indices, weight
    _check_input("embedding", weight)
    return embedding(indices, weight)


@_torch_form
def _torch_group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5,
                      cudnn_enabled: bool = True):
    """``torch.group_norm``."""
    _check_input("group_norm", input)
    return group_norm(input, num_groups, weight, bias, eps)


@_torch_form
def _torch_layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5,
                      cudnn_enable: bool = True):
    """``torch.layer_norm``."""
    _check_input("layer_norm", input)
    return layer_norm(input, normalized_shape, weight, bias, eps)


@_torch_form
def _torch_rms_norm(input, normalized_shape, weight=None, eps: Optional[float] = None):
    """``torch.rms_norm``."""
    _check_input("rms_norm", input)
    return rms_norm(input, normalized_shape, weight, eps)
