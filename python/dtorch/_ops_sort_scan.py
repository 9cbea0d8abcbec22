"""Sorting, scans and data-dependent shapes mirroring torch: ``sort argsort topk cumsum nonzero``.

Each is a module function (``dtorch.sort(x, dim=1)``) and a Tensor method (``x.sort(dim=1)``)
with torch's arguments. ``sort`` and ``topk`` return ``torch.return_types.sort`` /
``torch.return_types.topk`` pairs ``(values, indices)``.

>>> x = dtorch.rand((4, 6), device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> v, i = x.sort(dim=1)              # rows are sharded, each device sorts its rows: Shard(0)
>>> c = x.cumsum(dim=0)               # sharded scan dim: gathered, scanned, sliced back: Shard(0)
>>> v, i = dtorch.topk(x, 2, dim=0)   # sharded topk dim: gathered by the op: Replicate
>>> idx = (x > 0.5).nonzero()         # synchronises: the shape depends on the values

Placements per mesh dim: shards of the other dims stay; a shard of the sorted dim is gathered
by the op (sort/argsort/topk give Replicate there, cumsum keeps the shard); Partial is rejected
by sort/argsort/topk and kept by cumsum (it is linear). ``nonzero`` reads the value and returns
Replicate indices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from . import _C
from ._factories import zeros

if TYPE_CHECKING:  # the class is built from the method table (_methods.py), after this module
    from ._tensor import Tensor

__all__ = ["sort", "argsort", "topk", "cumsum", "nonzero"]


def sort(input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """Sorted values and their int64 indices along ``dim``, as ``torch.sort``.

    Equal values keep their order with ``stable=True``; otherwise their order is torch's (the
    same ATen call on the same data).
    """
    values, indices = _C._sort(input, dim, descending, stable, True)
    return torch.return_types.sort((values, indices))


def argsort(input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
    """The int64 indices that sort ``input`` along ``dim``: ``sort(...).indices``."""
    return _C._sort(input, dim, descending, stable, False)


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """The ``k`` largest (smallest with ``largest=False``) values along ``dim`` and their indices."""
    values, indices = _C._topk(input, k, dim, largest, sorted)
    return torch.return_types.topk((values, indices))


def cumsum(input: Tensor, dim: int, *, dtype: Optional[torch.dtype] = None) -> Tensor:
    """Cumulative sum along ``dim``; bool and integers accumulate in int64 unless ``dtype`` says."""
    return _C._cumsum(input, dim, dtype)


def nonzero(input: Tensor, *, as_tuple: bool = False):
    """The int64 ``[n, ndim]`` indices of the nonzero elements, in row-major order.

    Synchronises (the number of rows depends on the values) and returns Replicate indices on
    ``input``'s mesh. ``as_tuple=True`` gives one 1-D index tensor per dim, as torch.
    """
    idx = _C._nonzero(input)
    if not as_tuple:
        return idx
    if input.dim() == 0:
        # torch treats a 0-d input as 1-D here: one index tensor of zeros.
        return (zeros(idx.shape[0], dtype=torch.int64, device_mesh=idx.device_mesh, graph=idx.graph),)
    return tuple(idx[:, d] for d in range(input.dim()))

