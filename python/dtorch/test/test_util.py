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

import itertools
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .._C import TensorBase

__all__ = ["assert_tensor_equal", "assert_tensor_allclose", "gen_arg_list", "is_graph_satisfy", "local_values",
           "assert_replicas_equal"]


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
    from .._graph import Graph, _resolve

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
    return [t._local_value(i) for i in range(t.device_mesh.mesh.numel())]


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
    msg = _replica_mismatch(tuple(t.device_mesh.shape), list(t.placements), local_values(t))
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
