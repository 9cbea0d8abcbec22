"""``dtorch.nn.functional.linear`` (the linear algebra family's part of nn.functional).

>>> # column parallel: weight Shard(0) -> output Shard(-1)
>>> y = F.linear(x, w_col, b_col)
>>> # row parallel: input Shard(-1), weight Shard(1) -> output Partial
>>> z = F.linear(y, w_row)
"""

from __future__ import annotations

from typing import Optional

from .. import _C
from .._tensor import Tensor
from .parameter import Parameter

__all__ = ["linear"]


def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``input @ weight.T + bias`` with ``weight`` of shape ``[out_features, in_features]``.

    The bias follows the output's placement: Replicate (sliced locally), the
    output's Shard, and on a Partial output it is added once (a Replicate bias on
    the first coordinate of that mesh dim) or piecewise (a Partial bias).

    A ``Parameter`` weight (a module's) gets the product eager torch computes for a module, whose
    weights require grad: torch's matmul then folds an input of 3+ dims into one matrix product,
    where for a plain tensor it runs a batched product, and for a non-contiguous input the two can
    round apart (docs/decisions.md, "A module's linear").
    """
    return _C._linear(input, weight, bias, isinstance(weight, Parameter))
