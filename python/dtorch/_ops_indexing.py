"""Indexing of dtorch tensors: ``x[key]``, ``x[key] = value`` and ``iter(x)``.

torch's key conventions (ints, slices, ``None``, ``...``, bool masks, integer index tensors) are
parsed here; the placement rules and the work live in C (src/ops/index.c, views.c). Like every
dtorch write, ``x[key] = value`` computes the new value of ``x`` and rebinds ``x`` to it (see
``_ops_views``). The methods are listed in _methods.py.

>>> row = x[0]
>>> x[:, 0] = 0                           # rebinds x
"""

from __future__ import annotations

import math
import operator
from typing import List, Tuple

import torch

from . import _C
from ._ops_views import _Base, _as_value, _replicated_like, _unbind

def _is_tensor_index(k) -> bool:
    return isinstance(k, (_Base, torch.Tensor, list))


def _parse_key(x, key):
    """Splits a key into (spec per input dim, new-axes mask, tensor-index list).

    The tensor index list holds (position in the basic result, index object, dims it consumes).
    """
    if not isinstance(key, tuple):
        key = (key,)
    shape = list(x.shape)
    ndim = len(shape)
    items = []
    for k in key:
        if k is True:
            k = None
        elif k is False:
            raise NotImplementedError("indexing with False is not supported by dtorch")
        if isinstance(k, (list, tuple)):  # a sequence inside the key is an index tensor, as in torch
            k = torch.tensor(k) if k else torch.empty(0, dtype=torch.int64)
        if k is Ellipsis and any(i is Ellipsis for i in items):
            continue  # torch (2.13) lets the first ellipsis span the dims; a later one spans none
        items.append(k)
    consumed = 0
    n_ellipsis = 0
    for k in items:
        if k is Ellipsis:
            n_ellipsis += 1
        elif k is None:
            pass
        elif isinstance(k, (_Base, torch.Tensor)) and k.dtype in (torch.bool, torch.uint8):
            consumed += k.dim()
        else:
            consumed += 1
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    spec = []
    new_axes = 0
    tensors = []
    out = 0  # result dims so far
    d = 0    # input dims so far
    for k in items:
        if k is None:
            new_axes |= 1 << out
            out += 1
        elif k is Ellipsis:
            for _ in range(ndim - consumed):
                spec.append((0, 1, shape[d], False))
                d += 1
                out += 1
        elif isinstance(k, slice):
            size = shape[d]
            step = 1 if k.step is None else operator.index(k.step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, step = slice(k.start, k.stop, step).indices(size)
            n = len(range(start, stop, step))
            spec.append((start if n > 0 else min(start, size), step, n, False))
            d += 1
            out += 1
        elif isinstance(k, (_Base, torch.Tensor)):
            nd = k.dim() if k.dtype in (torch.bool, torch.uint8) else 1
            tensors.append((out, k, nd))
            for _ in range(nd):
                spec.append((0, 1, shape[d], False))
                d += 1
                out += 1
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                                 f"are valid indices (got {type(k).__name__})") from None
            size = shape[d]
            if i < -size or i >= size:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {size}")
            spec.append((i + size if i < 0 else i, 1, 1, True))
            d += 1
    while d < ndim:
        spec.append((0, 1, shape[d], False))
        d += 1
    return spec, new_axes, tensors


def _basic_shape(spec, new_axes: int) -> List[int]:
    """The shape of the basic part of a key's result."""
    kept = [n for (_, _, n, drop) in spec if not drop]
    out, it = [], iter(kept)
    for o in range(len(kept) + bin(new_axes).count("1")):
        out.append(1 if new_axes >> o & 1 else next(it))
    return out


def _read_mask(mask, shape: List[int], pos: int, nd: int) -> torch.Tensor:
    """Checks a boolean mask against the dims it indexes, reads it (a dtorch mask synchronises) and
    returns the flat positions of its True entries."""
    for j in range(nd):
        if mask.shape[j] != shape[pos + j]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not match the shape of the "
                             f"indexed tensor {shape} at index {pos + j}")
    m = mask.to_torch() if isinstance(mask, _Base) else mask
    return m.reshape(-1).nonzero().reshape(-1)


def _flatten_for_mask(y, pos: int, nd: int):
    """y with the nd masked dims at pos merged into one (a new size-1 dim for a 0-d mask)."""
    if nd == 0:
        return _C._v_unsqueeze(y, pos)
    if nd == 1:
        return y
    shape = list(y.shape)
    return _C._v_reshape(y, tuple(shape[:pos] + [math.prod(shape[pos:pos + nd])] + shape[pos + nd:]))


def _getitem(self, key):
    """``x[1:, None, ..., ::2]``, ``x[idx]`` (an int64 tensor along one dim), ``x[mask]`` (a bool
    mask: synchronises, its nonzero positions decide the result's shape). One tensor index per
    key. A Shard survives on dims taken whole; slicing or indexing a sharded dim is a
    PlacementError."""
    spec, new_axes, tensors = _parse_key(self, key)
    if not tensors:
        return _C._v_index(self, spec, new_axes)
    if len(tensors) > 1:
        return _getitem_many(self, spec, new_axes, tensors)
    pos, k, nd = tensors[0]
    mask = k.dtype in (torch.bool, torch.uint8)
    if not mask and k.dtype != torch.int64:
        raise IndexError("tensors used as indices must be long, byte or bool tensors")
    idx = _read_mask(k, _basic_shape(spec, new_axes), pos, nd) if mask else k
    # Only a key with a basic part records that part first.
    identity = new_axes == 0 and all(s == (0, 1, n, False) for s, n in zip(spec, self.shape))
    y = self if identity else _C._v_index(self, spec, new_axes)
    if mask:
        y = _flatten_for_mask(y, pos, nd)
    if isinstance(idx, torch.Tensor):
        _check_bounds(idx, y.shape[pos], pos)
        idx = _replicated_like(y, idx)
    return _C._v_index_tensor(y, pos, idx)


def _check_bounds(idx: torch.Tensor, size: int, dim: int) -> None:
    """torch's IndexError, at the call, for a torch index tensor with an entry out of range."""
    if idx.numel():
        lo, hi = int(idx.min()), int(idx.max())
        bad = lo if lo < -size else hi if hi >= size else None
        if bad is not None:
            raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")


def _long_indices(y, spec, new_axes, tensors) -> List[Tuple[int, object]]:
    """(dim of y, int64 index) per indexed dim: a bool mask over nd dims becomes nd indices (its
    nonzero coordinates; a dtorch mask synchronises)."""
    basic = _basic_shape(spec, new_axes)
    out = []
    for pos, k, nd in tensors:
        if k.dtype in (torch.bool, torch.uint8):
            if nd == 0:
                raise NotImplementedError("dtorch indexing takes a 0-d mask only as the key's one tensor index")
            flat = _read_mask(k, basic, pos, nd)
            for j, coord in enumerate(torch.unravel_index(flat, tuple(basic[pos:pos + nd]))):
                out.append((pos + j, coord))
        elif k.dtype != torch.int64:
            raise IndexError("tensors used as indices must be long, byte or bool tensors")
        else:
            out.append((pos, k))
    return out


def _merge_indexed(y, idxs):
    """Brings the indexed dims of y together (in place when adjacent, else in front), merges them
    into one and builds the linear index ``sum(idx_j * stride_j)`` broadcast over the indices.

    Returns (merged y, its indexed dim q, linear index, the permutation applied or None, the
    shape before the merge)."""
    try:
        torch.broadcast_shapes(*(tuple(i.shape) for _, i in idxs))
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + " ".join(str(list(i.shape)) for _, i in idxs)) from None
    dims = [d for d, _ in idxs]
    sizes = [y.shape[d] for d in dims]
    perm = None
    if dims == list(range(dims[0], dims[0] + len(dims))):
        q = dims[0]
    else:
        q = 0
        perm = tuple(dims + [d for d in range(y.ndim) if d not in dims])
        y = _C._v_permute(y, perm)
    shape = list(y.shape)
    total = math.prod(sizes)
    y = _C._v_reshape(y, tuple(shape[:q] + [total] + shape[q + len(dims):]))
    strides = [math.prod(sizes[j + 1:]) for j in range(len(sizes))]
    if all(isinstance(i, torch.Tensor) for _, i in idxs):
        linear = None
        for (d, i), n, st in zip(idxs, sizes, strides):
            _check_bounds(i, n, d)
            term = torch.where(i < 0, i + n, i) * st
            linear = term if linear is None else linear + term
        return y, q, _replicated_like(y, linear), perm, shape
    linear, bad = None, None
    for (d, i), n, st in zip(idxs, sizes, strides):
        if isinstance(i, torch.Tensor):
            _check_bounds(i, n, d)
            i = _replicated_like(y, torch.where(i < 0, i + n, i))
        else:
            i = i + (i < 0) * n
            out_of_range = (i < 0).logical_or(i >= n)
            bad = out_of_range if bad is None else bad.logical_or(out_of_range)
        term = i * st
        linear = term if linear is None else linear + term
    if bad is not None:
        # An entry out of its own dim's range must not land on another valid element: make it fail.
        linear = linear.masked_fill(bad, total)
    return y, q, linear, perm, shape


def _getitem_many(self, spec, new_axes, tensors):
    """Several tensor indices, broadcast together as in torch (see _merge_indexed): one index op
    on the merged dims."""
    identity = new_axes == 0 and all(s == (0, 1, n, False) for s, n in zip(spec, self.shape))
    y = self if identity else _C._v_index(self, spec, new_axes)
    y, q, linear, _, _ = _merge_indexed(y, _long_indices(y, spec, new_axes, tensors))
    return _C._v_index_tensor(y, q, linear)


def _setitem_many(self, spec, new_axes, tensors, s):
    """``x[i, j] = number`` with several tensor indices (the other dims taken whole): one indexed
    write on the merged dims, then the merge and the permutation undone."""
    y, q, linear, perm, shape = _merge_indexed(self, _long_indices(self, spec, new_axes, tensors))
    new = _C._v_reshape(_C._v_setitem_index(y, q, linear, s), tuple(shape))
    if perm is not None:
        inverse = [0] * len(perm)
        for k, d in enumerate(perm):
            inverse[d] = k
        new = _C._v_permute(new, tuple(inverse))
    return new


def _scalar_value(value, what: str):
    """A number, or the single value of a one-element tensor (a dtorch tensor synchronises)."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (_Base, torch.Tensor)) and value.numel() == 1:
        return value.item()
    raise NotImplementedError(f"{what}: dtorch assigns only numbers (or one-element tensors) through a tensor "
                              "index; use dtorch.where(mask, value, x) for tensor values")


def _setitem(self, key, value):
    """``x[key] = value``: computes the new value and rebinds ``x`` to it (every reference to this
    Python object sees it). Basic keys take a number or a tensor broadcast to the selected region;
    a boolean mask or int64 index (with the other dims taken whole) takes a number."""
    spec, new_axes, tensors = _parse_key(self, key)
    value = _as_value(self, value)
    if tensors:
        basic_identity = all(s == (0, 1, n, False) for s, n in zip(spec, self.shape)) and new_axes == 0
        if not basic_identity:
            raise NotImplementedError("dtorch assigns through tensor indices with the other dims taken whole "
                                      "(x[mask] = v, x[:, idx] = v, x[i, j] = v)")
        s = _scalar_value(value, "setitem")
        if len(tensors) > 1:
            _C._rebind(self, _setitem_many(self, spec, new_axes, tensors, s))
            return
        pos, k, nd = tensors[0]
        if k.dtype in (torch.bool, torch.uint8):
            if isinstance(k, torch.Tensor):
                k = _replicated_like(self, k.bool())
            elif k.dtype == torch.uint8:
                raise IndexError("dtorch masks must be bool tensors")
            new = _C._v_setitem_mask(self, pos, k, s)
        else:
            if isinstance(k, torch.Tensor):
                if k.dtype != torch.int64:
                    raise IndexError("tensors used as indices must be long, byte or bool tensors")
                k = _replicated_like(self, k)
            new = _C._v_setitem_index(self, pos, k, s)
        _C._rebind(self, new)
        return
    if new_axes and isinstance(value, _Base):
        # None only changes how the value broadcasts: drop the value dims that face a new axis.
        kept = [s[2] for s in spec if not s[3]]
        out_ndim = len(kept) + bin(new_axes).count("1")
        vshape = list(value.shape)
        keep_dims = []
        for j, n in enumerate(vshape):
            o = j - (len(vshape) - out_ndim)
            if o >= 0 and new_axes >> o & 1:
                if n != 1:
                    raise RuntimeError(f"shape mismatch: value tensor of shape {vshape} cannot be broadcast to "
                                       f"indexing result")
                continue
            keep_dims.append(n)
        if len(keep_dims) != len(vshape):
            value = _C._v_reshape(value, tuple(keep_dims))
    _C._rebind(self, _C._v_setitem(self, spec, value))


def _iter(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(_unbind(self, 0))
