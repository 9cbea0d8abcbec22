"""``dtorch.nn``: neural-network building blocks on distributed tensors (inference, no autograd).

``dtorch.nn.functional`` holds torch.nn.functional's operators.

>>> import dtorch.nn.functional as F
>>> y = F.relu(dtorch.randn(4, 4))
"""

from . import functional

__all__ = ["functional"]
