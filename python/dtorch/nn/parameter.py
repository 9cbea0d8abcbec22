"""``Parameter`` and ``Buffer``: dtorch tensors that a ``Module`` registers when they are assigned.

Both are ``dtorch.Tensor`` subclasses that share the value of the tensor they are made from (a
dtorch tensor) or hold a full torch tensor distributed as ``dtorch.from_torch`` does. Assigning a
``Parameter`` to a module attribute registers a parameter; assigning a ``Buffer`` registers a
buffer (persistent or not, as ``torch.nn.Buffer`` does in torch 2.5+).

>>> import torch, dtorch
>>> from dtorch import nn
>>> class Scale(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.w = nn.Parameter(torch.ones(4))
...         self.mask = nn.Buffer(torch.zeros(4), persistent=False)
>>> list(Scale().state_dict())
['w']
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from .. import _C, _factories
from .._tensor import Tensor
from ..distributed_spec import DeviceMesh, Placement

__all__ = ["Parameter", "Buffer"]


def _alias(cls: type, data: Any, device_mesh: Optional[DeviceMesh], placements: Optional[Sequence[Placement]],
           what: str) -> Tensor:
    """A new ``cls`` object on ``data``'s value (a dtorch tensor) or on a distributed torch tensor."""
    if data is None:
        data = _factories.empty(0, device_mesh=device_mesh)
    elif isinstance(data, torch.Tensor):
        data = _factories.from_torch(data, device_mesh=device_mesh, placements=placements)
    elif not isinstance(data, _C.TensorBase):
        raise TypeError(f"{what}(data): data must be a dtorch or torch tensor, not {type(data).__name__}")
    elif device_mesh is not None or placements is not None:
        data = data.redistribute(device_mesh, placements)
    return _C._nn_alias(data, cls)


class Parameter(Tensor):
    """A ``dtorch.Tensor`` that a ``Module`` registers as a parameter when assigned as an attribute.

    ``Parameter(data)`` takes a dtorch tensor (the parameter shares its value) or a torch tensor
    (distributed with ``device_mesh`` and ``placements``, as ``dtorch.from_torch``).

    >>> w = nn.Parameter(torch.ones(3, 4), device_mesh=mesh, placements=[dtorch.Shard(0)])
    """

    __slots__ = ()

    def __new__(cls, data: Any = None, requires_grad: bool = True, *, device_mesh: Optional[DeviceMesh] = None,
                placements: Optional[Sequence[Placement]] = None) -> "Parameter":
        return _alias(cls, data, device_mesh, placements, "Parameter")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def requires_grad(self) -> bool:
        """Always False: dtorch has no autograd yet."""
        return False

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__


class Buffer(Tensor):
    """A ``dtorch.Tensor`` that a ``Module`` registers as a buffer when assigned as an attribute, as
    ``torch.nn.Buffer``: state that is not a parameter (running statistics, masks, caches).

    ``persistent=False`` keeps it out of ``state_dict``. ``data`` is a dtorch tensor (shared) or a
    torch tensor (distributed with ``device_mesh`` and ``placements``).

    >>> m = nn.Module()
    >>> m.running_mean = nn.Buffer(torch.zeros(8))
    >>> [name for name, _ in m.named_buffers()]
    ['running_mean']
    """

    __slots__ = ()

    #: Whether the buffer goes into ``state_dict`` (a class attribute: dtorch tensors carry no
    #: instance fields, so a non-persistent buffer is an object of a private subclass).
    persistent: bool = True

    def __new__(cls, data: Any = None, *, persistent: bool = True, device_mesh: Optional[DeviceMesh] = None,
                placements: Optional[Sequence[Placement]] = None) -> "Buffer":
        if cls is Buffer and not persistent:
            cls = _NonPersistentBuffer
        return _alias(cls, data, device_mesh, placements, "Buffer")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class _NonPersistentBuffer(Buffer):
    """A ``Buffer(..., persistent=False)``."""

    __slots__ = ()
    persistent = False
