"""``dtorch.nn.functional.linear`` and the fused ``_silu_linear_chunk`` (the linear algebra family's
part of nn.functional: a module's weight is a ``Parameter``, which this module can import and the nn
family's ``dtorch._ops_nn`` cannot, see its docstring).

>>> # column parallel: weight Shard(0) -> output Shard(-1)
>>> y = F.linear(x, w_col, b_col)
>>> # row parallel: input Shard(-1), weight Shard(1) -> output Partial
>>> z = F.linear(y, w_row)
"""

from __future__ import annotations

from typing import Optional

from .. import _C
from .._ops_nn import silu
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


def _silu_linear_chunk(input, weight, bias=None):
    """SwiGLU with a fused gate/up projection: ``a, b = linear(input, weight, bias).chunk(2, dim=-1)``,
    then ``silu(a) * b``; equal to that composition in torch. ``weight`` is [2 * hidden, in] with the
    gate rows first; the output's last dim must not be sharded.

    >>> h = F._silu_linear_chunk(x, w_gate_up)
    """
    a, b = linear(input, weight, bias).chunk(2, dim=-1)
    return silu(a) * b
