"""``masked_scatter``: torch.masked_scatter and Tensor.masked_scatter / masked_scatter_ on distributed tensors.

The k-th True position of ``mask`` (broadcast with ``input``, row-major order) takes
``source.flatten()[k]``; the rest is ``input``. Which source elements a block of the result takes depends
on how many True elements precede it, so every device reads the whole mask: the mask must be
``Replicate()`` and the source ``Replicate()`` or ``Partial()``, while ``input`` may be sharded on any dim
that does not broadcast, replicated or ``Partial()`` (docs/decisions.md, "masked_scatter reads the whole
mask"). Anything else is a ``dtorch.PlacementError`` naming the ``redistribute()`` that fixes it.

>>> x = dtorch.zeros(4, 6, device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> m = dtorch.from_torch(torch.rand(4, 6) > 0.5, mesh)        # Replicate
>>> y = x.masked_scatter(m, dtorch.arange(24.0, device_mesh=mesh))  # Shard(0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _C

if TYPE_CHECKING:  # the class is built from the method table (_methods.py), after this module
    from ._tensor import Tensor

__all__ = ["masked_scatter"]


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``torch.masked_scatter(input, mask, source)``: a new tensor of the broadcast shape of input and mask.

    >>> dtorch.masked_scatter(x, x > 0, src)
    """
    return _C._v_masked_scatter(input, mask, source, False)


def _masked_scatter(self: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``x.masked_scatter(mask, source)``: see ``dtorch.masked_scatter``."""
    return _C._v_masked_scatter(self, mask, source, False)


def _masked_scatter_(self: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``x.masked_scatter_(mask, source)``: the mask must broadcast to x's shape; x is rebound to the result
    (dtorch values are immutable) and returned."""
    return _C._rebind(self, _C._v_masked_scatter(self, mask, source, True))


_masked_scatter.__name__ = "masked_scatter"
_masked_scatter_.__name__ = "masked_scatter_"
