"""Top-level forms of nn ops, with torch's top-level signatures (``torch.relu``, ``torch.softmax``,
``torch.batch_norm``, ``torch.embedding`` ...), computed by ``dtorch.nn.functional``.

Note the argument orders torch itself uses at the top level: ``batch_norm(input, weight, bias,
running_mean, running_var, training, momentum, eps, cudnn_enabled)`` and ``embedding(weight,
indices)``.

>>> y = dtorch.softmax(dtorch.relu(x), dim=-1)
>>> h = dtorch.layer_norm(x, (x.shape[-1],))
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from . import _C

__all__ = ["relu", "relu_", "softmax", "log_softmax", "batch_norm", "conv2d", "dropout", "embedding",
           "group_norm", "layer_norm", "rms_norm"]


_functional = None


def _F():
    global _functional
    if _functional is None:
        from .nn import functional  # late: dtorch.nn imports the package

        _functional = functional
    return _functional


def _check(name: str, input) -> None:
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be a dtorch.Tensor, not {type(input).__name__}")


def relu(input):
    """``max(input, 0)`` (``torch.relu``)."""
    _check("relu", input)
    return _F().relu(input)


def relu_(input):
    """In place: ``input`` rebinds to ``relu(input)`` and is returned."""
    _check("relu_", input)
    return _F().relu(input, inplace=True)


def softmax(input, dim: int, dtype: Optional[torch.dtype] = None):
    """``torch.softmax(input, dim, dtype=None)`` (and ``Tensor.softmax``)."""
    if dim is not None and isinstance(input, _C.TensorBase):
        return _C._nn_softmax(input, dim, False, dtype)  # F.softmax with an explicit dim, one frame less
    _check("softmax", input)
    return _F().softmax(input, dim=dim, dtype=dtype)


def log_softmax(input, dim: int, dtype: Optional[torch.dtype] = None):
    """``torch.log_softmax(input, dim, dtype=None)`` (and ``Tensor.log_softmax``)."""
    if dim is not None and isinstance(input, _C.TensorBase):
        return _C._nn_softmax(input, dim, True, dtype)  # F.log_softmax with an explicit dim
    _check("log_softmax", input)
    return _F().log_softmax(input, dim=dim, dtype=dtype)


def batch_norm(input, weight=None, bias=None, running_mean=None, running_var=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, cudnn_enabled: bool = True):
    """``torch.batch_norm`` (torch's top-level order: weight and bias before the running statistics).

    >>> y = dtorch.batch_norm(x, w, b, mean, var, False, 0.1, 1e-5, True)
    """
    _check("batch_norm", input)
    if running_mean is None or running_var is None:
        raise NotImplementedError("batch_norm without running_mean/running_var normalises with batch statistics "
                                  "(training); dtorch is inference-only here")
    return _F().batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def conv2d(input, weight, bias=None, stride=1, padding: Union[int, Sequence[int], str] = 0, dilation=1,
           groups: int = 1):
    """``torch.conv2d`` (the same as ``torch.nn.functional.conv2d``)."""
    _check("conv2d", input)
    return _F().conv2d(input, weight, bias, stride, padding, dilation, groups)


def dropout(input, p: float = 0.5, train: bool = True):
    """``torch.dropout(input, p, train)``."""
    _check("dropout", input)
    return _F().dropout(input, p, training=train)


def embedding(weight, indices, padding_idx: int = -1, scale_grad_by_freq: bool = False, sparse: bool = False):
    """``torch.embedding(weight, indices)``: the rows of ``weight`` at ``indices``.

    torch's top level takes the weight first; called the ``nn.functional`` way (integer
    indices first, floating weight second) it is read that way too.
    """
    if isinstance(weight, _C.TensorBase) and isinstance(indices, _C.TensorBase):
        if not weight.is_floating_point() and indices.is_floating_point():
            weight, indices = indices, weight
    _check("embedding", weight)
    return _F().embedding(indices, weight)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5, cudnn_enabled: bool = True):
    """``torch.group_norm``."""
    _check("group_norm", input)
    return _F().group_norm(input, num_groups, weight, bias, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5, cudnn_enable: bool = True):
    """``torch.layer_norm``."""
    _check("layer_norm", input)
    return _F().layer_norm(input, normalized_shape, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps: Optional[float] = None):
    """``torch.rms_norm``."""
    _check("rms_norm", input)
    return _F().rms_norm(input, normalized_shape, weight, eps)
