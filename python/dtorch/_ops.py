"""Module-level ops mirroring torch: ``dtorch.add(x, y)`` is ``x + y``, and so on.

>>> z = dtorch.matmul(dtorch.ones(2, 3), dtorch.ones(3, 4))
>>> s = dtorch.sum(z, dim=0, keepdim=True)
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from . import _C

__all__ = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "neg", "negative",
           "matmul", "mm", "sum"]

_Tensor = _C.TensorBase


def _check(name: str, input) -> None:
    if not isinstance(input, _Tensor):
        raise TypeError(f"{name}(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")


def add(input, other, *, alpha=1):
    """``input + alpha * other`` (either operand may be a Python number)."""
    return _C.ew_binary("add", input, other, alpha)


def sub(input, other, *, alpha=1):
    """``input - alpha * other`` (either operand may be a Python number)."""
    return _C.ew_binary("sub", input, other, alpha)


def mul(input, other):
    """``input * other``."""
    return _C.ew_binary("mul", input, other)


def div(input, other, *, rounding_mode: Optional[str] = None):
    """``input / other``: true division (integers divide to the default float dtype), or with
    ``rounding_mode`` "trunc" / "floor" rounded in the promoted dtype."""
    return _C.ew_binary("div", input, other, None, rounding_mode)


subtract, multiply, divide, true_divide = sub, mul, div, div


def neg(input):
    """``-input``."""
    _check("neg", input)
    return input.neg()


negative = neg


def matmul(input, other):
    """``input @ other`` for 2-D tensors."""
    _check("matmul", input)
    return input.matmul(other)


mm = matmul


def sum(input, dim: Union[None, int, Sequence[int]] = None, keepdim: bool = False):  # noqa: A001 - torch's name
    """Sum over ``dim`` (all dims when None). Integers and bools sum to int64."""
    _check("sum", input)
    return input.sum(dim, keepdim)
