"""Tensor factories: ``empty, zeros, ones, full, rand, randn, randint, arange, from_torch, tensor, *_like``.

Each takes torch's arguments plus ``device_mesh``, ``placements`` and
``graph``. The mesh defaults to ``device`` (a one-device mesh), else the
graph's ``default_device_mesh``, else one CPU device; placements default to all
``Replicate()``; floating dtypes default to the graph's ``default_dtype``, else
``torch.get_default_dtype()``.

>>> import dtorch
>>> mesh = dtorch.DeviceMesh("cpu", [0, 1])
>>> x = dtorch.rand((4, 3), device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> y = dtorch.from_torch(torch.arange(6.0).reshape(2, 3), mesh, [dtorch.Shard(1)])
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple, Union

import torch

from . import _C
from ._graph import Graph, _resolve
from .distributed_spec import DeviceMesh, Placement, _placements_to_raw

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = [
    "empty",
    "zeros",
    "ones",
    "full",
    "rand",
    "randn",
    "randint",
    "arange",
    "from_torch",
    "from_numpy",
    "tensor",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "manual_seed",
]

_device_meshes = {}  # str(device) -> one-device DeviceMesh


def _graph(graph: Optional[Graph]) -> Graph:
    if graph is None:
        return Graph.default_graph()
    graph = _resolve(graph)
    if not isinstance(graph, _C.GraphBase):
        raise TypeError(f"graph must be a dtorch.Graph, not {type(graph).__name__}")
    return graph


def _mesh_of_device(device) -> DeviceMesh:
    if isinstance(device, DeviceMesh):
        raise TypeError("device= takes a device such as 'cpu' or 'cuda:1'; pass a DeviceMesh as device_mesh=")
    key = str(device) if isinstance(device, (str, torch.device)) else device
    mesh = _device_meshes.get(key)
    if mesh is None:
        mesh = DeviceMesh(device)
        _device_meshes[key] = mesh
    return mesh


def _mesh(g: Graph, device, device_mesh: Optional[DeviceMesh]) -> DeviceMesh:
    if device is not None:
        if device_mesh is not None:
            raise ValueError("pass either device= or device_mesh=, not both")
        return _mesh_of_device(device)
    if device_mesh is not None:
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"device_mesh must be a DeviceMesh, not {type(device_mesh).__name__}")
        return device_mesh
    if g.default_device_mesh is not None:
        return g.default_device_mesh
    return _mesh_of_device("cpu")


def _float_dtype(g: Graph, dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is not None:
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, not {type(dtype).__name__}")
        return dtype
    return g.default_dtype if g.default_dtype is not None else torch.get_default_dtype()


def _size(size: Tuple[Any, ...], what: str = "size") -> Tuple[int, ...]:
    """torch's size conventions: varargs ints, or one tuple/list/torch.Size."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, bool):
            raise TypeError(f"{what} must be ints, not bool")
        try:
            s = operator.index(s)
        except TypeError:
            raise TypeError(f"{what} must be a sequence of ints, got {type(s).__name__}") from None
        out.append(s)
    for s in out:
        if s < 0:  # torch's error and class (RuntimeError), raised before anything is recorded
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {out}")
    if len(out) > _C.MAX_NDIM:
        raise ValueError(f"{what} has {len(out)} dimensions; dtorch supports at most {_C.MAX_NDIM}")
    return tuple(out)


def _fill_scalar(dtype: torch.dtype, value: float) -> Union[bool, int, float]:
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


def _prepare(size, dtype, device, device_mesh, placements, graph):
    """(graph, mesh, shape, dtype, raw placements) with the defaults applied and checked."""
    g = _graph(graph)
    mesh = _mesh(g, device, device_mesh)
    shape = _size(size)
    dtype = _float_dtype(g, dtype)
    return g, mesh, shape, dtype, _placements_to_raw(placements, mesh, len(shape))


def empty(*size, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """An uninitialised tensor. ``dtorch.empty(2, 3)`` / ``dtorch.empty((2, 3))``."""
    g, mesh, shape, dtype, raw = _prepare(size, dtype, device, device_mesh, placements, graph)
    return _C.empty(g, dtype, shape, mesh, raw)


def zeros(*size, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """A tensor of zeros. ``dtorch.zeros(2, 3, device_mesh=mesh, placements=[dtorch.Shard(0)])``."""
    g, mesh, shape, dtype, raw = _prepare(size, dtype, device, device_mesh, placements, graph)
    return _C.full(g, dtype, shape, _fill_scalar(dtype, 0), mesh, raw)


def ones(*size, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """A tensor of ones. ``dtorch.ones(2, 3)``."""
    g, mesh, shape, dtype, raw = _prepare(size, dtype, device, device_mesh, placements, graph)
    return _C.full(g, dtype, shape, _fill_scalar(dtype, 1), mesh, raw)


def full(size, fill_value, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """A tensor filled with ``fill_value``; the dtype is inferred from it as torch does.

    >>> dtorch.full((2, 2), 7).dtype
    torch.int64
    """
    if isinstance(fill_value, torch.Tensor) and fill_value.numel() == 1:
        fill_value = fill_value.item()
    if dtype is None:
        if isinstance(fill_value, bool):
            dtype = torch.bool
        elif isinstance(fill_value, int):
            dtype = torch.int64
        elif isinstance(fill_value, float):
            dtype = None  # the default float dtype
        else:
            raise TypeError(f"fill_value must be a bool, int or float, not {type(fill_value).__name__}")
    if not isinstance(size, (tuple, list, torch.Size)):
        size = (size,)
    g, mesh, shape, dtype, raw = _prepare((size,), dtype, device, device_mesh, placements, graph)
    return _C.full(g, dtype, shape, fill_value, mesh, raw)


def _random(kind, size, dtype, device, device_mesh, placements, generator, graph):
    g, mesh, shape, dtype, raw = _prepare(size, dtype, device, device_mesh, placements, graph)
    if generator is not None:
        # Values and generator state exactly as torch: draw with torch, then distribute.
        fn = torch.rand if kind == "rand" else torch.randn
        return from_torch(fn(shape, generator=generator, dtype=dtype), device_mesh=mesh, placements=placements,
                          graph=g)
    return (_C.rand if kind == "rand" else _C.randn)(g, dtype, shape, mesh, raw)


def rand(*size, dtype=None, device=None, device_mesh=None, placements=None, generator=None, graph=None) -> "Tensor":
    """Uniform [0, 1) values, the same whatever the mesh and placements (see ``manual_seed``).

    With ``generator=`` the values are ``torch.rand(size, generator=generator)``.
    """
    return _random("rand", size, dtype, device, device_mesh, placements, generator, graph)


def randn(*size, dtype=None, device=None, device_mesh=None, placements=None, generator=None, graph=None) -> "Tensor":
    """Standard normal values, the same whatever the mesh and placements (see ``manual_seed``)."""
    return _random("randn", size, dtype, device, device_mesh, placements, generator, graph)


def _int_bound(name: str, value) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"randint(): argument '{name}' must be int, not {type(value).__name__}") from None


def _randint(low: int, high: int, size, dtype, device, device_mesh, placements, generator, graph) -> "Tensor":
    low, high = _int_bound("low", low), _int_bound("high", high)
    if not isinstance(size, (tuple, list, torch.Size)):
        raise TypeError(f"randint(): argument 'size' must be tuple of ints, not {type(size).__name__}")
    g = _graph(graph)
    mesh = _mesh(g, device, device_mesh)
    shape = _size((size,))
    if dtype is None:
        dtype = torch.int64
    elif not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, not {type(dtype).__name__}")
    if generator is not None:
        # Values and generator state exactly as torch: draw with torch, then distribute.
        t = torch.randint(low, high, shape, generator=generator, dtype=dtype)
        return from_torch(t, device_mesh=mesh, placements=placements, graph=g)
    return _C._randint(g, dtype, low, high, shape, mesh, _placements_to_raw(placements, mesh, len(shape)))


def randint(*args, size=None, low=None, high=None, dtype=None, device=None, device_mesh=None, placements=None,
            generator=None, graph=None) -> "Tensor":
    """Uniform integers in ``[low, high)``; int64 unless ``dtype`` says, as ``torch.randint``.

    ``randint(high, size)``, ``randint(low, high, size)`` (or keywords). The values are the same
    whatever the mesh and placements (see ``manual_seed``); with ``generator=`` they are
    ``torch.randint(low, high, size, generator=generator)``.

    >>> x = dtorch.randint(0, 10, (4, 3), device_mesh=mesh, placements=[dtorch.Shard(0)])
    """
    pos = list(args)
    if size is None and pos and isinstance(pos[-1], (tuple, list, torch.Size)):
        size = pos.pop()
    if len(pos) == 2:
        if low is not None or high is not None:
            raise TypeError("randint(): low and high given twice")
        low, high = pos
    elif len(pos) == 1:
        if high is not None:
            low, high = pos[0], high
        else:
            high = pos[0]
    elif pos:
        raise TypeError(f"randint() takes (low, high, size) or (high, size), got {len(args)} positional arguments")
    if high is None or size is None:
        raise TypeError("randint() missing required arguments: 'high' and 'size'")
    return _randint(0 if low is None else low, high, size, dtype, device, device_mesh, placements, generator, graph)


def arange(start, end=None, step=1, *, dtype=None, device=None, device_mesh=None, placements=None,
           graph=None) -> "Tensor":
    """``start, start + step, ...`` below ``end``; int64 when all arguments are ints, as torch.

    >>> dtorch.arange(5).tolist(), dtorch.arange(0, 1, 0.25).dtype
    ([0, 1, 2, 3, 4], torch.float32)
    """
    if end is None:
        start, end = 0, start
    args = (start, end, step)
    for a in args:
        if isinstance(a, torch.Tensor):
            raise TypeError("arange takes Python numbers")
        if not isinstance(a, (int, float)):
            raise TypeError(f"arange arguments must be numbers, not {type(a).__name__}")
    # torch's messages and class (RuntimeError).
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError(f"upper bound and lower bound inconsistent with step sign "
                           f"(start={start}, end={end}, step={step})")
    g = _graph(graph)
    mesh = _mesh(g, device, device_mesh)
    if dtype is None:
        dtype = torch.int64 if all(isinstance(a, int) for a in args) else _float_dtype(g, None)
    raw = _placements_to_raw(placements, mesh, 1)
    return _C.arange(g, dtype, float(start), float(end), float(step), mesh, raw)


def from_torch(tensor: torch.Tensor, device_mesh: Optional[DeviceMesh] = None,
               placements: Optional[Sequence[Placement]] = None, *, device=None, graph=None) -> "Tensor":
    """Distribute a full torch tensor: Shard splits, Replicate copies, Partial puts the
    value on the first coordinate and zeros elsewhere. The values are copied at the call.

    >>> x = dtorch.from_torch(torch.ones(4, 3), mesh, [dtorch.Shard(0)])
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"from_torch takes a torch.Tensor, not {type(tensor).__name__}")
    g = _graph(graph)
    mesh = _mesh(g, device, device_mesh)
    raw = _placements_to_raw(placements, mesh, tensor.dim())
    t = tensor.detach()
    if t.is_neg():
        t = t.resolve_neg()
    if t.is_conj():
        t = t.resolve_conj()
    if t.dtype == torch.bool or g.backend != "torch" or (mesh.device_type == "cpu" and t.device.type != "cpu"):
        t = t.cpu()
    return _C.from_torch(g, t.contiguous(), mesh, raw)


def _from_local(blocks: Sequence[torch.Tensor], shape: Sequence[int], device_mesh: DeviceMesh,
                placements: Sequence[Placement], *, graph=None) -> "Tensor":
    """A tensor of global ``shape`` from what each device holds (as ``DTensor.from_local``): ``blocks[i]``
    is the local block of the device at flat mesh index ``i`` (row-major mesh order), shaped as the
    placements lay ``shape`` out. On Partial mesh dims the blocks are the addends; copies on Replicate
    dims are not checked to agree. Private: tests build genuine Partials with it
    (``dtorch.test.test_util.genuine_partial``). The blocks are copied at the call.

    >>> m = dtorch.DeviceMesh("cpu", [0, 1])
    >>> _from_local([torch.ones(2), torch.ones(2)], (2,), m, [dtorch.Partial()]).to_torch()
    tensor([2., 2.])
    """
    blocks = list(blocks)
    if not blocks or not all(isinstance(b, torch.Tensor) for b in blocks):
        raise TypeError("_from_local takes a non-empty list of torch.Tensor blocks")
    dtype = blocks[0].dtype
    if any(b.dtype != dtype for b in blocks):
        raise TypeError(f"_from_local: the blocks have different dtypes {sorted({str(b.dtype) for b in blocks})}")
    g = _graph(graph)
    mesh = _mesh(g, None, device_mesh)
    shape = tuple(int(n) for n in shape)
    raw = _placements_to_raw(placements, mesh, len(shape))
    host = [b.detach().resolve_neg().resolve_conj().cpu().contiguous() for b in blocks]
    return _C._from_local(g, dtype, shape, host, mesh, raw)


def from_numpy(ndarray, device_mesh: Optional[DeviceMesh] = None, placements: Optional[Sequence[Placement]] = None,
               *, device=None, graph=None) -> "Tensor":
    """``torch.from_numpy(ndarray)`` distributed like ``from_torch`` (by default on the default mesh,
    Replicate). The values are copied: later writes to the array do not reach the tensor.

    >>> dtorch.from_numpy(numpy.arange(6).reshape(2, 3)).dtype
    torch.int64
    """
    return from_torch(torch.from_numpy(ndarray), device_mesh, placements, device=device, graph=graph)


def tensor(data, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """Like ``torch.tensor(data, dtype=dtype)``, then distributed.

    >>> dtorch.tensor([[1, 2], [3, 4]]).dtype
    torch.int64
    """
    g = _graph(graph)
    if isinstance(data, _C.TensorBase):
        data = data.to_torch()
    t = torch.tensor(data, dtype=dtype) if not isinstance(data, torch.Tensor) else data.detach().clone()
    if dtype is None and g.default_dtype is not None and t.is_floating_point() and not isinstance(data, torch.Tensor):
        t = t.to(g.default_dtype)
    elif dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return from_torch(t, device_mesh=device_mesh, placements=placements, device=device, graph=g)


def _like(t, dtype, device, device_mesh, placements, graph, name: str = "*_like"):
    if not isinstance(t, _C.TensorBase):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be a dtorch.Tensor, not {type(t).__name__}")
    if device is None and device_mesh is None:
        device_mesh = t.device_mesh
        if placements is None:
            placements = t.placements
    return dict(dtype=dtype if dtype is not None else t.dtype, device=device, device_mesh=device_mesh,
                placements=placements, graph=graph if graph is not None else t.graph)


def empty_like(t, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """An uninitialised tensor with t's shape, dtype, mesh and placements."""
    kw = _like(t, dtype, device, device_mesh, placements, graph, "empty_like")
    return empty(t.shape, **kw)


def zeros_like(t, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """Zeros with t's shape, dtype, mesh and placements."""
    kw = _like(t, dtype, device, device_mesh, placements, graph, "zeros_like")
    return zeros(t.shape, **kw)


def ones_like(t, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """Ones with t's shape, dtype, mesh and placements."""
    kw = _like(t, dtype, device, device_mesh, placements, graph, "ones_like")
    return ones(t.shape, **kw)


def full_like(t, fill_value, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """``fill_value`` with t's shape, dtype, mesh and placements."""
    kw = _like(t, dtype, device, device_mesh, placements, graph, "full_like")
    return full(t.shape, _fill_scalar(kw["dtype"], fill_value), **kw)


def rand_like(t, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """Uniform values with t's shape, dtype, mesh and placements."""
    kw = _like(t, dtype, device, device_mesh, placements, graph, "rand_like")
    return rand(t.shape, **kw)


def randn_like(t, *, dtype=None, device=None, device_mesh=None, placements=None, graph=None) -> "Tensor":
    """Normal values with t's shape, dtype, mesh and placements."""
    kw = _like(t, dtype, device, device_mesh, placements, graph, "randn_like")
    return randn(t.shape, **kw)


def randint_like(t, low=0, high=None, *, dtype=None, device=None, device_mesh=None, placements=None,
                 generator=None, graph=None) -> "Tensor":
    """Integers in ``[low, high)`` with t's shape, dtype, mesh and placements.

    ``randint_like(t, high)`` or ``randint_like(t, low, high)``, as ``torch.randint_like``.
    """
    if high is None:
        low, high = 0, low
    kw = _like(t, dtype, device, device_mesh, placements, graph, "randint_like")
    return _randint(low, high, tuple(t.shape), kw["dtype"], kw["device"], kw["device_mesh"], kw["placements"],
                    generator, kw["graph"])


def manual_seed(seed: int) -> None:
    """Seeds dtorch's random factories (only those: torch's generator is untouched).

    >>> dtorch.manual_seed(0); a = dtorch.rand(3)
    >>> dtorch.manual_seed(0); b = dtorch.rand(3, device_mesh=mesh, placements=[dtorch.Shard(0)])
    >>> # a and b hold the same values
    """
    _C.manual_seed(operator.index(seed))
