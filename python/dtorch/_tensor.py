"""dtorch.Tensor: a global distributed tensor.

The number protocol, the elementwise ops and the metadata live in C
(``_C.TensorBase``); this class adds the conveniences that read values
(``item``, ``tolist``, ``repr``...) and the argument handling of
``redistribute``, and takes every other method from the one method table
(``_methods.py``) when it is created.

>>> import dtorch
>>> mesh = dtorch.DeviceMesh("cpu", [0, 1])
>>> x = dtorch.ones(2, 2, device_mesh=mesh)
>>> x
tensor([[1., 1.],
        [1., 1.]])
shape=torch.Size([2, 2]), dtype=torch.float32, device_mesh=DeviceMesh('cpu', [0, 1]), placements=[Replicate()]
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch

from . import _C, _factories, _torch_function
from . import _methods  # the families; none of them imports this module at import time
from .distributed_spec import DeviceMesh, Placement, Replicate, Shard, _as_placement, _placements_to_raw

__all__ = [
    "Tensor",
    "FloatTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "DoubleTensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
]

# torch's legacy type names ('torch.FloatTensor', ...) per dtype, as Tensor.type() reports them.
_TYPE_NAMES = {
    torch.float32: "FloatTensor",
    torch.float64: "DoubleTensor",
    torch.float16: "HalfTensor",
    torch.bfloat16: "BFloat16Tensor",
    torch.int64: "LongTensor",
    torch.int32: "IntTensor",
    torch.int16: "ShortTensor",
    torch.int8: "CharTensor",
    torch.uint8: "ByteTensor",
    torch.bool: "BoolTensor",
    torch.complex64: "ComplexFloatTensor",
    torch.complex128: "ComplexDoubleTensor",
}
_TYPE_DTYPES = {name: dtype for dtype, name in _TYPE_NAMES.items()}


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
        f = _factories
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
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
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

        Placements may be given as strings ("S0", "R", "P"); a placements list passed alone in
        the mesh's position is taken as the placements.

        >>> y = x.redistribute(placements=[dtorch.Shard(0)])
        >>> z = x.redistribute(mesh, ["S0"])
        """
        if (placements is None and isinstance(device_mesh, (list, tuple)) and device_mesh
                and all(isinstance(p, (Placement, str)) for p in device_mesh)):
            device_mesh, placements = None, device_mesh
        if device_mesh is not None and not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"device_mesh must be a DeviceMesh, not {type(device_mesh).__name__}")
        mesh = device_mesh if device_mesh is not None else self.device_mesh
        raw = _placements_to_raw(placements, mesh, self.ndim)
        return self._redistribute(device_mesh, raw)

    def redistribute_(self, device_mesh: Optional[DeviceMesh] = None,
                      placements: Optional[Sequence[Placement]] = None) -> "Tensor":
        """In place: rebinds this tensor to ``redistribute(device_mesh, placements)`` and returns it."""
        return _C._rebind(self, self.redistribute(device_mesh, placements))

    def check_placement(self, mesh_dim: Union[int, str], placement: Union[Placement, str]) -> bool:
        """Whether the tensor's placement on mesh dim ``mesh_dim`` (an index or a name) is ``placement``.

        A name the mesh does not have is a dim of size 1, where every tensor is Replicate.

        >>> x = dtorch.ones(4, device_mesh=mesh, placements=[dtorch.Shard(0)])
        >>> x.check_placement(0, dtorch.Shard(0)), x.check_placement(0, "S0"), x.check_placement("pp", "R")
        (True, True, True)
        """
        want = _as_placement(placement, "check_placement(): placement")
        if isinstance(want, Shard) and want.dim < 0:
            want = Shard(want.dim + self.ndim)
        mesh = self.device_mesh
        if isinstance(mesh_dim, str):
            if not mesh.has_dim_name(mesh_dim):
                return want.is_replicate()
            index = mesh.dim_name_index(mesh_dim)
        elif isinstance(mesh_dim, int) and not isinstance(mesh_dim, bool):
            if not -mesh.ndim <= mesh_dim < mesh.ndim:
                raise IndexError(f"check_placement(): mesh dim {mesh_dim} is out of range for a {mesh.ndim}-D mesh")
            index = mesh_dim % mesh.ndim
        else:
            raise TypeError(f"check_placement(): mesh_dim must be an int or a dim name, not {type(mesh_dim).__name__}")
        return self.placements[index] == want

    # ------------------------------------------------------------ torch conveniences

    @property
    def data(self) -> "Tensor":
        """The same value as a new tensor object (torch's ``.data``). Assigning ``x.data = y``
        rebinds ``x`` to ``y``'s value (same graph), as torch does; other references to the
        object ``x`` see the new value."""
        return self._alias()

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, _C.TensorBase):
            raise TypeError(f"data must be a dtorch.Tensor, not {type(value).__name__}")
        _C._rebind(self, value)

    def detach(self) -> "Tensor":
        """A new tensor object for the same value (dtorch has no autograd: nothing else changes)."""
        return self._alias()

    def detach_(self) -> "Tensor":
        """Returns the tensor itself (no autograd)."""
        return self

    @property
    def requires_grad(self) -> bool:
        """Always False: dtorch has no autograd."""
        return False

    @property
    def is_cuda(self) -> bool:
        """True on a CUDA mesh."""
        return self.device_mesh.device_type == "cuda"

    @property
    def is_cpu(self) -> bool:
        """True on a CPU mesh."""
        return self.device_mesh.device_type == "cpu"

    def is_contiguous(self, memory_format=torch.contiguous_format) -> bool:
        """Always True: ``view()`` never fails where ``reshape()`` would succeed. A device may hold a
        strided view (as eager torch would); the client does not wait to look."""
        return True

    def _to_device_type(self, device_type: str, mesh: Optional[DeviceMesh] = None) -> "Tensor":
        """The same value and placements on a mesh of ``device_type`` with the same ids (or ``mesh``)."""
        src = self.device_mesh
        if mesh is None:
            if src.device_type == device_type:
                return self
            mesh = DeviceMesh(device_type, src.mesh.tolist(), mesh_dim_names=src.mesh_dim_names)
        if not self.graph.satisfy(mesh):
            raise RuntimeError(f"{device_type}(): {str(mesh.first_device()) if mesh.size() == 1 else mesh!r} is not "
                               f"available on this machine (torch.cuda.is_available() is "
                               f"{torch.cuda.is_available()})")
        if mesh.device_type == src.device_type:
            return self.redistribute(mesh, self.placements)
        # Between device types the value travels through the client (this waits for it).
        return _factories.from_torch(self.to_torch().to(mesh.first_device()), mesh,
                          [p if not p.is_partial() else Replicate() for p in self.placements], graph=self.graph)

    def cpu(self) -> "Tensor":
        """The tensor on a CPU mesh of the same shape and ids (itself when already there).

        >>> x.cpu() is x   # a CPU tensor
        True
        """
        return self._to_device_type("cpu")

    def cuda(self, device: Union[None, int, str, torch.device] = None, non_blocking: bool = False) -> "Tensor":
        """The tensor on a CUDA mesh of the same shape and ids (itself when already there); ``device``
        names the GPU of a one-device tensor. RuntimeError where the GPUs are not available."""
        if device is None:
            return self._to_device_type("cuda")
        d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if d.type != "cuda":
            raise ValueError(f"cuda(): expected a CUDA device, got {d}")
        if self.device_mesh.size() != 1:
            raise ValueError(f"cuda({str(d)!r}): a tensor on {self.device_mesh.size()} devices moves with "
                             f"redistribute(device_mesh=...), not to one device")
        mesh = DeviceMesh(f"cuda:{d.index or 0}")
        if mesh == self.device_mesh:
            return self
        return self._to_device_type("cuda", mesh)

    def type(self, dtype: Union[None, str, torch.dtype, type] = None, non_blocking: bool = False, **kwargs):
        """Without ``dtype``: torch's type name, e.g. ``'torch.FloatTensor'``. With one (a torch.dtype,
        a name such as ``'torch.DoubleTensor'``, or a class such as ``dtorch.DoubleTensor``): the cast.

        >>> dtorch.ones(2).type(), dtorch.ones(2).type(torch.int64).dtype
        ('torch.FloatTensor', torch.int64)
        """
        if dtype is None:
            name = _TYPE_NAMES.get(self.dtype, "Tensor")
            return f"torch.cuda.{name}" if self.is_cuda else f"torch.{name}"
        if isinstance(dtype, str):
            key = dtype.replace("torch.cuda.", "").replace("torch.", "")
            if key not in _TYPE_DTYPES:
                raise ValueError(f"invalid type: {dtype!r}")
            dtype = _TYPE_DTYPES[key]
        elif isinstance(dtype, _TypedTensorMeta):
            dtype = dtype.dtype
        elif isinstance(dtype, type) and dtype.__module__ == "torch" and dtype.__name__ in _TYPE_DTYPES:
            dtype = _TYPE_DTYPES[dtype.__name__]  # torch.FloatTensor and friends
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"type(): expected a dtype, a type name or a tensor type, got {dtype!r}")
        return self if dtype == self.dtype else self._cast(dtype)

    def full_tensor(self) -> torch.Tensor:
        """Same as ``to_torch()`` (torch DTensor's name)."""
        return self.to_torch()

    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """A torch function (``torch.cat``, ``torch.nn.functional.gelu``, ``torch.Tensor.sum``, ...)
        called with dtorch tensors runs dtorch's function of the same name with the same arguments;
        one dtorch lacks is a TypeError naming ``dtorch.local_map`` (``_torch_function.py``).

        >>> torch.matmul(x, torch.nn.functional.gelu(w))   # x, w dtorch tensors: a dtorch tensor
        """
        return _torch_function.torch_function(func, types, args, kwargs)

    # Every family method (views, reductions, ...): exactly the table's PY_METHODS, put into the
    # class namespace as the class is created (no attribute is set on the class afterwards).
    locals().update(_methods.PY_METHODS)


# ------------------------------------------------------------------ typed tensor classes


class _TypedTensorMeta(type):
    """``isinstance(x, dtorch.FloatTensor)``: a dtorch.Tensor of that dtype."""

    dtype: torch.dtype

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __subclasscheck__(cls, sub) -> bool:
        return isinstance(sub, _TypedTensorMeta) and sub.dtype == cls.dtype

    def __repr__(cls) -> str:
        return f"<class 'dtorch.{cls.__name__}'>"


def _typed(name: str, dtype: torch.dtype) -> type:
    def __new__(cls, *args, **kwargs):
        kwargs.setdefault("dtype", dtype)
        return Tensor(*args, **kwargs)

    doc = (f"A dtorch.Tensor of dtype {dtype}, for annotations and isinstance; calling it is "
           f"``dtorch.Tensor(..., dtype={dtype})``.\n\n    >>> isinstance(dtorch.ones(2, dtype={dtype}), "
           f"dtorch.{name})\n    True\n")
    return _TypedTensorMeta(name, (), {"dtype": dtype, "__new__": __new__, "__doc__": doc, "__module__": "dtorch"})


FloatTensor = _typed("FloatTensor", torch.float32)
HalfTensor = _typed("HalfTensor", torch.float16)
BFloat16Tensor = _typed("BFloat16Tensor", torch.bfloat16)
DoubleTensor = _typed("DoubleTensor", torch.float64)
LongTensor = _typed("LongTensor", torch.int64)
IntTensor = _typed("IntTensor", torch.int32)
ShortTensor = _typed("ShortTensor", torch.int16)
CharTensor = _typed("CharTensor", torch.int8)
ByteTensor = _typed("ByteTensor", torch.uint8)
BoolTensor = _typed("BoolTensor", torch.bool)
