"""``dtorch.nn``: torch.nn's building blocks on distributed tensors (inference, no autograd).

``Module``, ``Parameter``, ``ModuleList``, ``Sequential``, the layers (``Linear`` and its
tensor-parallel forms, ``Embedding``, ``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``Conv2d``,
activations, ``Dropout``) and ``dtorch.nn.functional``.

>>> import torch, dtorch
>>> from dtorch import nn
>>> block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
>>> block.load_state_dict(torch_block.state_dict())
>>> y = block(dtorch.randn(1, 3, 16, 16))
"""

from . import functional
from .layers import (
    GELU,
    ColumnParallelLinear,
    ColumnParallelLinearWithReplicateOutput,
    Conv2d,
    Dropout,
    Embedding,
    EmbeddingWithReplicateOutput,
    GroupNorm,
    Identity,
    LayerNorm,
    Linear,
    ReLU,
    RMSNorm,
    RowParallelLinear,
    RowParallelLinearWithReplicateOutput,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from .module import Module, ModuleList, Parameter, Sequential

__all__ = [
    "functional", "Module", "Parameter", "ModuleList", "Sequential",
    "Identity", "Linear", "ColumnParallelLinear", "RowParallelLinear", "ColumnParallelLinearWithReplicateOutput",
    "RowParallelLinearWithReplicateOutput", "Embedding", "EmbeddingWithReplicateOutput", "LayerNorm", "RMSNorm",
    "GroupNorm", "Conv2d", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh", "Softmax", "Dropout",
]
