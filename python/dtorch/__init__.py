"""dtorch: ordinary single-threaded PyTorch-style code on global distributed tensors.

One client thread (yours) describes the computation; a controller thread per
graph lowers it into per-device work; one worker thread per device runs it.
Ops return at once; only reading a value waits.

>>> import dtorch
>>> mesh = dtorch.DeviceMesh("cpu", [0, 1])
>>> x = dtorch.rand((4, 3), device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> y = (x * 2 + 1).sum(dim=0)     # returns at once: nothing has waited
>>> print(y)                        # the only synchronisation point
"""

import os as _os

from . import _C
from ._C import KernelError, PlacementError
from .distributed_spec import DeviceMesh, Partial, Placement, Replicate, Shard, init_device_mesh
from ._graph import Graph, TensorFuture, VoidFutureCollect, default_graph
from ._tensor import Tensor
from ._factories import (
    arange,
    empty,
    empty_like,
    from_torch,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from ._ops import add, div, divide, matmul, mm, mul, multiply, neg, negative, sub, subtract, sum, true_divide
from . import nn  # dtorch.nn and dtorch.nn.functional

# Tell the C layer which classes to hand out, and where the package lives so
# that call sites recorded for error messages skip dtorch's own frames.
_C._register(
    Tensor,
    TensorFuture,
    VoidFutureCollect,
    DeviceMesh._from_handle,
    Shard,
    Replicate(),
    Partial(),
    _os.path.join(_os.path.dirname(__file__), ""),
)

__version__ = "0.1.0"

__all__ = [
    "DeviceMesh", "init_device_mesh", "Placement", "Shard", "Replicate", "Partial",
    "Graph", "default_graph", "TensorFuture", "VoidFutureCollect",
    "Tensor", "PlacementError", "KernelError",
    "empty", "zeros", "ones", "full", "rand", "randn", "arange", "from_torch", "tensor",
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "manual_seed",
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "neg", "negative",
    "matmul", "mm", "sum",
]
