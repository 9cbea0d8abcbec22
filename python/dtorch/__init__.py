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

import torch as _torch  # first: the extension links the libraries this torch loaded

from . import _C


def _check_torch_version():
    # The extension is C++-ABI-bound to the torch it was built against: a
    # different major.minor would fail later in obscure ways, so say it now.
    built = _C.TORCH_BUILD_VERSION.split(".")[:2]
    running = _torch.__version__.split("+")[0].split(".")[:2]
    if built != running:
        raise ImportError(
            f"dtorch was built against torch {_C.TORCH_BUILD_VERSION} but torch {_torch.__version__} is "
            f"installed; rebuild dtorch (tools/setup.sh, or pip install . again) against this torch"
        )


_check_torch_version()
from ._C import KernelError, PlacementError
from .distributed_spec import (
    DeviceMesh,
    Partial,
    Placement,
    Replicate,
    Shard,
    assign_layers_to_stages,
    get_default_device_mesh,
    init_device_mesh,
)
from ._graph import (
    Graph,
    GraphOption,
    TensorFuture,
    VoidFutureCollect,
    default_graph,
    empty_cache,
    memory_stats,
    reset_peak_memory_stats,
    synchronize,
)
from ._tensor import (
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
    Tensor,
)
from ._layout import tensors_redistribute_by_dict
from ._factories import (
    arange,
    empty,
    empty_like,
    from_numpy,
    from_torch,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from . import nn as nn

# The op families, each imported once. A family's functions are its __all__, bound here by the loop;
# the nn family's __all__ is torch.nn.functional's names (dtorch.nn.functional's), and its torch
# top-level forms (dtorch.relu, dtorch.softmax, ...) are its TORCH_FORMS. Each top-level name comes
# from exactly one family (tests/python/test_method_table.py checks that no two export the same
# name); Tensor's methods come from the table in _methods.py.
from . import (
    _ops_elementwise,  # torch's elementwise functions (add, exp, where, ...)
    _ops_linalg,  # matmul, mm, bmm, einsum, ...
    _ops_masked_scatter,
    _ops_method_forms,  # dtorch.exp_(x), dtorch.numel(x), ... (torch's method forms)
    _ops_nn,  # relu, softmax, batch_norm, ... with torch's top-level signatures
    _ops_reduce,  # sum, mean, amax, ...
    _ops_sort_scan,  # sort, argsort, topk, cumsum, nonzero
    _ops_views,  # the views and shape family
)

for _family in (_ops_views, _ops_reduce, _ops_linalg, _ops_elementwise, _ops_sort_scan, _ops_method_forms):
    for _name in _family.__all__:
        globals()[_name] = getattr(_family, _name)
globals().update(_ops_nn.TORCH_FORMS)
del _family, _name
masked_scatter = _ops_masked_scatter.masked_scatter
SdpaOption = _ops_nn.SdpaOption

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

__version__ = _C.__version__

# The original DTorch's public module paths. ``dtorch.tensor`` and ``dtorch.memory_stats`` are
# modules that stay callable as the factory and the function of the same names.
# (import_module: "from . import tensor" would just bind the function already named tensor here.)
import importlib as _importlib  # noqa: E402

tensor = _importlib.import_module(".tensor", __name__)  # noqa: F811 - replaces the factory, callable as it
memory_stats = _importlib.import_module(".memory_stats", __name__)  # noqa: F811 - the same for the function
from . import cluster as cluster, cuda as cuda, global_option as global_option, graph as graph  # noqa: E402
from . import profiler as profiler, util as util  # noqa: E402
from ._explain import Explain, ExplainRecord, explain  # noqa: E402
from ._local_map import local_map  # noqa: E402
from . import library as library  # noqa: E402
from . import compiled_op as compiled_op  # noqa: E402
from .cluster import MainNode  # noqa: E402
from .global_option import GlobalOption  # noqa: E402
from .memory_stats import MemoryStat, MemoryStats  # noqa: E402
# The diffusion accelerators' switches (First-Block-Cache, TeaCache): the original DTorch's ExecuteConfig.
from .applications._cache import ExecuteConfig  # noqa: E402

# torch's names that dtorch code uses as its own: dtypes and the types next to them. After this
# point the module's globals "bool", "float", "int", ... are torch dtypes, so nothing below may
# call the builtins of those names.
from torch import Generator, Size, device, dtype, finfo, iinfo  # noqa: E402

# Every torch dtype (dtorch.float16, dtorch.bfloat16, ...): torch 2.13 has 56 and each release adds
# some, so they are taken from torch rather than listed.
_DTYPE_NAMES = tuple(n for n in dir(_torch) if not n.startswith("_") and isinstance(getattr(_torch, n), _torch.dtype))
globals().update({n: getattr(_torch, n) for n in _DTYPE_NAMES})
# dtorch.type (OperatorFormat, PaddingType, PoolingKind) is a public module of the original DTorch's API,
# so the package's global "type" is that module, not the builtin: it is bound last, and nothing in this
# file calls the builtin type().
from . import type  # noqa: E402,F401,A001

__all__ = [
    "DeviceMesh", "init_device_mesh", "Placement", "Shard", "Replicate", "Partial",
    "Graph", "default_graph", "TensorFuture", "VoidFutureCollect",
    "synchronize", "memory_stats", "reset_peak_memory_stats", "empty_cache",
    "Tensor", "PlacementError", "KernelError",
    "empty", "zeros", "ones", "full", "rand", "randn", "arange", "from_torch", "tensor",
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "manual_seed",
    "SdpaOption",
]
__all__ += _ops_reduce.__all__ + _ops_linalg.__all__ + _ops_elementwise.__all__
__all__ += ["randint", "randint_like"] + _ops_sort_scan.__all__
__all__ += list(_ops_nn.TORCH_FORMS) + _ops_method_forms.__all__ + list(_DTYPE_NAMES) + [
    "GraphOption", "get_default_device_mesh", "assign_layers_to_stages", "tensors_redistribute_by_dict", "from_numpy",
    "FloatTensor", "HalfTensor", "BFloat16Tensor", "DoubleTensor", "LongTensor", "IntTensor", "ShortTensor",
    "CharTensor", "ByteTensor", "BoolTensor", "MainNode", "GlobalOption", "MemoryStat", "MemoryStats",
    "Generator", "Size", "device", "dtype", "finfo", "iinfo", "explain", "Explain", "ExplainRecord",
    "ExecuteConfig",
    "local_map",
]
