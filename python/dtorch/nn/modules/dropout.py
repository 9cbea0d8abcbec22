"""``Dropout``: ``F.dropout`` while training, the identity in eval mode (a module's default).

>>> drop = nn.Dropout(0.1)
>>> drop(x) is x                  # modules start in eval mode
True
>>> y = drop.train()(x)           # zeroes with probability 0.1, scales the rest by 1 / 0.9
"""

from __future__ import annotations

from typing import Any

from .. import functional as F
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """``F.dropout(input, p, self.training, inplace)``; placement-invariant masks from
    ``dtorch.manual_seed``.

    >>> nn.Dropout(p=0.5).train()(x)
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Any) -> Any:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
