"""Matrix products mirroring torch: ``matmul`` (every rank, ``@``), ``mm``, ``bmm``, ``outer``, ``einsum``.

>>> y = x @ w                                   # batched, broadcasting batch dims
>>> z = dtorch.einsum("bij,bjk->bik", a, b)     # one or two operands
>>> o = dtorch.outer(u, v)

Placements follow the index each dim carries: a Shard of a dim the output keeps
stays a Shard, a Shard of the contracted dim gives Partial (docs/operators.md).
``dtorch.nn.functional.linear`` is in ``dtorch.nn``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _C

if TYPE_CHECKING:  # the class is built from the method table (_methods.py), after this module
    from ._tensor import Tensor

__all__ = ["matmul", "mm", "bmm", "outer", "ger", "einsum"]


def matmul(input: Tensor, other: Tensor) -> Tensor:
    """``input @ other`` with torch.matmul's rules for every rank."""
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"matmul(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")
    return input.matmul(other)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """Matrix product of two 2-D tensors."""
    return _C._linalg(_C.LINALG_MM, input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product: ``[B, M, K] @ [B, K, N]``."""
    return _C._linalg(_C.LINALG_BMM, input, mat2)


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """Outer product of two 1-D tensors (types promote as in torch)."""
    return _C._linalg(_C.LINALG_OUTER, input, vec2)


ger = outer


def einsum(equation: str, *operands) -> Tensor:
    """``einsum(equation, a[, b])`` or ``einsum(equation, [a, b])``: torch.einsum on one or two operands."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return _C._einsum(equation, operands)

