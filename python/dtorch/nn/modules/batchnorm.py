"""``BatchNorm1d`` and ``BatchNorm2d`` for inference: normalisation with the running statistics.

torch's signature, initial values (weight ones, bias zeros, running_mean zeros, running_var ones,
num_batches_tracked 0) and state_dict keys, so a trained torch model's state loads as is. All
parameters and buffers are replicated; any dim of the input may be sharded (the channel dim too).
Batch statistics (``train()`` mode, or ``track_running_stats=False``) are not supported: dtorch is
inference-first and has no autograd.

>>> bn = nn.BatchNorm2d(8, device_mesh=mesh)
>>> bn.load_state_dict(torch_bn.state_dict())
>>> y = bn(dtorch.randn(4, 8, 5, 5, device_mesh=mesh, placements=[dtorch.Shard(0)]))
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ... import _factories
from ...distributed_spec import DeviceMesh, Replicate
from .. import functional as F
from ..parameter import Buffer
from ._common import _check_sizes, _const, _where
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d"]

# torch's batch norms show ``bias=`` in their repr (and take it) in newer releases than the GPU
# machines' 2.11: the repr follows the installed torch.
_TORCH_HAS_BIAS = "bias=" in repr(torch.nn.BatchNorm1d(1))


class _BatchNorm(Module):
    """The common part of the batch-norm modules (torch's ``_NormBase`` + ``_BatchNorm``)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Optional[torch.dtype] = None, *,
                 bias: bool = True, device_mesh: Optional[DeviceMesh] = None, graph: Any = None) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _check_sizes((num_features,))
        w = _where(device, device_mesh, dtype, graph)
        if affine:
            self.weight = _const((num_features,), 1.0, w)
            if bias:
                self.bias = _const((num_features,), 0.0, w)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.running_mean = Buffer(_const((num_features,), 0.0, w))
            self.running_var = Buffer(_const((num_features,), 1.0, w))
            self.num_batches_tracked = Buffer(_factories.zeros((), dtype=torch.long, device_mesh=w.mesh,
                                                               placements=[Replicate()] * w.mesh.ndim, graph=w.graph))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def _check_input_dim(self, input: Any) -> None:
        raise NotImplementedError

    def forward(self, input: Any) -> Any:
        self._check_input_dim(input)
        if self.training or self.running_mean is None or self.running_var is None:
            raise NotImplementedError(
                f"{type(self).__name__}: batch statistics (train() mode or track_running_stats=False) are not "
                "supported; dtorch is inference-first: call eval() and use the running statistics")
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False,
                            0.0 if self.momentum is None else self.momentum, self.eps)

    def extra_repr(self) -> str:
        bias = f"bias={self.bias is not None}, " if _TORCH_HAS_BIAS else ""
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"{bias}track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of [N, C] or [N, C, L] inputs with the running statistics.

    >>> nn.BatchNorm1d(16, device_mesh=mesh)(dtorch.randn(4, 16, device_mesh=mesh))
    """

    def _check_input_dim(self, input: Any) -> None:
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of [N, C, H, W] inputs with the running statistics.

    >>> nn.BatchNorm2d(8, device_mesh=mesh)(dtorch.randn(2, 8, 5, 5, device_mesh=mesh))
    """

    def _check_input_dim(self, input: Any) -> None:
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")
