"""torch functions on dtorch tensors: the table behind ``dtorch.Tensor.__torch_function__``.

torch calls ``__torch_function__`` of an argument's type whenever a torch function, a
``torch.Tensor`` method called through the class, or a ``torch.nn.functional`` function meets an
object that is not a ``torch.Tensor`` but has that attribute (a dtorch tensor, also inside a list
such as ``torch.cat([x, y])``). The table maps each such torch callable that dtorch implements to
dtorch's function of the same name, which takes torch's arguments with torch's meaning:

- ``torch.<name>`` to ``dtorch.<name>`` (``torch.matmul``, ``torch.cat``, ``torch.where``, ...);
- ``torch.nn.functional.<name>`` to ``dtorch.nn.functional.<name>``;
- ``torch.Tensor.<name>`` (``torch.Tensor.sum(x)``, ``torch.Tensor.__add__``) to
  ``dtorch.Tensor.<name>``.

Anything else is a TypeError that names the function and ``dtorch.local_map``, which runs any torch
code on each device's shard. The table is keyed by the torch callable itself (what torch passes as
``func``) and built on first use, after every family has been imported.

>>> import torch, dtorch
>>> x = dtorch.ones(2, 3, device_mesh=dtorch.DeviceMesh("cpu", [0, 1]), placements=[dtorch.Shard(0)])
>>> torch.nn.functional.gelu(torch.cat([x, x])).shape
torch.Size([4, 3])
"""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, Optional

import torch

__all__ = ["torch_function", "implemented"]

# torch.Tensor's dunders that are operators (x + y as torch.Tensor.__add__(x, y), ...); the other
# dunders (__new__, __init__, __repr__, __reduce_ex__, ...) are the object's protocol, not ops.
_OPERATOR_DUNDERS = frozenset(
    f"__{n}__" for n in (
        "add radd iadd sub rsub isub mul rmul imul truediv rtruediv itruediv floordiv rfloordiv ifloordiv "
        "mod rmod imod pow rpow ipow matmul rmatmul imatmul and rand iand or ror ior xor rxor ixor "
        "lshift rlshift ilshift rshift rrshift irshift neg pos abs invert eq ne lt le gt ge "
        "getitem setitem len iter bool float int index"
    ).split()
)

_TABLE: Optional[Dict[Any, Callable]] = None


def _add(table: Dict[Any, Callable], torch_fn: Any, dtorch_fn: Any) -> None:
    if not callable(torch_fn) or not callable(dtorch_fn) or isinstance(torch_fn, type):
        return  # classes (torch.Size, dtypes) and plain values are not functions
    try:
        table.setdefault(torch_fn, dtorch_fn)
    except TypeError:  # an unhashable callable cannot be a key (torch has none today)
        pass


def _build() -> Dict[Any, Callable]:
    import dtorch
    import dtorch.nn.functional as DF
    import torch.nn.functional as TF

    table: Dict[Any, Callable] = {}
    for name in DF.__all__:
        if hasattr(TF, name):
            _add(table, getattr(TF, name), getattr(DF, name))
    for name in dir(dtorch):  # every op family binds its functions here (dtorch/__init__.py)
        df = getattr(dtorch, name)
        if hasattr(torch, name) and not name.startswith("_") and not isinstance(df, types.ModuleType):
            _add(table, getattr(torch, name), df)
    for name in dir(dtorch.Tensor):
        if name.startswith("__") and name not in _OPERATOR_DUNDERS:
            continue
        if hasattr(torch.Tensor, name):
            _add(table, getattr(torch.Tensor, name), getattr(dtorch.Tensor, name))
    return table


def implemented() -> Dict[Any, Callable]:
    """The table: torch callable -> the dtorch callable that implements it (built once)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _build()
    return _TABLE


def _name(func: Any) -> str:
    """torch's public name of ``func`` (torch.cat, torch.nn.functional.gelu, torch.Tensor.sum, ...)."""
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", None) or name
    if mod.startswith("torch.nn.functional") or mod == "torch._C._nn":
        return f"torch.nn.functional.{name}"
    if qual.startswith(("TensorBase.", "Tensor.", "_TensorBase.")):
        return f"torch.Tensor.{name}"
    if mod.startswith("torch._C._") and mod != "torch._C._VariableFunctions":  # torch.fft.fft is _fft.fft_fft
        sub = mod[len("torch._C._"):]
        return f"torch.{sub}.{name[len(sub) + 1:] if name.startswith(sub + '_') else name}"
    if mod.startswith("torch.") and mod not in ("torch.functional", "torch._C", "torch._C._VariableFunctions"):
        return f"{mod}.{name}"
    return f"torch.{name}"


def torch_function(func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    """What ``dtorch.Tensor.__torch_function__`` does: call dtorch's implementation of ``func`` with
    the same positional and keyword arguments, or raise TypeError naming ``dtorch.local_map``."""
    impl = implemented().get(func)
    if impl is None:
        raise TypeError(
            f"{_name(func)}: dtorch does not implement this torch function, so it does not take dtorch tensors; "
            f"run it on each device's local shard with dtorch.local_map(fn, out_placements, in_placements), "
            f"or read the value with .to_torch()"
        )
    return impl(*args, **(kwargs or {}))
