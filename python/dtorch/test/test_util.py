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

__all__ = ["assert_tensor_equal", "assert_tensor_allclose", "gen_arg_list", "is_graph_satisfy"]


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
