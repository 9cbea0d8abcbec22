"""``Flatten``: ``input.flatten(start_dim, end_dim)`` as a module (dims from 1 by default, keeping
the batch dim).

>>> nn.Flatten()(dtorch.zeros(2, 3, 4, 5)).shape
torch.Size([2, 60])
"""

from __future__ import annotations

from typing import Any

from .module import Module

__all__ = ["Flatten"]


class Flatten(Module):
    """Flattens the dims ``start_dim`` to ``end_dim`` into one, as ``torch.nn.Flatten``; a sharded dim
    follows the flatten view's rules.

    >>> nn.Flatten(0, 1)(dtorch.zeros(2, 3, 4)).shape
    torch.Size([6, 4])
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Any) -> Any:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
