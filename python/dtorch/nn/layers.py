"""dtorch's layers: torch.nn's layers with parameters laid out on a device mesh.

Every layer takes ``device_mesh`` (default: the graph's default mesh, else one CPU device) and
``dtype``; parameter names and shapes are torch's, so ``load_state_dict(torch_model.state_dict())``
works. Tensor-parallel layers shard their parameters on the mesh dim named ``tp_dim`` ("tp"); a mesh
without it, or where it has size 1, means no sharding. Initial values are random (placement-invariant,
from ``dtorch.manual_seed``) with torch's distributions; load a state dict for torch's exact values.

>>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
>>> emb = nn.Embedding(1000, 64, device_mesh=mesh)          # vocab-sharded: output Partial on "tp"
>>> emb = nn.EmbeddingWithReplicateOutput(1000, 64, device_mesh=mesh)
"""

from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Tuple

import torch

from .. import _factories
from ..distributed_spec import DeviceMesh, Partial, Placement, Replicate, Shard
from . import functional as F
from .module import Module, Parameter

__all__ = [
    "Identity", "Linear", "ColumnParallelLinear", "RowParallelLinear", "ColumnParallelLinearWithReplicateOutput",
    "RowParallelLinearWithReplicateOutput", "Embedding", "EmbeddingWithReplicateOutput", "LayerNorm", "RMSNorm",
    "GroupNorm", "Conv2d", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh", "Softmax", "Dropout",
]


# ---------------------------------------------------------------- parameter helpers


def _mesh(device_mesh: Optional[DeviceMesh]) -> DeviceMesh:
    return _factories._mesh(_factories._graph(None), None, device_mesh)


def _tp_index(mesh: DeviceMesh, tp_dim: Optional[str]) -> Optional[int]:
    """The index of the tensor-parallel mesh dim, or None when there is none to shard over."""
    if tp_dim is None or not mesh.has_dim_name(tp_dim):
        return None
    i = mesh.dim_name_index(tp_dim)
    return i if mesh.size(i) > 1 else None


def _placements(mesh: DeviceMesh, tp: Optional[int], on_tp: Placement) -> List[Placement]:
    return [on_tp if i == tp else Replicate() for i in range(mesh.ndim)]


def _uniform(shape, bound: float, mesh, placements, dtype) -> Parameter:
    """U(-bound, bound), as torch's kaiming/uniform initialisers draw. A Partial placement (a bias
    added once to partial sums) is drawn Replicate, then kept on the first coordinate."""
    whole = [Replicate() if p.is_partial() else p for p in placements]
    t = _factories.rand(*shape, dtype=dtype, device_mesh=mesh, placements=whole)
    t = t * (2 * bound) - bound
    if whole != list(placements):
        t = t.redistribute(placements=placements)
    return Parameter(t)


def _const(shape, value: float, mesh, placements, dtype) -> Parameter:
    return Parameter(_factories.full(tuple(shape), value, dtype=dtype, device_mesh=mesh, placements=placements))


def _replicate_on(t, tp: Optional[int]):
    """``t`` with the tensor-parallel mesh dim made Replicate (a collective when it is not)."""
    if tp is None or t.placements[tp].is_replicate():
        return t
    pl = list(t.placements)
    pl[tp] = Replicate()
    return t.redistribute(placements=pl)


def _dtype(dtype: Optional[torch.dtype]) -> torch.dtype:
    return dtype if dtype is not None else torch.get_default_dtype()


# ---------------------------------------------------------------- simple layers


class Identity(Module):
    """Returns its input."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input):
        return input


class _InplaceActivation(Module):
    """An activation module with torch's ``inplace`` flag; subclasses name the function."""

    _fn = None  # the F.* function, set by each subclass

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return self._fn(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_InplaceActivation):
    """``F.relu``."""

    _fn = staticmethod(F.relu)


class SiLU(_InplaceActivation):
    """``F.silu``."""

    _fn = staticmethod(F.silu)


class GELU(Module):
    """``F.gelu(approximate=...)``."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    """``F.sigmoid``."""

    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    """``F.tanh``."""

    def forward(self, input):
        return F.tanh(input)


class Softmax(Module):
    """``F.softmax(dim=...)``."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Dropout(Module):
    """``F.dropout`` while training, the identity after ``eval()``."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


# ---------------------------------------------------------------- linear layers


def _linear():
    linear = getattr(F, "linear", None)
    if linear is None:
        raise NotImplementedError("dtorch.nn.functional.linear is not available in this build (it comes with the "
                                  "linear-algebra operators)")
    return linear


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` [out_features, in_features], replicated.

    >>> fc = nn.Linear(16, 32, device_mesh=mesh)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device_mesh: Optional[DeviceMesh] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        mesh, dtype = _mesh(device_mesh), _dtype(dtype)
        pl = self._weight_placements(mesh)
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        self.weight = _uniform((out_features, in_features), bound, mesh, pl[0], dtype)
        if bias:
            self.bias = _uniform((out_features,), bound, mesh, pl[1], dtype)
        else:
            self.register_parameter("bias", None)

    def _weight_placements(self, mesh):
        r = [Replicate()] * mesh.ndim
        return r, r

    def forward(self, input):
        return _linear()(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class ColumnParallelLinear(Linear):
    """Linear with ``weight`` Shard(0) (and ``bias`` Shard(0)) on ``tp_dim``: a Replicate input gives an
    output sharded on its last dim (``Shard(-1)``) there."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device_mesh: Optional[DeviceMesh] = None,
                 tp_dim: str = "tp", dtype: Optional[torch.dtype] = None) -> None:
        self.tp_dim = tp_dim
        super().__init__(in_features, out_features, bias, device_mesh, dtype)

    def _weight_placements(self, mesh):
        self._tp = _tp_index(mesh, self.tp_dim)
        return _placements(mesh, self._tp, Shard(0)), _placements(mesh, self._tp, Shard(0))

    def forward(self, input):
        y = _linear()(input, self.weight)
        return y if self.bias is None else y + self.bias


class ColumnParallelLinearWithReplicateOutput(ColumnParallelLinear):
    """``ColumnParallelLinear`` whose output is gathered to Replicate on ``tp_dim``."""

    def forward(self, input):
        return _replicate_on(super().forward(input), self._tp)


class RowParallelLinear(Linear):
    """Linear with ``weight`` Shard(1) on ``tp_dim``: an input sharded on its last dim gives a Partial
    output (the bias is held as Partial too, so it is added once)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device_mesh: Optional[DeviceMesh] = None,
                 tp_dim: str = "tp", dtype: Optional[torch.dtype] = None) -> None:
        self.tp_dim = tp_dim
        super().__init__(in_features, out_features, bias, device_mesh, dtype)

    def _weight_placements(self, mesh):
        self._tp = _tp_index(mesh, self.tp_dim)
        return _placements(mesh, self._tp, Shard(1)), _placements(mesh, self._tp, Partial())

    def forward(self, input):
        if self._tp is not None and input.placements[self._tp].is_replicate():
            # Replicate -> Shard is a local slice: no communication.
            pl = list(input.placements)
            pl[self._tp] = Shard(input.ndim - 1)
            input = input.redistribute(placements=pl)
        y = _linear()(input, self.weight)
        return y if self.bias is None else y + self.bias


class RowParallelLinearWithReplicateOutput(RowParallelLinear):
    """``RowParallelLinear`` whose Partial output is all-reduced to Replicate on ``tp_dim``."""

    def forward(self, input):
        return _replicate_on(super().forward(input), self._tp)


# ---------------------------------------------------------------- embedding


class Embedding(Module):
    """A lookup table ``weight`` [num_embeddings, embedding_dim]; on a mesh with ``tp_dim`` the vocab is
    sharded (Shard(0)) and the output is Partial there (each device looks up its own rows).

    >>> emb = nn.Embedding(1000, 64, device_mesh=mesh)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, device_mesh: Optional[DeviceMesh] = None, tp_dim: str = "tp",
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        if max_norm is not None:
            raise NotImplementedError("Embedding(max_norm=...) renormalises the weight in place; not supported")
        if padding_idx is not None:
            if padding_idx > 0:
                assert padding_idx < num_embeddings, "Padding_idx must be within num_embeddings"
            elif padding_idx < 0:
                assert padding_idx >= -num_embeddings, "Padding_idx must be within num_embeddings"
                padding_idx = num_embeddings + padding_idx
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.tp_dim = tp_dim
        mesh, dtype = _mesh(device_mesh), _dtype(dtype)
        self._tp = _tp_index(mesh, tp_dim)
        pl = _placements(mesh, self._tp, Shard(0))
        w = _factories.randn(num_embeddings, embedding_dim, dtype=dtype, device_mesh=mesh, placements=pl)
        if padding_idx is not None:
            # torch zeroes the padding row at initialisation.
            keep = torch.ones(num_embeddings, 1, dtype=dtype)
            keep[padding_idx] = 0
            w = w * _factories.from_torch(keep, mesh, pl)
        self.weight = Parameter(w)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class EmbeddingWithReplicateOutput(Embedding):
    """``Embedding`` whose Partial output is all-reduced to Replicate on ``tp_dim``."""

    def forward(self, input):
        return _replicate_on(super().forward(input), self._tp)


# ---------------------------------------------------------------- normalisation


def _shape(normalized_shape) -> Tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


class LayerNorm(Module):
    """``F.layer_norm`` over the trailing ``normalized_shape`` dims, with ``weight`` (ones) and ``bias``
    (zeros) replicated."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device_mesh: Optional[DeviceMesh] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.normalized_shape, self.eps, self.elementwise_affine = _shape(normalized_shape), eps, elementwise_affine
        mesh, dtype = _mesh(device_mesh), _dtype(dtype)
        r = [Replicate()] * mesh.ndim
        if elementwise_affine:
            self.weight = _const(self.normalized_shape, 1.0, mesh, r, dtype)
            if bias:
                self.bias = _const(self.normalized_shape, 0.0, mesh, r, dtype)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(Module):
    """``F.rms_norm`` with a replicated ``weight`` (ones); ``eps=None`` is torch's default."""

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True,
                 device_mesh: Optional[DeviceMesh] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.normalized_shape, self.eps, self.elementwise_affine = _shape(normalized_shape), eps, elementwise_affine
        mesh, dtype = _mesh(device_mesh), _dtype(dtype)
        if elementwise_affine:
            self.weight = _const(self.normalized_shape, 1.0, mesh, [Replicate()] * mesh.ndim, dtype)
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """``F.group_norm`` with per-channel ``weight`` (ones) and ``bias`` (zeros) replicated."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device_mesh: Optional[DeviceMesh] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        mesh, dtype = _mesh(device_mesh), _dtype(dtype)
        r = [Replicate()] * mesh.ndim
        if affine:
            self.weight = _const((num_channels,), 1.0, mesh, r, dtype)
            self.bias = _const((num_channels,), 0.0, mesh, r, dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


# ---------------------------------------------------------------- convolution


def _pair(v) -> Tuple[int, int]:
    if isinstance(v, numbers.Integral):
        return (int(v), int(v))
    v = tuple(int(x) for x in v)
    return v if len(v) == 2 else (v[0], v[0])


class Conv2d(Module):
    """``F.conv2d`` with ``weight`` [out, in/groups, kH, kW] and ``bias`` [out], replicated; with
    ``tp_dim`` on the mesh the output channels are sharded (weight and bias Shard(0)) and so is the
    output's channel dim. ``padding_mode`` other than "zeros" pads with ``F.pad`` first, as torch does.

    >>> conv = nn.Conv2d(3, 16, 3, padding=1, device_mesh=mesh)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device_mesh: Optional[DeviceMesh] = None, dtype: Optional[torch.dtype] = None,
                 tp_dim: Optional[str] = None) -> None:
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
        mesh, dtype = _mesh(device_mesh), _dtype(dtype)
        self._tp = _tp_index(mesh, tp_dim) if groups == 1 else None
        pl = _placements(mesh, self._tp, Shard(0))
        fan_in = (in_channels // groups) * self.kernel_size[0] * self.kernel_size[1]
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        self.weight = _uniform((out_channels, in_channels // groups) + self.kernel_size, bound, mesh, pl, dtype)
        if bias:
            self.bias = _uniform((out_channels,), bound, mesh, pl, dtype)
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
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
