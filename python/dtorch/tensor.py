"""``dtorch.tensor``: the tensor type and its factory under the original DTorch's path.

The module is callable: ``dtorch.tensor(data)`` is the factory ``dtorch.tensor.tensor(data)``.

>>> from dtorch.tensor import Tensor, TensorFuture, tensor
>>> isinstance(dtorch.tensor([1.0, 2.0]), Tensor)
True
"""

from ._factories import tensor
from ._graph import TensorFuture
from ._modules import make_callable
from ._tensor import Tensor

__all__ = ["Tensor", "tensor", "TensorFuture"]

make_callable(__name__, tensor)
