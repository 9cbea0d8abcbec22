"""Reductions mirroring torch: ``sum mean prod amax amin max min argmax argmin any all``.

Each is a module function (``dtorch.mean(x, dim=1)``) and a Tensor method
(``x.mean(dim=1)``) with torch's arguments: ``dim`` (None, an int, or a tuple
where torch takes one), ``keepdim``, and ``dtype`` for sum/mean/prod.
``max(dim)``/``min(dim)`` return a ``(values, indices)`` named tuple like
``torch.return_types.max``.

>>> x = dtorch.rand((4, 6), device_mesh=mesh, placements=[dtorch.Shard(1)])
>>> s = x.sum(dim=1)                 # Partial: each device summed its columns
>>> v, i = x.max(dim=1)              # gathered by the op: Replicate
>>> dtorch.argmax(x)                 # flat index, ties give the first occurrence

A reduction over a sharded dim yields Partial for sum and mean; the others
reduce locally, all-gather the per-device results and reduce again (see
docs/operators.md).
"""

from __future__ import annotations

import sys
import types
from collections import namedtuple
from typing import TYPE_CHECKING, Optional, Sequence, Union

import torch

from . import _C

if TYPE_CHECKING:  # the class is built from the method table (_methods.py), after this module
    from ._tensor import Tensor

__all__ = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "any", "all", "return_types"]

_Dims = Union[None, int, Sequence[int]]

# torch.return_types.max / .min: named (values, indices) pairs.
return_types = types.SimpleNamespace(
    max=namedtuple("max", ["values", "indices"]),
    min=namedtuple("min", ["values", "indices"]),
)


def _int_dim(name: str, dim) -> None:
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool)):
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")


def sum(input: Tensor, dim: _Dims = None, keepdim: bool = False, *, dtype: Optional[torch.dtype] = None) -> Tensor:  # noqa: A001
    """Sum over ``dim`` (every dim when None). Bools and integers sum to int64 unless ``dtype`` is given."""
    return _C._reduce(input, _C.REDUCE_SUM, dim, keepdim, dtype)


def mean(input: Tensor, dim: _Dims = None, keepdim: bool = False, *, dtype: Optional[torch.dtype] = None) -> Tensor:
    """Mean over ``dim``; floating inputs only (or a floating ``dtype``), as in torch."""
    return _C._reduce(input, _C.REDUCE_MEAN, dim, keepdim, dtype)


def prod(input: Tensor, dim: Optional[int] = None, keepdim: bool = False, *,
         dtype: Optional[torch.dtype] = None) -> Tensor:
    """Product over one ``dim`` or of every element."""
    _int_dim("prod", dim)
    if dim is None and keepdim:
        raise TypeError("prod(): keepdim needs a dim (prod(input, dim, keepdim=False, *, dtype=None))")
    return _C._reduce(input, _C.REDUCE_PROD, dim, keepdim, dtype)


def amax(input: Tensor, dim: _Dims = (), keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (every dim when empty)."""
    return _C._reduce(input, _C.REDUCE_AMAX, dim, keepdim, None)


def amin(input: Tensor, dim: _Dims = (), keepdim: bool = False) -> Tensor:
    """Minimum over ``dim`` (every dim when empty)."""
    return _C._reduce(input, _C.REDUCE_AMIN, dim, keepdim, None)


def _max_min(name: str, op: int, pair, input, dim, keepdim):
    if dim is None:
        if keepdim:
            raise TypeError(f"{name}(): keepdim needs a dim ({name}(input, dim, keepdim=False))")
        return _C._reduce(input, op, None, False, None)
    if isinstance(dim, _C.TensorBase):
        # torch.max(input, other) is the elementwise maximum: the elementwise
        # family's op, looked up when called. It takes no keepdim (torch: TypeError).
        if keepdim is not False:
            raise TypeError(f"{name}() received an invalid combination of arguments: {name}(input, other) "
                            f"takes no keepdim, got {type(keepdim).__name__}")
        elementwise = "maximum" if name == "max" else "minimum"
        fn = getattr(sys.modules[__package__], elementwise, None)
        if fn is None:
            raise NotImplementedError(f"{name}(input, other) needs dtorch.{elementwise}, which this build lacks")
        return fn(input, dim)
    _int_dim(name, dim)
    values, indices = _C._reduce_with_indices(input, op, dim, keepdim)
    return pair(values, indices)


def max(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A001
    """``max(input)`` -> 0-d tensor; ``max(input, dim, keepdim=False)`` -> ``(values, indices)``."""
    return _max_min("max", _C.REDUCE_MAX, return_types.max, input, dim, keepdim)


def min(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A001
    """``min(input)`` -> 0-d tensor; ``min(input, dim, keepdim=False)`` -> ``(values, indices)``."""
    return _max_min("min", _C.REDUCE_MIN, return_types.min, input, dim, keepdim)


def argmax(input: Tensor, dim: Optional[int] = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum along ``dim`` (of the flattened tensor when None)."""
    _int_dim("argmax", dim)
    return _C._reduce(input, _C.REDUCE_ARGMAX, dim, keepdim, None)


def argmin(input: Tensor, dim: Optional[int] = None, keepdim: bool = False) -> Tensor:
    """Index of the first minimum along ``dim`` (of the flattened tensor when None)."""
    _int_dim("argmin", dim)
    return _C._reduce(input, _C.REDUCE_ARGMIN, dim, keepdim, None)


def any(input: Tensor, dim: _Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """Whether any element is nonzero, over ``dim`` (every dim when None)."""
    return _C._reduce(input, _C.REDUCE_ANY, dim, keepdim, None)


def all(input: Tensor, dim: _Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """Whether every element is nonzero, over ``dim`` (every dim when None)."""
    return _C._reduce(input, _C.REDUCE_ALL, dim, keepdim, None)

