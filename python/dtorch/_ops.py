"""Module-level arithmetic mirroring torch: ``dtorch.add(x, y)`` is ``x + y``, and so on.
(``dtorch.sum`` is the reductions family's, ``dtorch.matmul``/``mm`` the linear-algebra family's.)

>>> z = dtorch.add(dtorch.ones(2, 3), 1, alpha=2)
"""

from __future__ import annotations

from typing import Optional

from . import _C

__all__ = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "neg", "negative"]

_Tensor = _C.TensorBase


def _check(name: str, input) -> None:
    if not isinstance(input, _Tensor):
        raise TypeError(f"{name}(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")


def add(input, other, *, alpha=1):
    """``input + alpha * other`` (either operand may be a Python number)."""
    return _C.ew_binary(_C.BINARY_ADD, input, other, alpha)


def sub(input, other, *, alpha=1):
    """``input - alpha * other`` (either operand may be a Python number)."""
    return _C.ew_binary(_C.BINARY_SUB, input, other, alpha)


def mul(input, other):
    """``input * other``."""
    return _C.ew_binary(_C.BINARY_MUL, input, other)


def div(input, other, *, rounding_mode: Optional[str] = None):
    """``input / other``: true division (integers divide to the default float dtype), or with
    ``rounding_mode`` "trunc" / "floor" rounded in the promoted dtype."""
    return _C.ew_binary(_C.BINARY_DIV, input, other, None, rounding_mode)


subtract, multiply, divide, true_divide = sub, mul, div, div


def neg(input):
    """``-input``."""
    _check("neg", input)
    return input.neg()


negative = neg
