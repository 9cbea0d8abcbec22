"""Elementwise ops as module functions, mirroring torch: ``dtorch.exp(x)``, ``dtorch.where(c, x, 0.0)``, ...

The Tensor methods (``x.exp()``, ``x.clamp(min=0)``, ``x.add_(y, alpha=2)``, the
operators ``< <= > >= == != // % ** & | ^ ~ abs()``) live in C
(``python/_C/ops_elementwise.c``); this module adds the functions and the Python methods
``Tensor.to``, ``Tensor.type_as`` and ``Tensor.equal`` (made methods by ``_methods.py``).

>>> import dtorch
>>> x = dtorch.arange(6.0)
>>> y = dtorch.where(x > 2, x, 0.0).exp()
>>> bool(dtorch.equal(y, y))
True

In-place forms (``x.add_(1)``, ``x += 1``) rebind ``x`` to the new value: see
docs/decisions.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import torch

from . import _C

if TYPE_CHECKING:  # the class is built from the method table (_methods.py), after this module
    from ._tensor import Tensor
from .distributed_spec import DeviceMesh

_Tensor = _C.TensorBase
Number = Union[bool, int, float]
Operand = Union["Tensor", Number]

# The function forms generated from include/dtorch/dtorch_ops.def's rows (those with a registry row
# and generated methods): {torch name: op code}.
_UNARY = tuple(_C.UNARY_FUNCTIONS)
_UNARY_ALIASES = {"absolute": "abs", "fix": "trunc", "negative": "neg"}
_BINARY = dict(_C.BINARY_FUNCTIONS)
_BINARY_ALIASES = {"greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le", "not_equal": "ne",
                   "multiply": "mul"}

__all__ = sorted(
    set(_UNARY) | set(_UNARY_ALIASES) | set(_BINARY) | set(_BINARY_ALIASES)
    | {"add", "sub", "subtract", "div", "divide", "true_divide", "pow", "round", "where", "masked_fill", "clamp",
       "clip", "equal"}
)


def _check(name: str, input) -> None:
    if not isinstance(input, _Tensor):
        raise TypeError(f"{name}(): argument 'input' must be a dtorch.Tensor, not {type(input).__name__}")


def _make_unary(name: str, method: str):
    def op(input: Tensor) -> Tensor:
        _check(name, input)
        return getattr(input, method)()

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"``torch.{method}`` elementwise; keeps Replicate and Shard placements.\n\n"
                  f">>> dtorch.{name}(dtorch.ones(2, 3))")
    return op


def _make_binary(name: str, op_name: str):
    code = _BINARY[op_name]

    def op(input: Operand, other: Operand) -> Tensor:
        return _C.ew_binary(code, input, other)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"``torch.{op_name}(input, other)`` with broadcasting and torch's type promotion; either "
                  f"operand may be a Python number.\n\n>>> dtorch.{name}(dtorch.ones(2, 3), 1)")
    return op


for _name in _UNARY:
    globals()[_name] = _make_unary(_name, _name)
for _name, _target in _UNARY_ALIASES.items():
    globals()[_name] = _make_unary(_name, _target)
for _name in _BINARY:
    globals()[_name] = _make_binary(_name, _name)
for _name, _target in _BINARY_ALIASES.items():
    globals()[_name] = _make_binary(_name, _target)


def add(input: Operand, other: Operand, *, alpha: Number = 1) -> Tensor:
    """``input + alpha * other`` (either operand may be a Python number).

    >>> z = dtorch.add(dtorch.ones(2, 3), 1, alpha=2)
    """
    return _C.ew_binary(_C.BINARY_ADD, input, other, alpha)


def sub(input: Operand, other: Operand, *, alpha: Number = 1) -> Tensor:
    """``input - alpha * other`` (either operand may be a Python number).

    >>> z = dtorch.sub(dtorch.ones(2, 3), 1, alpha=2)
    """
    return _C.ew_binary(_C.BINARY_SUB, input, other, alpha)


def div(input: Operand, other: Operand, *, rounding_mode: Optional[str] = None) -> Tensor:
    """``input / other``: true division (integers divide to the default float dtype), or with
    ``rounding_mode`` "trunc" / "floor" rounded in the promoted dtype.

    >>> z = dtorch.div(dtorch.arange(6), 4, rounding_mode="floor")
    """
    return _C.ew_binary(_C.BINARY_DIV, input, other, None, rounding_mode)


subtract, divide, true_divide = sub, div, div


def pow(input: Operand, exponent: Operand) -> Tensor:  # noqa: A001 - torch's name
    """``input ** exponent``; either may be a Python number.

    >>> dtorch.pow(dtorch.full((2,), 3.0), 2)
    """
    return _C.ew_binary(_C.BINARY_POW, input, exponent)


def round(input: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001 - torch's name
    """Round half to even, to ``decimals`` decimal places.

    >>> dtorch.round(dtorch.full((2,), 2.5))
    """
    _check("round", input)
    return input.round(decimals=decimals)


def where(condition: Tensor, input: Optional[Operand] = None, other: Optional[Operand] = None) -> Tensor:
    """``input`` where ``condition`` is True, else ``other``; ``input``/``other`` may be Python numbers.

    >>> dtorch.where(x > 0, x, 0.0)
    """
    if input is None and other is None:
        raise NotImplementedError("where(condition) is nonzero(condition, as_tuple=True): not supported by "
                                  "dtorch.where; use nonzero")
    if input is None or other is None:
        raise TypeError("where(): expected condition, input and other")
    return _C.ew_where(condition, input, other)


def masked_fill(input: Tensor, mask: Tensor, value: Union[Tensor, Number]) -> Tensor:
    """``value`` where ``mask`` is True (``mask`` is bool and broadcasts; ``value`` a number or a 0-d tensor).

    >>> dtorch.masked_fill(x, x < 0, 0.0)
    """
    _check("masked_fill", input)
    return input.masked_fill(mask, value)


def clamp(input: Tensor, min: Optional[Operand] = None, max: Optional[Operand] = None) -> Tensor:  # noqa: A002
    """Clamps into ``[min, max]`` (numbers or tensors; at least one given).

    >>> dtorch.clamp(x, min=0.0)
    """
    _check("clamp", input)
    return input.clamp(min, max)


clip = clamp


def equal(input: Tensor, other: Tensor) -> bool:
    """True when both have the same shape and equal values; reads a value, so it synchronises.

    Placements ``eq`` accepts are compared where they lie and only the boolean result is read;
    any other combination (Partial, shards on different dims) reads both values.

    >>> dtorch.equal(x, x)
    True
    """
    _check("equal", input)
    if not isinstance(other, _Tensor):
        raise TypeError(f"equal(): argument 'other' must be a dtorch.Tensor, not {type(other).__name__}")
    if input.shape != other.shape:
        return False
    try:
        same = input.eq(other)
    except _C.PlacementError:
        return torch.equal(input.to_torch(), other.to_torch())
    return bool(same.to_torch().all())


# ------------------------------------------------------------------ Tensor methods


def _to(self: Tensor, *args, **kwargs) -> Tensor:
    """``to(dtype)``, ``to(other)``, ``to(device=None, dtype=None, copy=False)``, ``to(device_mesh)``.

    A cast keeps Replicate and Shard placements and rejects Partial (PlacementError). ``to`` the
    tensor's own dtype, device and mesh returns the tensor itself (a new object with ``copy=True``).

    >>> y = x.to(torch.float16)
    """
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    device_mesh = kwargs.pop("device_mesh", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
    flags = []
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, _Tensor):
            dtype = a.dtype
            device_mesh = a.device_mesh
        elif isinstance(a, DeviceMesh):
            device_mesh = a
        elif isinstance(a, (str, torch.device)):
            device = a
        elif isinstance(a, bool):
            flags.append(a)  # non_blocking, copy (positional, as in torch)
        else:
            raise TypeError(f"to() received an invalid argument of type {type(a).__name__}")
    if len(flags) > 1:
        copy = flags[1]
    mesh = self.device_mesh
    if device is not None:
        dev = torch.device(device)
        first = mesh.first_device()
        if dev.type != first.type or (dev.index is not None and (mesh.size() != 1 or dev.index != first.index)):
            raise NotImplementedError(
                f"to({str(dev)!r}): moving a tensor to another device is not supported by to(); use "
                f"redistribute(device_mesh=...)")
    r = self
    if device_mesh is not None and device_mesh != mesh:
        if tuple(device_mesh.shape) != tuple(mesh.shape):
            raise ValueError(f"to(device_mesh): the mesh {device_mesh!r} has another shape than the tensor's "
                             f"{mesh!r}")
        r = r.redistribute(device_mesh=device_mesh, placements=r.placements)
    if dtype is not None:
        r = r._cast(dtype)
    if copy and r is self:
        r = self._alias()
    return r


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    """``self.to(other.dtype)``.

    >>> y = x.type_as(dtorch.ones(1, dtype=torch.float64))
    """
    if not isinstance(other, _Tensor):
        raise TypeError(f"type_as(): argument 'other' must be a dtorch.Tensor, not {type(other).__name__}")
    return self._cast(other.dtype)


def _equal(self: Tensor, other: Tensor) -> bool:
    """``dtorch.equal(self, other)``."""
    return equal(self, other)

