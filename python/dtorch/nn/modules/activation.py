"""Activation modules: torch.nn's, each a call of its ``dtorch.nn.functional`` op (shards pass through).

>>> act = nn.Sequential(nn.LeakyReLU(0.2), nn.ELU(alpha=0.5), nn.Softmax(dim=-1))
>>> y = act(dtorch.randn(4, 8, device_mesh=mesh, placements=[dtorch.Shard(0)]))
"""

from __future__ import annotations

from typing import Any, Optional

from .. import functional as F
from .module import Module

__all__ = ["ReLU", "Sigmoid", "LeakyReLU", "ELU", "SiLU", "GELU", "Tanh", "Softmax", "LogSoftmax"]


class _InplaceActivation(Module):
    """An activation module with torch's ``inplace`` flag; subclasses name the function."""

    _fn = None  # the F.* function, set by each subclass

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Any) -> Any:
        return self._fn(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_InplaceActivation):
    """``F.relu``: ``max(input, 0)``.

    >>> nn.ReLU()(dtorch.tensor([-1.0, 2.0]))   # tensor([0., 2.])
    """

    _fn = staticmethod(F.relu)


class SiLU(_InplaceActivation):
    """``F.silu``: ``input * sigmoid(input)``.

    >>> nn.SiLU()(x)
    """

    _fn = staticmethod(F.silu)


class LeakyReLU(Module):
    """``F.leaky_relu``: ``max(input, 0) + negative_slope * min(input, 0)``.

    >>> nn.LeakyReLU(0.2)(x)
    """

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Any) -> Any:
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``F.elu``: ``input`` where positive, ``alpha * (exp(input) - 1)`` elsewhere.

    >>> nn.ELU(alpha=0.5)(x)
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Any) -> Any:
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class GELU(Module):
    """``F.gelu(approximate=...)``.

    >>> nn.GELU(approximate="tanh")(x)
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Any) -> Any:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    """``F.sigmoid``.

    >>> nn.Sigmoid()(x)
    """

    def forward(self, input: Any) -> Any:
        return F.sigmoid(input)


class Tanh(Module):
    """``F.tanh``.

    >>> nn.Tanh()(x)
    """

    def forward(self, input: Any) -> Any:
        return F.tanh(input)


class Softmax(Module):
    """``F.softmax(dim=...)``; the softmax dim must not be sharded.

    >>> nn.Softmax(dim=-1)(x)
    """

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``F.log_softmax(dim=...)``; the dim must not be sharded.

    >>> nn.LogSoftmax(dim=1)(x)
    """

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.log_softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
