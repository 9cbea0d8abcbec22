"""``Conv2d`` with torch's signature, initialisation and state_dict keys.

The weight [out, in/groups, kH, kW] and bias [out] are replicated; with ``tp_dim`` naming a mesh
dim (off by default) the output channels are sharded there (weight and bias ``Shard(0)``), and so
is the output's channel dim. Batch shards of the input pass through.

>>> conv = nn.Conv2d(3, 16, 3, padding=1, device_mesh=mesh)
>>> y = conv(dtorch.randn(4, 3, 32, 32, device_mesh=mesh, placements=[dtorch.Shard(0)]))
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple

import torch

from ...distributed_spec import DeviceMesh, Shard
from .. import functional as F
from ._common import _check_sizes, _placements, _tp_index, _uniform, _where
from .module import Module

__all__ = ["Conv2d"]


def _pair(v: Any) -> Tuple[int, int]:
    if isinstance(v, numbers.Integral):
        return (int(v), int(v))
    v = tuple(int(x) for x in v)
    return v if len(v) == 2 else (v[0], v[0])


class Conv2d(Module):
    """``F.conv2d`` as ``torch.nn.Conv2d``; ``padding_mode`` other than "zeros" pads with ``F.pad``
    first, as torch does.

    >>> conv = nn.Conv2d(8, 8, 3, padding="same", groups=2, padding_mode="reflect", device_mesh=mesh)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Optional[torch.dtype] = None, *,
                 device_mesh: Optional[DeviceMesh] = None, tp_dim: Optional[str] = None, graph: Any = None) -> None:
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                             f"padding_mode='{padding_mode}'")
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in _pair(stride)):
                raise ValueError("padding='same' is not supported for strided convolutions")
            if padding_mode != "zeros":
                raise NotImplementedError("string padding with a non-zeros padding_mode is not supported")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _pair(kernel_size), _pair(stride), _pair(dilation)
        self.padding = padding if isinstance(padding, str) else _pair(padding)
        self.padding_mode = padding_mode
        self.tp_dim = tp_dim
        shape = (out_channels, in_channels // groups) + self.kernel_size
        _check_sizes(shape)
        w = _where(device, device_mesh, dtype, graph)
        self._tp = _tp_index(w.mesh, tp_dim) if groups == 1 else None
        pl = _placements(w.mesh, self._tp, Shard(0))
        fan_in = (in_channels // groups) * self.kernel_size[0] * self.kernel_size[1]
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        self.weight = _uniform(shape, bound, w, pl)
        if bias:
            self.bias = _uniform((out_channels,), bound, w, pl)
        else:
            self.register_parameter("bias", None)

    def forward(self, input: Any) -> Any:
        if self.padding_mode != "zeros":
            ph, pw = self.padding
            input = F.pad(input, (pw, pw, ph, ph), mode=self.padding_mode)
            return F.conv2d(input, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s
