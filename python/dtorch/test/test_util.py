"""Assertions comparing dtorch and torch tensors.

Each side may be a ``torch.Tensor``, a ``dtorch.Tensor`` (read with
``to_torch()``) or a list/tuple of them. ``test_case`` is a
``unittest.TestCase`` (its ``fail`` is used) or None for plain asserts.

>>> import unittest, torch, dtorch
>>> from dtorch.test.test_util import assert_tensor_equal, assert_tensor_allclose
>>> assert_tensor_equal(None, dtorch.ones(2), torch.ones(2))
>>> assert_tensor_allclose(None, [dtorch.ones(2)], [torch.ones(2) + 1e-9])
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .. import _factories
from .._C import TensorBase
from .._graph import Graph, _resolve

__all__ = ["assert_tensor_equal", "assert_tensor_allclose", "gen_arg_list", "is_graph_satisfy", "local_values",
           "assert_replicas_equal", "genuine_partial", "partial_from_pieces", "local_regions"]


def _to_torch(x: Any, side: str) -> torch.Tensor:
    if isinstance(x, TensorBase):
        return x.to_torch()
    if isinstance(x, torch.Tensor):
        return x.detach()
    raise TypeError(f"{side}: expected a torch or dtorch tensor, got {type(x).__name__}")


def _pairs(a: Any, b: Any) -> Tuple[List[Tuple[Any, Any]], Optional[str]]:
    a_seq, b_seq = isinstance(a, (list, tuple)), isinstance(b, (list, tuple))
    if a_seq != b_seq:
        return [], f"one side is a list and the other is not: {type(a).__name__} vs {type(b).__name__}"
    if not a_seq:
        return [(a, b)], None
    if len(a) != len(b):
        return [], f"the lists have different lengths: {len(a)} vs {len(b)}"
    return list(zip(a, b)), None


def _fail(test_case, msg: str) -> None:
    if test_case is not None:
        test_case.fail(msg)
    raise AssertionError(msg)


def _describe(i: int, n: int, why: str, x: torch.Tensor, y: torch.Tensor) -> str:
    where = f"element {i} of the lists: " if n > 1 else ""
    return f"{where}{why}\nfirst ({x.dtype}, {tuple(x.shape)}):\n{x}\nsecond ({y.dtype}, {tuple(y.shape)}):\n{y}"


def _compare(test_case, a, b, close: bool, rtol: float, atol: float, equal_nan: bool) -> None:
    pairs, err = _pairs(a, b)
    if err is not None:
        _fail(test_case, err)
    for i, (x, y) in enumerate(pairs):
        x, y = _to_torch(x, "first"), _to_torch(y, "second")
        why = None
        if x.dtype != y.dtype:
            why = f"dtypes differ: {x.dtype} vs {y.dtype}"
        elif x.shape != y.shape:
            why = f"shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}"
        else:
            xc, yc = x.cpu(), y.cpu()
            if close:
                # Compare in float64 so low-precision dtypes work on every backend.
                if xc.is_floating_point():
                    xc, yc = xc.double(), yc.double()
                if not torch.allclose(xc, yc, rtol=rtol, atol=atol, equal_nan=equal_nan):
                    diff = (xc.double() - yc.double()).abs()
                    why = (f"values are not close (rtol={rtol}, atol={atol}); "
                           f"max abs difference {diff.max().item() if diff.numel() else 0}")
            elif not torch.equal(xc, yc):
                why = "values differ"
        if why is not None:
            _fail(test_case, _describe(i, len(pairs), why, x, y))


def assert_tensor_equal(test_case, a, b) -> None:
    """Asserts same dtype, same shape and ``torch.equal`` values (after ``to_torch``).

    >>> assert_tensor_equal(self, dtorch.ones(2, 2), torch.ones(2, 2))
    """
    _compare(test_case, a, b, close=False, rtol=0.0, atol=0.0, equal_nan=False)


def assert_tensor_allclose(test_case, a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> None:
    """Asserts same dtype, same shape and ``torch.allclose(a, b, rtol, atol)`` values.

    >>> assert_tensor_allclose(self, x @ w, x_t @ w_t, rtol=1e-4, atol=1e-5)
    """
    _compare(test_case, a, b, close=True, rtol=rtol, atol=atol, equal_nan=equal_nan)


def gen_arg_list(*choices: Union[Dict[str, Sequence[Any]], Sequence[Any]],
                 **named: Sequence[Any]) -> List[Union[Dict[str, Any], Tuple[Any, ...]]]:
    """Every combination of the given choices, for parametrised tests (first choice varies slowest).

    Keywords (or one dict) give a list of dicts; several positional lists give a list of tuples.

    >>> gen_arg_list(shape=[(2,), (3, 4)], dtype=[torch.float32])
    [{'shape': (2,), 'dtype': torch.float32}, {'shape': (3, 4), 'dtype': torch.float32}]
    >>> gen_arg_list([1, 2], ["a"])
    [(1, 'a'), (2, 'a')]
    """
    if len(choices) == 1 and isinstance(choices[0], dict):
        if named:
            raise TypeError("gen_arg_list() takes a dict or keywords, not both")
        named = dict(choices[0])
        choices = ()
    if choices and named:
        raise TypeError("gen_arg_list() takes positional lists or keywords, not both")
    if named:
        keys = list(named)
        for k in keys:
            if isinstance(named[k], (str, bytes)) or not hasattr(named[k], "__iter__"):
                raise TypeError(f"gen_arg_list(): the choices for {k!r} must be a list, not {type(named[k]).__name__}")
        return [dict(zip(keys, combo)) for combo in itertools.product(*(list(named[k]) for k in keys))]
    for i, c in enumerate(choices):
        if isinstance(c, (str, bytes)) or not hasattr(c, "__iter__"):
            raise TypeError(f"gen_arg_list(): argument {i} must be a list of choices, not {type(c).__name__}")
    return list(itertools.product(*(list(c) for c in choices)))


def is_graph_satisfy(device_mesh, graph=None) -> bool:
    """Whether ``graph`` (default: the thread's default graph) can run on ``device_mesh``, e.g. to
    skip CUDA tests on a machine without GPUs.

    >>> if not is_graph_satisfy(dtorch.DeviceMesh("cuda", [0, 1])):
    ...     raise unittest.SkipTest("needs 2 GPUs")
    """
    g = Graph.default_graph() if graph is None else _resolve(graph)
    return g.satisfy(device_mesh)


def local_values(t: Any) -> List[torch.Tensor]:
    """What each device of ``t``'s mesh holds, as stored, in row-major mesh order (the order of
    the mesh's ids): its shard, its own copy on Replicate mesh dims, its addend on Partial ones.

    >>> m = dtorch.DeviceMesh("cpu", [0, 1])
    >>> [v.tolist() for v in local_values(dtorch.from_torch(torch.arange(4.0), m, [dtorch.Shard(0)]))]
    [[0.0, 1.0], [2.0, 3.0]]
    """
    if not isinstance(t, TensorBase):
        raise TypeError(f"local_values: expected a dtorch tensor, got {type(t).__name__}")
    return t._local_values()


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        # Bits, so NaN payloads and -0.0 count too.
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


def assert_replicas_equal(test_case, t: Any) -> None:
    """Every copy of ``t`` along each ``Replicate()`` mesh dim is bitwise equal to the copy at
    coordinate 0 of that dim (the one a read returns): replicas that drifted apart would give
    different results depending on which device a later op reads.

    >>> assert_replicas_equal(None, dtorch.ones(3, device_mesh=m, placements=[dtorch.Replicate()]))
    """
    shape, placements = tuple(t.device_mesh.shape), list(t.placements)
    if not any(p.is_replicate() and n > 1 for p, n in zip(placements, shape)):
        return  # no copies to compare: skip the reads
    msg = _replica_mismatch(shape, placements, local_values(t))
    if msg is not None:
        _fail(test_case, msg)


def _replica_mismatch(shape: Tuple[int, ...], placements: List[Any], values: List[torch.Tensor]) -> Optional[str]:
    """The first pair of replicas (row-major mesh order ``values``) that are not bitwise equal."""
    coords = list(itertools.product(*[range(n) for n in shape]))
    index = {c: i for i, c in enumerate(coords)}
    for md, p in enumerate(placements):
        if not p.is_replicate() or shape[md] == 1:
            continue
        for c in coords:
            if c[md] == 0:
                continue
            ref = c[:md] + (0,) + c[md + 1:]
            a, b = values[index[ref]], values[index[c]]
            if not _bitwise_equal(a, b):
                return (f"replicas differ on mesh dim {md} ({placements}): device at {ref} holds {a}, "
                        f"device at {c} holds {b}")
    return None


def local_regions(shape: Sequence[int], mesh_shape: Sequence[int], placements: Sequence[Any]) -> List[Tuple[slice, ...]]:
    """The region of a tensor of ``shape`` that each device holds, in row-major mesh order, written
    here from docs/design.md ("Distributed tensors") rather than read from the library: ``torch.chunk`` sizes
    (``c = ceil(n/k)``, piece i is ``[min(i*c, n), min((i+1)*c, n))``), mesh dims that shard the same
    tensor dim nesting in mesh-dim order. Replicate and Partial mesh dims hold the whole extent.

    >>> local_regions((5,), (2,), [dtorch.Shard(0)])
    [(slice(0, 3, None),), (slice(3, 5, None),)]
    """
    ndim = len(shape)
    out = []
    for coord in itertools.product(*[range(n) for n in mesh_shape]):
        start, length = [0] * ndim, list(shape)
        for md, p in enumerate(placements):
            if not p.is_shard() or mesh_shape[md] == 1:
                continue
            d = p.dim % ndim
            c = -(-length[d] // mesh_shape[md])
            lo, hi = min(coord[md] * c, length[d]), min((coord[md] + 1) * c, length[d])
            start[d] += lo
            length[d] = hi - lo
        out.append(tuple(slice(a, a + n) for a, n in zip(start, length)))
    return out


@functools.lru_cache(maxsize=1024)
def _regions(shape: Tuple[int, ...], mesh_shape: Tuple[int, ...], placements: Tuple[Any, ...]) -> List[Tuple[slice, ...]]:
    return local_regions(shape, mesh_shape, placements)


def _is_integer_valued(t: torch.Tensor) -> bool:
    if t.dtype.is_complex:
        return bool(torch.equal(t.real, t.real.round()) and torch.equal(t.imag, t.imag.round()))
    if t.dtype.is_floating_point:
        return bool(torch.equal(t, t.round()))
    return True


def _split_pieces(t: torch.Tensor, n: int, seed: int, exact: bool) -> torch.Tensor:
    """``n`` pieces of ``t`` (stacked on dim 0) that add up to ``t``: the first ``n - 1`` hold distinct
    nonzero small integers at every element, the last the rest, redrawn where it equals another
    piece, so that at every element all the pieces differ whenever the value allows it. For
    integer-valued ``t`` the pieces are integers and add up exactly in any order; otherwise each
    element's integers are scaled by a power of two near a quarter of its magnitude, so the pieces
    are of the value's own size and add up to it within a few ulps (relative, per element)."""
    # On the host whatever t's device or torch's default device: the same pieces everywhere.
    home, t = t.device, t.cpu()
    g = torch.Generator().manual_seed(seed)
    k = max(4, n)
    values = torch.tensor([v for v in range(-k, k + 1) if v != 0], dtype=torch.float64, device="cpu")
    m = values.numel()
    flat = t.reshape(-1)
    numel = flat.numel()
    scale = None
    if not exact:
        mag = flat.abs().double()
        ok = torch.isfinite(mag) & (mag > 0)
        scale = torch.where(ok, torch.exp2(torch.floor(torch.log2(torch.where(ok, mag, 1.0))) - 2), 1.0)
    steps = torch.arange(n - 1, device="cpu").unsqueeze(1)

    def draw(count: int, idx: Optional[torch.Tensor]) -> torch.Tensor:
        # n - 1 consecutive entries of the value list from a random start (mod its length): distinct.
        start = torch.randint(0, m, (1, count), generator=g, device="cpu")
        v = values[(start + steps) % m]
        if scale is not None:
            v = v * (scale if idx is None else scale[idx])
        return v.to(t.dtype)

    pieces = torch.empty((n, numel), dtype=t.dtype, device="cpu")
    pieces[: n - 1] = draw(numel, None)
    pieces[n - 1] = flat - pieces[: n - 1].sum(dim=0, dtype=t.dtype)
    for _ in range(64):
        clash = (pieces[: n - 1] == pieces[n - 1]).any(dim=0)
        if not bool(clash.any()):
            break
        idx = clash.nonzero().reshape(-1)
        pieces[: n - 1, idx] = draw(idx.numel(), idx)
        pieces[n - 1, idx] = flat[idx] - pieces[: n - 1, idx].sum(dim=0, dtype=t.dtype)
    return pieces.reshape((n,) + tuple(t.shape)).to(home)


# Sweeps distribute the same small value over and over: its split (a function of the value, the number
# of pieces and the seed) is remembered for the last few hundred, and checked once per layout.
_PIECES: "OrderedDict[Any, torch.Tensor]" = OrderedDict()
_CHECKED: set = set()           # (pieces key, layout key) whose blocks were checked
_LAYOUTS_READ_BACK: set = set()  # layout keys whose blocks were read back from the devices


def _pieces_of(t: torch.Tensor, n: int, seed: int, exact: bool) -> Tuple[torch.Tensor, Any]:
    """_split_pieces and a key for it (None when not remembered)."""
    if t.numel() > 4096 or t.dtype.is_complex:
        return _split_pieces(t, n, seed, exact), None
    key = (t.dtype, tuple(t.shape), n, seed, t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    hit = _PIECES.get(key)
    if hit is None:
        hit = _PIECES[key] = _split_pieces(t, n, seed, exact)
        if len(_PIECES) > 512:
            _PIECES.popitem(last=False)
    else:
        _PIECES.move_to_end(key)
    return hit, key


def genuine_partial(t: torch.Tensor, device_mesh: Any, placements: Sequence[Any], seed: int = 0, *,
                    graph: Any = None) -> Any:
    """A dtorch tensor of value ``t`` laid out with ``placements`` whose ``Partial()`` mesh dims hold a
    different piece on every coordinate, rather than the value on coordinate 0 and zeros elsewhere as
    ``from_torch`` builds them: an op that handles only the first piece, or adds a term on every piece,
    then gives a wrong value.

    The value is split at random over every coordinate of the Partial mesh dims together (row-major
    over them, in mesh-dim order) and laid out by ``partial_from_pieces``, so no dtorch op is
    involved. For integer-valued ``t`` (ints, or floats holding integers) the pieces are small
    integers and add up exactly in any order; for other floats they are of each element's own
    magnitude and add up to it within a few ulps. Along the Partial mesh dims the blocks are checked
    to differ and to add up to ``t``'s region, and (once per layout) read back with ``local_values``
    to check that every device holds its intended block. Without a Partial mesh dim of size > 1, or
    for bool, this is ``from_torch``.

    >>> x = genuine_partial(torch.arange(4.0), dtorch.DeviceMesh("cpu", [0, 1]), [dtorch.Partial()])
    >>> [v.tolist() for v in local_values(x)]   # two different addends of [0, 1, 2, 3]
    [[1.0, 4.0, 2.0, -4.0], [-1.0, -3.0, 0.0, 7.0]]
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"genuine_partial: expected a torch.Tensor, got {type(t).__name__}")
    placements = list(placements)
    mesh_shape = tuple(device_mesh.shape)
    pdims = _partial_dims(mesh_shape, placements)
    if not pdims or t.dtype == torch.bool:
        # bool has no addends to split into (a bool Partial is only ever built to be rejected).
        return _factories.from_torch(t, device_mesh, placements, graph=graph)
    t = t.detach().cpu()
    n = 1
    for md in pdims:
        n *= mesh_shape[md]
    exact = _is_integer_valued(t)
    pieces, pieces_key = _pieces_of(t, n, seed, exact)
    x, blocks = _from_pieces(pieces, device_mesh, placements, graph)
    # What the devices hold is read back once per layout (it depends on the layout, not on the
    # values, and the reads would dominate sweeps that build thousands of these); the blocks are
    # checked once per value and layout.
    layout = (tuple(t.shape), t.dtype, device_mesh, tuple(repr(p) for p in placements))
    if pieces_key is None or (pieces_key, layout) not in _CHECKED:
        values = None
        if layout not in _LAYOUTS_READ_BACK:
            values = local_values(x)
            _LAYOUTS_READ_BACK.add(layout)
        coords = list(itertools.product(*[range(k) for k in mesh_shape]))
        regions = _regions(tuple(t.shape), mesh_shape, tuple(placements))
        _check_genuine(t, blocks, values, coords, regions, pdims, exact, n)
        if pieces_key is not None:
            _CHECKED.add((pieces_key, layout))
            if len(_CHECKED) > 4096:
                _CHECKED.clear()
    return x


def partial_from_pieces(pieces: torch.Tensor, device_mesh: Any, placements: Sequence[Any], *,
                        graph: Any = None) -> Any:
    """The tensor whose ``Partial()`` mesh dims hold the given addends: ``pieces[j]`` (global shape) is
    the piece of the ``j``-th coordinate of the Partial mesh dims (of size > 1), row-major over them in
    mesh-dim order; each device holds its shard of its coordinate's piece, an equal copy along the
    Replicate mesh dims. The value is the sum of the pieces. Built from per-device blocks
    (``dtorch._factories._from_local``), so no dtorch op is involved.

    >>> m = dtorch.DeviceMesh("cpu", [0, 1, 2])
    >>> x = partial_from_pieces(torch.tensor([[1.0], [2.0], [4.0]]), m, [dtorch.Partial()])
    >>> [v.tolist() for v in local_values(x)], x.to_torch().tolist()
    ([[1.0], [2.0], [4.0]], [7.0])
    """
    pdims = _partial_dims(tuple(device_mesh.shape), list(placements))
    n = 1
    for md in pdims:
        n *= device_mesh.shape[md]
    if pieces.dim() < 1 or pieces.shape[0] != n:
        raise ValueError(f"partial_from_pieces: {n} pieces needed on dim 0 for {list(placements)} on a mesh of "
                         f"shape {tuple(device_mesh.shape)}, got shape {tuple(pieces.shape)}")
    return _from_pieces(pieces.detach().cpu(), device_mesh, list(placements), graph)[0]


def _partial_dims(mesh_shape: Tuple[int, ...], placements: List[Any]) -> List[int]:
    return [md for md, p in enumerate(placements) if p.is_partial() and mesh_shape[md] > 1]


def _from_pieces(pieces: torch.Tensor, device_mesh: Any, placements: List[Any], graph: Any) -> Tuple[Any, List[Any]]:
    mesh_shape = tuple(device_mesh.shape)
    pdims = _partial_dims(mesh_shape, placements)
    shape = tuple(pieces.shape[1:])
    coords = list(itertools.product(*[range(k) for k in mesh_shape]))
    regions = _regions(shape, mesh_shape, tuple(placements))

    def piece_index(c: Tuple[int, ...]) -> int:
        j = 0
        for md in pdims:
            j = j * mesh_shape[md] + c[md]
        return j

    blocks = [pieces[piece_index(c)][r].contiguous() for c, r in zip(coords, regions)]
    return _factories._from_local(blocks, shape, device_mesh, placements, graph=graph), blocks


def _check_genuine(t: torch.Tensor, blocks: List[torch.Tensor], values: Optional[List[torch.Tensor]],
                   coords: List[Tuple[int, ...]], regions: List[Tuple[slice, ...]], pdims: List[int], exact: bool,
                   n: int) -> None:
    """What genuine_partial promises: each device holds its block (``values``, read back with
    local_values, when given); along the Partial mesh dims the blocks differ and add up to ``t``'s
    region (exactly for integer-valued ``t``, else to within a few ulps per element)."""
    read_back = values is not None
    values = values if read_back else blocks
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i, (c, block) in enumerate(zip(coords, blocks)):
        if read_back and not _bitwise_equal(values[i], block):
            raise AssertionError(f"genuine_partial: the device at {c} holds {values[i]}, not its block {block}")
        groups.setdefault(tuple(v for md, v in enumerate(c) if md not in pdims), []).append(i)
    for members in groups.values():
        want = t[regions[members[0]]]
        total = values[members[0]].clone()
        for i in members[1:]:
            total = total + values[i]
        if want.numel() and any(torch.equal(values[a], values[b]) for a, b in itertools.combinations(members, 2)):
            raise AssertionError(f"genuine_partial: two devices of {[coords[i] for i in members]} hold equal pieces")
        if exact:
            ok = torch.equal(total, want)
        else:
            wide = torch.complex128 if t.dtype.is_complex else torch.float64
            ok = torch.allclose(total.to(wide), want.to(wide), rtol=8 * n * torch.finfo(t.dtype).eps, atol=0,
                                equal_nan=True)
        if not ok:
            raise AssertionError(f"genuine_partial: the pieces on {[coords[i] for i in members]} add up to "
                                 f"{total}, not {want}")
