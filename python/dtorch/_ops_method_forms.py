"""``dtorch.X(input, ...)`` for the Tensor methods whose torch function ``torch.X`` exists (the
original DTorch's naming rule): the in-place forms (``dtorch.exp_(x)``), ``numel``, ``t``,
``detach``, ``is_floating_point``, ``clamp_min``/``clamp_max``.

>>> x = dtorch.ones(2, 3)
>>> dtorch.numel(x), dtorch.t(x).shape
(6, torch.Size([3, 2]))
>>> dtorch.exp_(x) is x
True
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import _C

# The rule applied to _C.TensorBase's methods (_C.METHOD_NAMES): its in-place methods whose torch
# function exists (torch.exp_, but no torch.eq_), less relu_, which the nn family's torch forms give;
# then the other methods with a torch function that no family defines.
_ELSEWHERE = {"relu_"}
__all__ = sorted(
    {n for n in _C.METHOD_NAMES if n.endswith("_") and callable(getattr(torch, n, None))} - _ELSEWHERE
    | {"clamp_max", "clamp_min", "detach", "detach_", "is_floating_point", "numel", "t"}
)


def _method_form(name: str) -> Callable[..., Any]:
    def fn(input, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(input, _C.TensorBase):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be a dtorch.Tensor, not "
                            f"{type(input).__name__}")
        return getattr(input, name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``dtorch.{name}(input, ...)`` is ``input.{name}(...)`` (as ``torch.{name}``)."
    return fn


globals().update({_name: _method_form(_name) for _name in __all__})
