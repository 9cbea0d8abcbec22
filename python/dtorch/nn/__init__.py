"""``dtorch.nn``: torch.nn's building blocks on distributed tensors (inference first, no autograd).

``Module`` (eval mode by default; ``__call__`` runs ``redistribute_input``, ``forward`` and
``redistribute_output``), ``Parameter``, ``Buffer``, ``ModuleList``, ``Sequential``, the layers
(``Linear`` and its tensor-parallel forms, ``Embedding``, the norms, ``Conv2d``, activations,
``Dropout``, ``Flatten``, pooling) and ``dtorch.nn.functional``. The module paths are torch's:
``dtorch.nn.parameter``, ``dtorch.nn.modules.<family>``.

>>> import torch, dtorch
>>> from dtorch import nn
>>> block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
>>> block.load_state_dict(torch_block.state_dict())
>>> y = block(dtorch.randn(1, 3, 16, 16))
"""

from . import functional
from . import parameter
from . import modules
from .parameter import Buffer, Parameter
from .modules import *  # noqa: F401,F403  (the layers; modules.__all__)

__all__ = ["functional", "parameter", "modules", "Parameter", "Buffer"] + modules.__all__
