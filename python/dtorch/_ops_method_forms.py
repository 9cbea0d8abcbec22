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

from . import _C

__all__ = [
    "abs_", "ceil_", "clamp_", "clamp_max", "clamp_min", "clip_", "cos_", "detach", "detach_", "erf_", "erfc_", "exp2_",
    "exp_", "expm1_", "asin_", "acos_", "atan_", "tan_", "sinh_", "cosh_", "floor_", "is_floating_point", "log10_", "log1p_", "log2_", "log_", "neg_", "numel",
    "reciprocal_", "round_", "rsqrt_", "sigmoid_", "sin_", "sqrt_", "square_", "t", "tanh_", "trunc_",
]


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
