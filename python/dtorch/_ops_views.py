"""Views and shape ops: ``view``/``reshape``/``transpose``/``permute``/..., indexing, ``cat``/``stack``/...

torch's argument conventions live here (varargs sizes, ``-1`` inference, the parsing of ``x[...]``
keys, chunk/split sizes); the placement rules and the work live in C (src/ops/views.c, index.c,
views_join.c, views_rearrange.c). This module holds the Tensor methods (listed in _methods.py) and defines the ``dtorch.*`` functions.

dtorch values are immutable: ``x.view(...)``, ``x[0]`` and friends return new tensors (the
backend may share storage underneath), and ``x[key] = v`` / ``x.copy_(src)`` compute the new
value of ``x`` and rebind ``x`` to it. Every reference to that same Python object sees the new
value; a tensor taken from ``x`` earlier (``row = x[0]``) keeps its old value, unlike torch,
where it would be a view that sees the write.

>>> x = dtorch.arange(12, device_mesh=mesh, placements=[dtorch.Shard(0)]).view(4, 3)
>>> y = x.transpose(0, 1)[:, 1:]          # Shard(0) moved to Shard(1)
>>> z = dtorch.cat([x, x], dim=1)
>>> x[:, 0] = 0                           # rebinds x
"""

from __future__ import annotations

import math
import operator
from typing import Optional, Sequence, Tuple

import torch

from . import _C
from ._C import PlacementError
from ._factories import from_torch
from .distributed_spec import Replicate

__all__ = [
    "reshape", "transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis", "flatten",
    "unflatten", "squeeze", "unsqueeze", "narrow", "select", "clone", "cat", "concat", "concatenate", "stack",
    "chunk", "split", "unbind", "tril", "triu", "flip", "roll", "repeat_interleave",
]

_Base = _C.TensorBase


def _check(name: str, input, what: str = "input") -> None:
    if not isinstance(input, _Base):
        raise TypeError(f"{name}(): argument '{what}' must be a dtorch.Tensor, not {type(input).__name__}")


def _sizes(args: tuple, name: str) -> Tuple[int, ...]:
    """torch's size arguments: varargs ints, or one tuple/list/torch.Size."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = tuple(args[0])
    out = []
    for a in args:
        try:
            out.append(operator.index(a))
        except TypeError:
            raise TypeError(f"{name}(): argument 'size' must be a tuple of ints, but found element of type "
                            f"{type(a).__name__}") from None
    return tuple(out)


def _wrap(dim: int, ndim: int, scalar_ok: bool = True) -> int:
    n = max(ndim, 1) if scalar_ok else ndim
    dim = operator.index(dim)
    if n == 0:
        raise IndexError(f"dimension specified as {dim} but tensor has no dimensions")
    if dim < -n or dim >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim


def _renamed(name: str, fn, *args):
    """Runs fn and prefixes a PlacementError with the user-facing op name."""
    try:
        return fn(*args)
    except PlacementError as e:
        raise PlacementError(f"{name}: {e}") from None


def _replicated_like(x, t: torch.Tensor):
    """A torch tensor distributed as Replicate on x's mesh and graph."""
    return from_torch(t, device_mesh=x.device_mesh, graph=x.graph)


# ---------------------------------------------------------------- reshape family

def _one_form(name: str, kw: str, args: tuple, value) -> tuple:
    """torch's two forms of a sizes argument: positional (``x.view(2, -1)``, ``x.view((2, -1))``) or
    the keyword ``kw`` (``x.view(size=(2, -1))``), not both (TypeError, as torch)."""
    if value is None:
        if not args:  # torch's TypeError for a missing sizes argument (x.view(), x.reshape())
            raise TypeError(f'{name}() missing 1 required positional arguments: "{kw}"')
        return args
    if args:
        raise TypeError(f"{name}() received an invalid combination of arguments: both positional sizes and {kw}=")
    return (value,)


def _view(self, *shape, size=None, dtype=None):
    """``x.view(2, -1)``, ``x.view((2, -1))``, ``x.view(size=(2, -1))``: the same op as reshape, so view
    never fails where reshape succeeds (dtorch's is_contiguous() is always True). ``view(dtype)`` is
    ``x.view(torch.int32)`` reinterprets the bits (``_view_dtype``)."""
    if dtype is not None or (len(shape) == 1 and isinstance(shape[0], torch.dtype)):
        if dtype is not None and shape:
            raise TypeError("view() received an invalid combination of arguments: both sizes and dtype=")
        return _view_dtype(self, dtype if dtype is not None else shape[0])
    return _C._v_reshape(self, _sizes(_one_form("view", "size", shape, size), "view"))


def _reinterpret(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The kernel of ``view(dtype)`` on one device's block (run by its worker; shares the storage)."""
    return t.view(dtype)


def _view_dtype(self, dtype):
    """``x.view(dtype)``: torch's bit reinterpretation, on each device's block. torch's own checks run
    first on a meta tensor of the global shape (a 0-d tensor or a last dim whose bytes do not divide
    raise RuntimeError, as torch). The result keeps the placements; it is refused (PlacementError)
    where the blocks' reinterpretations are not the global one's blocks: a Partial (the sum of
    reinterpreted addends is not the reinterpreted sum) and, when the element size changes, a Shard
    of the last dim whose blocks' bytes do not fall on the new blocks' bounds."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"view(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")
    meta = torch.empty(tuple(self.shape), dtype=self.dtype, device="meta").view(dtype)
    if dtype == self.dtype:
        return _C._v_reshape(self, tuple(self.shape))
    from ._local_map import _coords, local_map, local_shape
    mesh, placements = self.device_mesh, list(self.placements)
    if any(p.is_partial() for p in placements):
        raise PlacementError(f"view(dtype): a Partial input ({placements}) cannot be reinterpreted as {dtype}; "
                             f"call x.redistribute(placements=[Replicate() ...]) first")
    old, new = self.element_size(), meta.element_size()
    if old != new and self.ndim > 0:
        for coord in _coords(mesh.shape):
            a = local_shape(tuple(self.shape), mesh.shape, placements, coord)[-1]
            b = local_shape(tuple(meta.shape), mesh.shape, placements, coord)[-1]
            if a * old != b * new:
                raise PlacementError(
                    f"view(dtype): the block at mesh coordinate {coord} of {placements} holds {a * old} bytes of "
                    f"the last dim, the {dtype} result's block {b * new}; redistribute the last dim (e.g. to "
                    f"Replicate) first")
    fn = local_map(_reinterpret, out_placements=placements, out_meta=meta)
    return fn(self, dtype)


def _reshape(self, *sizes, shape=None):
    """``x.reshape(2, -1)``, ``x.reshape(shape=(2, -1))``: the same op as view (one -1 is inferred)."""
    return _C._v_reshape(self, _sizes(_one_form("reshape", "shape", sizes, shape), "reshape"))


def _view_as(self, other):
    return _C._v_reshape(self, tuple(other.shape))


def _flatten(self, start_dim: int = 0, end_dim: int = -1):
    """Merges dims start_dim..end_dim. A 0-d tensor becomes 1-D."""
    shape = list(self.shape)
    if not shape:
        return _C._v_reshape(self, (1,))
    s, e = _wrap(start_dim, len(shape)), _wrap(end_dim, len(shape))
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    merged = math.prod(shape[s:e + 1])
    return _C._v_reshape(self, tuple(shape[:s] + [merged] + shape[e + 1:]))


def _unflatten(self, dim: int, sizes):
    """Splits dim into ``sizes`` (one -1 allowed)."""
    shape = list(self.shape)
    d = _wrap(dim, len(shape), scalar_ok=False)
    sizes = [operator.index(s) for s in sizes]
    if sizes.count(-1) > 1:
        raise RuntimeError("unflatten: only one dimension can be inferred")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if known == 0 or shape[d] % known:
            raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size of dim {d} "
                               f"({shape[d]}) in the input tensor")
        sizes[sizes.index(-1)] = shape[d] // known
    elif known != shape[d]:
        raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size of dim {d} "
                           f"({shape[d]}) in the input tensor")
    return _C._v_reshape(self, tuple(shape[:d] + sizes + shape[d + 1:]))


def _squeeze(self, dim=None):
    """Removes size-1 dims: all of them, one, or a tuple of them (sizes other than 1 stay)."""
    if dim is None:
        return _C._v_squeeze(self, None)
    dims = (dim,) if not isinstance(dim, (tuple, list)) else tuple(dim)
    return _C._v_squeeze(self, dims)


def _unsqueeze(self, dim: int):
    return _C._v_unsqueeze(self, dim)


# ---------------------------------------------------------------- permute family

def _permute(self, *dims_args, dims=None):
    """``x.permute(1, 0)``, ``x.permute((1, 0))`` or ``x.permute(dims=(1, 0))``."""
    return _C._v_permute(self, _sizes(_one_form("permute", "dims", dims_args, dims), "permute"))


def _transpose(self, dim0: int, dim1: int):
    n = self.ndim
    a, b = _wrap(dim0, n), _wrap(dim1, n)
    if n < 2:
        return _C._v_permute(self, tuple(range(n)))
    perm = list(range(n))
    perm[a], perm[b] = perm[b], perm[a]
    return _C._v_permute(self, tuple(perm))


def _movedim(self, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    n = self.ndim
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                           f"same number of dims as destination ({dst} dims)")
    src = [_wrap(s, n) for s in src]
    dst = [_wrap(d, n) for d in dst]
    perm = [-1] * n
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(d for d in range(n) if d not in src)
    perm = [p if p >= 0 else next(rest) for p in perm]
    return _C._v_permute(self, tuple(perm))


def _T(self):
    n = self.ndim
    return _C._v_permute(self, tuple(range(n - 1, -1, -1)))


def _t(self):
    """``x.t()``: transposes a 2-D tensor; 0-D and 1-D tensors come back as they are (as new tensors)."""
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return _T(self)


def _mT(self):
    if self.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.ndim}-D tensor.")
    return _transpose(self, -2, -1)


# ---------------------------------------------------------------- expand / repeat

def _expand(self, *sizes, size=None):
    """``x.expand(2, -1, 4)``, ``x.expand((2, -1, 4))`` or ``x.expand(size=(2, -1, 4))``."""
    return _C._v_expand(self, _sizes(_one_form("expand", "size", sizes, size), "expand"))


def _expand_as(self, other):
    return _C._v_expand(self, tuple(other.shape))


def _repeat(self, *sizes, repeats=None):
    """``x.repeat(1, 2)``, ``x.repeat((1, 2))``, ``x.repeat(repeats=(1, 2))``."""
    return _C._v_repeat(self, _sizes(_one_form("repeat", "repeats", sizes, repeats), "repeat"))


def _repeat_interleave(self, repeats, dim: Optional[int] = None, *, output_size: Optional[int] = None):
    """Int repeats keep a Shard on ``dim`` when every device's block stays its own; tensor repeats
    (read on the client: a dtorch tensor synchronises) need ``dim`` unsharded."""
    x = self
    if dim is None:
        x = _C._v_reshape(x, (-1,))
        dim = 0
    if isinstance(repeats, (_Base, torch.Tensor)):
        r = repeats.to_torch() if isinstance(repeats, _Base) else repeats
        if r.dim() == 0 or r.numel() == 1 and r.dim() == 0:
            return _C._v_repeat_interleave(x, int(r.item()), dim, 0)
        if r.dim() != 1:
            raise RuntimeError("repeat_interleave: repeats must be 0-dim or 1-dim tensor")
        if r.dtype != torch.int64:
            raise RuntimeError(f"repeat_interleave: repeats has to be Long tensor, got {r.dtype}")
        n = x.shape[_wrap(dim, x.ndim)]
        if output_size is None:
            output_size = int(r.sum()) if r.numel() == n else int(r[0]) * n
        rt = repeats if isinstance(repeats, _Base) and all(p.is_replicate() for p in repeats.placements) \
            else _replicated_like(x, r)
        return _C._v_repeat_interleave(x, rt, dim, output_size)
    return _C._v_repeat_interleave(x, operator.index(repeats), dim, 0)


# ---------------------------------------------------------------- copies

def _contiguous(self, memory_format=torch.contiguous_format):
    """``x.contiguous()``: the same value, each device's block laid out row-major as eager torch's
    ``contiguous()`` lays it out (kernel results may be strided views, and kernels reading another
    layout can round differently). A block that is already row-major is handed on with no copy.
    dtorch has no other memory formats: every ``memory_format`` gives the row-major layout."""
    return _C._v_contiguous(self)


def _clone(self, *, memory_format=None):
    """A new tensor with the same value (shares the immutable blocks; nothing is copied)."""
    return _C._v_clone(self)


def _as_value(x, value):
    """A setitem/copy_ operand: a number stays a number, tensors become dtorch tensors."""
    if isinstance(value, _Base):
        return value
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, torch.Tensor):
        return _replicated_like(x, value)
    if hasattr(value, "__index__"):
        return operator.index(value)
    try:
        t = torch.tensor(value, dtype=x.dtype)
    except Exception:
        raise TypeError(f"can't assign a {type(value).__name__} to a dtorch.Tensor") from None
    return _replicated_like(x, t)


def _copy_(self, src, non_blocking: bool = False):
    """Copies ``src`` (broadcast, cast to self's dtype) into self, keeping self's placements.
    A dtorch ``src`` is redistributed by itself when its placements do not line up, and moved onto
    self's mesh first when it lives on another one (of any shape: self's placements when the shapes
    agree, Replicate for a broadcast); a torch tensor is distributed straight onto self's placements."""
    if isinstance(src, torch.Tensor):
        if tuple(src.shape) == tuple(self.shape):
            src = from_torch(src.to(self.dtype), device_mesh=self.device_mesh, placements=self.placements,
                             graph=self.graph)
        else:
            src = _replicated_like(self, src)
    _check("copy_", src, "src")
    if src.device_mesh != self.device_mesh and src.graph == self.graph:
        # torch's RuntimeError for shapes that do not broadcast into self, before anything moves
        torch.empty(tuple(self.shape), device="meta").copy_(torch.empty(tuple(src.shape), device="meta"))
        if tuple(src.shape) == tuple(self.shape):
            src = src.redistribute(self.device_mesh, self.placements)
        else:
            src = src.redistribute(self.device_mesh, [Replicate()] * self.device_mesh.ndim)
    return _C._rebind(self, _C._v_copy(self, src))


# ---------------------------------------------------------------- narrow / select (indexing: _ops_indexing.py)

def _narrow(self, dim: int, start, length: int):
    """``x.narrow(dim, start, length)``: a slice of ``dim``, which must not be sharded."""
    d = _wrap(dim, self.ndim, scalar_ok=False)
    size = self.shape[d]
    start = operator.index(start.item() if isinstance(start, (torch.Tensor, _Base)) else start)
    length = operator.index(length)
    if start < -size or start > size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    if start < 0:
        start += size
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    spec = [(0, 1, n, False) for n in self.shape]
    spec[d] = (start, 1, length, False)
    return _renamed("narrow", _C._v_index, self, spec, 0)


def _select(self, dim: int, index: int):
    d = _wrap(dim, self.ndim, scalar_ok=False)
    size = self.shape[d]
    i = operator.index(index)
    if i < -size or i >= size:
        raise IndexError(f"select(): index {i} out of range for tensor of size {list(self.shape)} at dimension {d}")
    spec = [(0, 1, n, False) for n in self.shape]
    spec[d] = (i + size if i < 0 else i, 1, 1, True)
    return _renamed("select", _C._v_index, self, spec, 0)


# ---------------------------------------------------------------- split family

def _pieces(x, name: str, dim: int, sizes: Sequence[int]) -> tuple:
    d = _wrap(dim, x.ndim, scalar_ok=False)
    out = []
    start = 0
    base = [(0, 1, n, False) for n in x.shape]
    for n in sizes:
        spec = list(base)
        spec[d] = (start, 1, n, False)
        out.append(_renamed(name, _C._v_index, x, spec, 0))
        start += n
    return tuple(out)


def _split(self, split_size_or_sections, dim: int = 0):
    """Pieces of ``split_size`` (the last may be smaller) or of the listed sizes along ``dim``,
    which must not be sharded (unless one piece covers it)."""
    d = _wrap(dim, self.ndim, scalar_ok=False)
    n = self.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [operator.index(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
        return _pieces(self, "split", d, sizes)
    s = operator.index(split_size_or_sections)
    if s < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
    if s == 0 and n != 0:
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
    count = max((n + s - 1) // s, 1) if s > 0 else 1
    sizes = [min(s, n - i * s) for i in range(count)]
    return _pieces(self, "split", d, sizes)


def _chunk(self, chunks: int, dim: int = 0):
    """torch.chunk's pieces along ``dim`` (which must not be sharded)."""
    chunks = operator.index(chunks)
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = _wrap(dim, self.ndim, scalar_ok=False)
    n = self.shape[d]
    s = (n + chunks - 1) // chunks
    if s == 0 and n == 0:
        return _pieces(self, "chunk", d, [0] * chunks)
    count = max((n + s - 1) // s, 1)
    return _pieces(self, "chunk", d, [min(s, n - i * s) for i in range(count)])


def _unbind(self, dim: int = 0):
    """The slices along ``dim`` (which must not be sharded), as a tuple."""
    d = _wrap(dim, self.ndim, scalar_ok=False)
    out = []
    for i in range(self.shape[d]):
        spec = [(0, 1, n, False) for n in self.shape]
        spec[d] = (i, 1, 1, True)
        out.append(_renamed("unbind", _C._v_index, self, spec, 0))
    return tuple(out)


# ---------------------------------------------------------------- tril / flip / roll

def _tril(self, diagonal: int = 0):
    return _C._v_tril(self, diagonal, False)


def _triu(self, diagonal: int = 0):
    return _C._v_tril(self, diagonal, True)


def _flip(self, *dims):
    return _C._v_flip(self, _sizes(dims, "flip"))


def _roll(self, shifts, dims=None):
    shifts = (shifts,) if not isinstance(shifts, (tuple, list)) else tuple(shifts)
    if dims is not None:
        dims = (dims,) if not isinstance(dims, (tuple, list)) else tuple(dims)
    return _C._v_roll(self, shifts, dims)


# ---------------------------------------------------------------- module functions

def reshape(input, shape):
    """``dtorch.reshape(x, (2, -1))``."""
    _check("reshape", input)
    return _reshape(input, shape)


def transpose(input, dim0: int, dim1: int):
    _check("transpose", input)
    return _transpose(input, dim0, dim1)


swapaxes = swapdims = transpose


def permute(input, dims):
    _check("permute", input)
    return _permute(input, dims)


def movedim(input, source, destination):
    _check("movedim", input)
    return _movedim(input, source, destination)


moveaxis = movedim


def flatten(input, start_dim: int = 0, end_dim: int = -1):
    _check("flatten", input)
    return _flatten(input, start_dim, end_dim)


def unflatten(input, dim: int, sizes):
    _check("unflatten", input)
    return _unflatten(input, dim, sizes)


def squeeze(input, dim=None):
    _check("squeeze", input)
    return _squeeze(input, dim)


def unsqueeze(input, dim: int):
    _check("unsqueeze", input)
    return _unsqueeze(input, dim)


def narrow(input, dim: int, start, length: int):
    _check("narrow", input)
    return _narrow(input, dim, start, length)


def select(input, dim: int, index: int):
    _check("select", input)
    return _select(input, dim, index)


def clone(input, *, memory_format=None):
    _check("clone", input)
    return _clone(input)


def _tensor_list(name: str, tensors) -> list:
    if isinstance(tensors, (_Base, torch.Tensor)):
        raise TypeError(f"{name}(): argument 'tensors' must be a tuple or list of Tensors, not Tensor")
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor):
            raise TypeError(f"{name}(): cannot mix dtorch and torch tensors (element {i} is a torch.Tensor); "
                            "convert it with dtorch.from_torch(t, device_mesh=..., placements=...)")
    return tensors


def cat(tensors, dim: int = 0):
    """``torch.cat`` with type promotion; Replicate inputs next to sharded ones are sliced locally. Inputs
    all sharded along ``dim`` on one mesh dim are concatenated locally, with no communication (the result
    reports that Shard and keeps a segmented order inside, docs/decisions.md "segmented cat"); other inputs
    sharded along ``dim`` are all-gathered and the result sliced back to that Shard."""
    tensors = _tensor_list("cat", tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")  # torch's class and words
    return _C._v_cat(tensors, dim, False)


concat = concatenate = cat


def stack(tensors, dim: int = 0):
    """``torch.stack``: equal shapes; placements as for cat (the new dim is never sharded)."""
    return _C._v_cat(_tensor_list("stack", tensors), dim, True)


def chunk(input, chunks: int, dim: int = 0):
    _check("chunk", input)
    return _chunk(input, chunks, dim)


def split(tensor, split_size_or_sections, dim: int = 0):
    _check("split", tensor, "tensor")
    return _split(tensor, split_size_or_sections, dim)


def unbind(input, dim: int = 0):
    _check("unbind", input)
    return _unbind(input, dim)


def tril(input, diagonal: int = 0):
    _check("tril", input)
    return _tril(input, diagonal)


def triu(input, diagonal: int = 0):
    _check("triu", input)
    return _triu(input, diagonal)


def flip(input, dims):
    _check("flip", input)
    return _flip(input, dims)


def roll(input, shifts, dims=None):
    _check("roll", input)
    return _roll(input, shifts, dims)


def repeat_interleave(input, repeats, dim: Optional[int] = None, *, output_size: Optional[int] = None):
    _check("repeat_interleave", input)
    return _repeat_interleave(input, repeats, dim, output_size=output_size)
