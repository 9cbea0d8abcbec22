"""dtorch.nn.functional: torch.nn.functional's ops on distributed tensors.

Each operator family adds its functions from its own private module.

>>> import dtorch.nn.functional as F
>>> y = F.linear(x, weight, bias)
"""

from ._linalg import linear  # noqa: F401  (linear algebra family)
