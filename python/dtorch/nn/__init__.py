"""dtorch.nn: functional ops (and, later, modules) on distributed tensors.

>>> import dtorch.nn.functional as F
>>> y = F.linear(x, w, b)
"""

from . import functional  # noqa: F401
