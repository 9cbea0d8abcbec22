"""``dtorch.nn.functional``: torch.nn.functional's operators on distributed tensors.

Each function takes torch's arguments and returns what torch returns, computed
shard by shard without communication; placements each op accepts are listed in
``docs/operators.md`` (and ``include/dtorch/dtorch.h``). A placement an op
cannot take raises ``dtorch.PlacementError`` naming the ``redistribute`` that
fixes it. Inference only: there is no autograd.

>>> import dtorch, torch
>>> import dtorch.nn.functional as F
>>> mesh = dtorch.DeviceMesh("cpu", [0, 1])
>>> x = dtorch.randn(4, 8, device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> y = F.softmax(F.gelu(x), dim=-1)        # Shard(0) stays Shard(0)
>>> w = dtorch.randn(100, 8, device_mesh=mesh, placements=[dtorch.Shard(0)])
>>> e = F.embedding(dtorch.tensor([[1, 99]]), w)  # vocab-parallel lookup -> Partial()

The naming rule of the original DTorch holds: every public function here exists in
``torch.nn.functional`` (with torch's meaning); dtorch's own fused helpers are private
(``_apply_rotary_emb``, ``_layer_norm_mul_add``, ``_silu_linear_chunk``), and ``SdpaOption`` (the
option type of ``scaled_dot_product_attention``, also ``dtorch.SdpaOption``) stays out of ``__all__``.

The functions are the nn family's (``dtorch._ops_nn``) and, for ``linear``, the linear algebra
family's (``dtorch.nn._linalg``); this module is their torch-shaped namespace.
"""

from .. import _ops_nn
# Re-exported (the "as" form says so): the option type of scaled_dot_product_attention, and dtorch's
# fused helpers that the applications call as F._...
from .._ops_nn import SdpaOption as SdpaOption
from .._ops_nn import _apply_rotary_emb as _apply_rotary_emb
from .._ops_nn import _layer_norm_mul_add as _layer_norm_mul_add
from ._linalg import _silu_linear_chunk as _silu_linear_chunk
from ._linalg import linear

__all__ = ["linear"] + _ops_nn.__all__

for _name in _ops_nn.__all__:
    globals()[_name] = getattr(_ops_nn, _name)
del _name

# The original DTorch's list of this module's public functions (its tests iterate over it).
_function_names = list(__all__)

