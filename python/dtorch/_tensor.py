"""dtorch.Tensor: a global distributed tensor.

The number protocol, the ops and the metadata live in C (``_C.TensorBase``);
this class adds the conveniences that read values (``item``, ``tolist``,
``repr``...) and the argument handling of ``redistribute``.

>>> import dtorch
>>> mesh = dtorch.DeviceMesh("cpu", [0, 1])
>>> x = dtorch.ones(2, 2, device_mesh=mesh)
>>> x
tensor([[1., 1.],
        [1., 1.]])
shape=torch.Size([2, 2]), dtype=torch.float32, device_mesh=DeviceMesh('cpu', [0, 1]), placements=[Replicate()]
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from . import _C
from .distributed_spec import DeviceMesh, Placement, _placements_to_raw

__all__ = ["Tensor"]


class Tensor(_C.TensorBase):
    """A global tensor laid out on a device mesh with one placement per mesh dimension.

    ``Tensor(torch_tensor, device=None, device_mesh=None, placements=None)``
    distributes a full torch tensor; ``Tensor()`` is an empty float tensor and
    ``Tensor(2, 3)`` an uninitialised one, as in torch.
    """

    __slots__ = ()

    def __new__(
        cls,
        *args: Any,
        device=None,
        device_mesh: Optional[DeviceMesh] = None,
        placements: Optional[Sequence[Placement]] = None,
        dtype: Optional[torch.dtype] = None,
        graph=None,
    ) -> "Tensor":
        from . import _factories as f

        kw = dict(device=device, device_mesh=device_mesh, placements=placements, graph=graph)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            t = args[0] if dtype is None else args[0].to(dtype)
            return f.from_torch(t, **kw)
        if len(args) == 1 and isinstance(args[0], Tensor):
            raise TypeError("dtorch.Tensor(t) takes a torch.Tensor; a dtorch.Tensor is already one")
        if not args or all(isinstance(a, int) and not isinstance(a, bool) for a in args) or (
            len(args) == 1 and isinstance(args[0], torch.Size)
        ):
            return f.empty(*args if args else (0,), dtype=dtype or torch.get_default_dtype(), **kw)
        data = torch.Tensor(*args) if dtype is None else torch.tensor(*args, dtype=dtype)
        return f.from_torch(data, **kw)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    # ------------------------------------------------------------ values (synchronise)

    def item(self) -> Any:
        """The single value as a Python number (waits)."""
        n = self.numel()
        if n != 1:
            raise ValueError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return self.to_torch().item()

    def tolist(self) -> Any:
        """The value as nested Python lists (waits)."""
        return self.to_torch().tolist()

    def numpy(self):
        """The value as a numpy array (waits)."""
        return self.to_torch().cpu().numpy()

    def __bool__(self) -> bool:
        n = self.numel()
        if n == 0:
            raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
        if n > 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.to_torch())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __repr__(self) -> str:
        return (
            f"{self.to_torch()!r}\n"
            f"shape={self.shape}, dtype={self.dtype}, device_mesh={self.device_mesh!r}, "
            f"placements={self.placements!r}"
        )

    __str__ = __repr__

    # ------------------------------------------------------------ layout

    def redistribute(
        self, device_mesh: Optional[DeviceMesh] = None, placements: Optional[Sequence[Placement]] = None
    ) -> "Tensor":
        """The same global value with new ``placements`` (default: all Replicate) on ``device_mesh``.

        >>> y = x.redistribute(placements=[dtorch.Shard(0)])
        """
        if device_mesh is not None and not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"device_mesh must be a DeviceMesh, not {type(device_mesh).__name__}")
        mesh = device_mesh if device_mesh is not None else self.device_mesh
        raw = _placements_to_raw(placements, mesh, self.ndim)
        return self._redistribute(device_mesh, raw)

    def full_tensor(self) -> torch.Tensor:
        """Same as ``to_torch()`` (torch DTensor's name)."""
        return self.to_torch()

    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch functions do not take dtorch tensors: say so instead of failing obscurely."""
        raise TypeError(
            f"{getattr(func, '__name__', func)}: torch functions do not take dtorch tensors; use the dtorch "
            f"function of the same name, or read the value with .to_torch()"
        )
