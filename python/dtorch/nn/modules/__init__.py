"""``dtorch.nn.modules``: the layer modules, one submodule per family as in ``torch.nn.modules``.

>>> from dtorch.nn.modules.linear import ColumnParallelLinear
>>> from dtorch.nn.modules import LayerNorm
"""

from .module import Module
from .container import ModuleList, Sequential
from .activation import ELU, GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from .linear import (
    ColumnParallelLinear,
    ColumnParallelLinearWithReplicateInputOutput,
    ColumnParallelLinearWithReplicateOutput,
    Identity,
    Linear,
    ReplicateParallelLinear,
    RowParallelLinear,
    RowParallelLinearWithReplicateOutput,
)
from .conv import Conv2d
from .dropout import Dropout
from .embedding import Embedding, EmbeddingWithReplicateOutput
from .normalization import GroupNorm, LayerNorm, RMSNorm
from .batchnorm import BatchNorm1d, BatchNorm2d
from .flatten import Flatten
from .pooling import (
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool2d,
    GlobalAvgPool2d,
    GlobalMaxPool2d,
    MaxPool2d,
)

__all__ = [
    "Module", "ModuleList", "Sequential",
    "ReLU", "Sigmoid", "LeakyReLU", "ELU", "SiLU", "GELU", "Tanh", "Softmax", "LogSoftmax",
    "Identity", "Linear", "ColumnParallelLinear", "ColumnParallelLinearWithReplicateOutput",
    "ColumnParallelLinearWithReplicateInputOutput", "RowParallelLinear", "RowParallelLinearWithReplicateOutput",
    "ReplicateParallelLinear",
    "Conv2d", "Dropout", "Embedding", "EmbeddingWithReplicateOutput", "LayerNorm", "RMSNorm", "GroupNorm",
    "BatchNorm1d", "BatchNorm2d", "Flatten",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "GlobalAvgPool2d", "GlobalMaxPool2d",
]
