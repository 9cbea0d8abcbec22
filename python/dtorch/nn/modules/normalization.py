"""``LayerNorm``, ``RMSNorm`` and ``GroupNorm``: torch's signatures, initial values and state_dict keys,
with replicated affine parameters. The normalised dims of the input must not be sharded.

>>> norm = nn.LayerNorm(64, device_mesh=mesh)
>>> y = norm(dtorch.randn(8, 64, device_mesh=mesh, placements=[dtorch.Shard(0)]))   # Shard(0) stays
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...distributed_spec import DeviceMesh
from .. import functional as F
from ._common import _check_sizes, _const, _shape, _where
from .module import Module

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm"]

# torch's LayerNorm and GroupNorm show ``bias=`` in their repr (GroupNorm also takes it) in newer
# releases than the GPU machines' 2.11: the reprs follow the installed torch.
_TORCH_LAYERNORM_REPR_BIAS = "bias=" in repr(torch.nn.LayerNorm(1))
_TORCH_GROUPNORM_HAS_BIAS = "bias=" in repr(torch.nn.GroupNorm(1, 1))


def _affine(m: Module, shape: Any, affine: bool, bias: bool, where: Any) -> None:
    """torch's affine parameters of a norm: ``weight`` ones and ``bias`` zeros, or None."""
    m.register_parameter("weight", _const(shape, 1.0, where) if affine else None)
    m.register_parameter("bias", _const(shape, 0.0, where) if affine and bias else None)


class LayerNorm(Module):
    """``F.layer_norm`` over the trailing ``normalized_shape`` dims, with ``weight`` (ones) and ``bias``
    (zeros) replicated.

    >>> nn.LayerNorm((8,), eps=1e-6, bias=False, device_mesh=mesh)
    """

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: Optional[torch.dtype] = None, *,
                 device_mesh: Optional[DeviceMesh] = None, graph: Any = None) -> None:
        super().__init__()
        self.normalized_shape, self.eps, self.elementwise_affine = _shape(normalized_shape), eps, elementwise_affine
        _check_sizes(self.normalized_shape)
        _affine(self, self.normalized_shape, elementwise_affine, bias, _where(device, device_mesh, dtype, graph))

    def forward(self, input: Any) -> Any:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        bias = f", bias={self.bias is not None}" if _TORCH_LAYERNORM_REPR_BIAS else ""
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}{bias}"


class RMSNorm(Module):
    """``F.rms_norm`` with a replicated ``weight`` (ones); ``eps=None`` is torch's default (the
    epsilon of the computation dtype).

    >>> nn.RMSNorm(64, eps=1e-6, device_mesh=mesh)
    """

    def __init__(self, normalized_shape: Any, eps: Optional[float] = None, elementwise_affine: bool = True,
                 device: Any = None, dtype: Optional[torch.dtype] = None, *,
                 device_mesh: Optional[DeviceMesh] = None, graph: Any = None) -> None:
        super().__init__()
        self.normalized_shape, self.eps, self.elementwise_affine = _shape(normalized_shape), eps, elementwise_affine
        _check_sizes(self.normalized_shape)
        w = _where(device, device_mesh, dtype, graph)
        if elementwise_affine:
            self.weight = _const(self.normalized_shape, 1.0, w)
        else:
            self.register_parameter("weight", None)

    def forward(self, input: Any) -> Any:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """``F.group_norm`` with per-channel ``weight`` (ones) and ``bias`` (zeros) replicated; only the
    batch dim of the input may be sharded.

    >>> nn.GroupNorm(2, 8, device_mesh=mesh)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Optional[torch.dtype] = None, *, bias: bool = True,
                 device_mesh: Optional[DeviceMesh] = None, graph: Any = None) -> None:
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            _check_sizes((num_channels,))
        _affine(self, (num_channels,), affine, bias, _where(device, device_mesh, dtype, graph))

    def forward(self, input: Any) -> Any:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        bias = f", bias={self.bias is not None}" if _TORCH_GROUPNORM_HAS_BIAS else ""
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}{bias}"
