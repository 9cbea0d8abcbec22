"""``Linear`` and its tensor-parallel forms, and ``Identity``.

``Linear(in, out, bias, device, dtype, device_mesh, *, tp_dim="tp", tp_shard_type=None)`` keeps its
weights Replicate on every mesh dim except ``tp_dim``, where ``tp_shard_type`` decides:

==========  =====================  ======================  ==========================
shard type  weight [out, in]       bias [out]              input -> output on tp_dim
==========  =====================  ======================  ==========================
None        Replicate              Replicate               the input's placement rules
"col"       Shard(0)               Shard(0)                Replicate -> Shard(-1)
"row"       Shard(1)               Partial (added once)    Shard(-1) -> Partial
==========  =====================  ======================  ==========================

A mesh without ``tp_dim``, or where it has size 1, shards nothing. The named forms fix the shard
type and lay out the input and output in ``redistribute_input`` / ``redistribute_output``:

>>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
>>> up = nn.ColumnParallelLinear(64, 256, device_mesh=mesh)                # R -> S(-1)
>>> down = nn.RowParallelLinearWithReplicateOutput(256, 64, device_mesh=mesh)  # S(-1) -> R
>>> y = down(nn.functional.silu(up(dtorch.randn(8, 64, device_mesh=mesh))))
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch

from ... import _C
from ...distributed_spec import DeviceMesh, Partial, Replicate, Shard
from .. import functional as F
from ._common import _check_sizes, _placements, _tp_index, _uniform, _where, _with_on
from .module import Module

__all__ = [
    "Identity", "Linear", "ColumnParallelLinear", "ColumnParallelLinearWithReplicateOutput",
    "ColumnParallelLinearWithReplicateInputOutput", "RowParallelLinear", "RowParallelLinearWithReplicateOutput",
    "ReplicateParallelLinear",
]

_SHARD_TYPES = (None, "col", "row")


class Identity(Module):
    """Returns its input (arguments are accepted and ignored, as in torch).

    >>> nn.Identity()(x) is x
    True
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` [out_features, in_features], torch's initialisation
    (U(-1/sqrt(in), 1/sqrt(in)) for both) and torch's state_dict keys.

    ``tp_shard_type`` ("col", "row" or None) shards the weights on the mesh dim named ``tp_dim``
    (see the module's table). ``device`` (a one-device mesh) or ``device_mesh``, ``dtype`` and ``graph``
    default to the graph's guards.

    >>> fc = nn.Linear(16, 32, device_mesh=mesh)
    >>> col = nn.Linear(16, 32, device_mesh=mesh, tp_shard_type="col")   # weight Shard(0) on "tp"
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Optional[torch.dtype] = None, device_mesh: Optional[DeviceMesh] = None, *,
                 tp_dim: Optional[str] = "tp", tp_shard_type: Optional[str] = None, graph: Any = None) -> None:
        super().__init__()
        if tp_shard_type not in _SHARD_TYPES:
            raise ValueError(f"Linear(tp_shard_type=...): expected None, 'col' or 'row', got {tp_shard_type!r}")
        _check_sizes((out_features, in_features))
        self.in_features, self.out_features = in_features, out_features
        self.tp_dim, self.tp_shard_type = tp_dim, tp_shard_type
        w = _where(device, device_mesh, dtype, graph)
        # The tensor-parallel mesh dim (None: nothing to shard); the forms' hooks use it.
        self._tp = _tp_index(w.mesh, tp_dim) if tp_shard_type is not None else None
        on_w, on_b = {None: (Replicate(), Replicate()), "col": (Shard(0), Shard(0)),
                      "row": (Shard(1), Partial())}[tp_shard_type]
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        self.weight = _uniform((out_features, in_features), bound, w, _placements(w.mesh, self._tp, on_w))
        if bias:
            self.bias = _uniform((out_features,), bound, w, _placements(w.mesh, self._tp, on_b))
        else:
            self.register_parameter("bias", None)

    def forward(self, input: Any) -> Any:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        s = f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        if self._tp is not None:
            s += f", tp_dim={self.tp_dim!r}, tp_shard_type={self.tp_shard_type!r}"
        return s

    # ------------------------------------------------------------ the forms' input checks

    def _require_on_tp(self, input: Any, want: str) -> None:
        """Raises PlacementError unless ``input`` is ``want`` ("R" or "S(-1)") on the tp mesh dim."""
        if self._tp is None or not isinstance(input, _C.TensorBase):
            return
        p = input.placements[self._tp]
        ok = p.is_replicate() if want == "R" else p.is_shard() and p.dim in (-1, input.ndim - 1)
        if ok:
            return
        fix = list(input.placements)
        fix[self._tp] = Replicate() if want == "R" else Shard(-1)
        raise _C.PlacementError(
            f"{type(self).__name__}: the input must be {'Replicate()' if want == 'R' else 'Shard(-1)'} on mesh "
            f"dim {self.tp_dim!r} (index {self._tp}), got placements {list(input.placements)}; call "
            f"x.redistribute(placements={fix}) first")


class ColumnParallelLinear(Linear):
    """``Linear(tp_shard_type="col")``: weight and bias Shard(0) on ``tp_dim``; the input must be
    Replicate there and the output is Shard(-1) there.

    >>> up = nn.ColumnParallelLinear(64, 256, device_mesh=mesh)
    >>> up(dtorch.randn(8, 64, device_mesh=mesh)).placements
    [Shard(dim=1)]
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Optional[torch.dtype] = None, device_mesh: Optional[DeviceMesh] = None, *,
                 tp_dim: Optional[str] = "tp", graph: Any = None) -> None:
        super().__init__(in_features, out_features, bias, device, dtype, device_mesh, tp_dim=tp_dim,
                         tp_shard_type="col", graph=graph)

    def redistribute_input(self, input: Any, *args: Any, **kwargs: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        self._require_on_tp(input, "R")
        return (input,) + args, kwargs


class ColumnParallelLinearWithReplicateOutput(ColumnParallelLinear):
    """``ColumnParallelLinear`` whose Shard(-1) output is all-gathered to Replicate on ``tp_dim``.

    >>> nn.ColumnParallelLinearWithReplicateOutput(64, 256, device_mesh=mesh)(x).placements
    [Replicate()]
    """

    def redistribute_output(self, output: Any) -> Any:
        return _with_on(output, self._tp, Replicate())


class ColumnParallelLinearWithReplicateInputOutput(ColumnParallelLinearWithReplicateOutput):
    """``ColumnParallelLinearWithReplicateOutput`` that first makes any input Replicate on ``tp_dim``
    (all-gather of a Shard, all-reduce of a Partial).

    >>> x = dtorch.randn(8, 64, device_mesh=mesh, placements=[dtorch.Shard(0)])
    >>> nn.ColumnParallelLinearWithReplicateInputOutput(64, 256, device_mesh=mesh)(x).placements
    [Replicate()]
    """

    def redistribute_input(self, input: Any, *args: Any, **kwargs: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        if isinstance(input, _C.TensorBase):
            input = _with_on(input, self._tp, Replicate())
        return (input,) + args, kwargs


class RowParallelLinear(Linear):
    """``Linear(tp_shard_type="row")``: weight Shard(1) and bias Partial on ``tp_dim``; the input is
    Shard(-1) there (a Replicate input is sliced locally, without communication) and the output is
    Partial there (the bias is added once).

    >>> down = nn.RowParallelLinear(256, 64, device_mesh=mesh)
    >>> down(up(x)).placements
    [Partial()]
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Optional[torch.dtype] = None, device_mesh: Optional[DeviceMesh] = None, *,
                 tp_dim: Optional[str] = "tp", graph: Any = None) -> None:
        super().__init__(in_features, out_features, bias, device, dtype, device_mesh, tp_dim=tp_dim,
                         tp_shard_type="row", graph=graph)

    def redistribute_input(self, input: Any, *args: Any, **kwargs: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        if self._tp is not None and isinstance(input, _C.TensorBase) and input.placements[self._tp].is_replicate():
            input = _with_on(input, self._tp, Shard(input.ndim - 1))  # R -> S is a local slice
        self._require_on_tp(input, "S(-1)")
        return (input,) + args, kwargs


class RowParallelLinearWithReplicateOutput(RowParallelLinear):
    """``RowParallelLinear`` whose Partial output is all-reduced to Replicate on ``tp_dim``.

    >>> nn.RowParallelLinearWithReplicateOutput(256, 64, device_mesh=mesh)(up(x)).placements
    [Replicate()]
    """

    def redistribute_output(self, output: Any) -> Any:
        return _with_on(output, self._tp, Replicate())


class ReplicateParallelLinear(Linear):
    """``Linear(tp_shard_type=None)`` under the tensor-parallel family's naming: weight and bias
    Replicate on every mesh dim, including ``tp_dim``; the input's placements pass through
    ``F.linear``'s rules (a Replicate input gives a Replicate output).

    >>> nn.ReplicateParallelLinear(64, 8, device_mesh=mesh)(x).placements
    [Replicate()]
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Optional[torch.dtype] = None, device_mesh: Optional[DeviceMesh] = None, *,
                 tp_dim: Optional[str] = "tp", graph: Any = None) -> None:
        super().__init__(in_features, out_features, bias, device, dtype, device_mesh, tp_dim=tp_dim,
                         tp_shard_type=None, graph=graph)
